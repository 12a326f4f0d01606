"""The README's and docs/'s Python snippets run as written (each page's snippets in one
fresh interpreter, in order, as a reader pasting them would), and docs/architecture.md's
table names modules and functions that exist.

A snippet whose first line is ``# requires: mod1, mod2`` needs optional extras: it runs
only where each module is installed, and the snippets after it on its page (which may
use what it made) are then skipped with it. A snippet that starts a Dask cluster is not
run here (10 s or more; tests/test_distributed*.py cover that path), nor are the ones
after it. The pages run at the same time, in their own processes, to keep the test short.
"""
from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
TIMEOUT_S = 240

CHECKS = '''
assert max(c.max_error for c in check) < 1e-6
(jac,) = check
assert jac.theoretical.ravel().tolist() == [0.0, 4.0, -6.0]     # max(w*w, 1): 0 where 1 wins
x = y.op.inputs[0]
with gf.Session(y.op.graph) as sess:
    assert sess.run(y, {x: np.zeros(8, np.int32)}).tolist() == [0, 11, 0, 10, 9, 0, 0, 12]
print("README snippets ok")
'''


def python_snippets(page: pathlib.Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


def requirements(snippet: str) -> list[str]:
    """The modules a snippet's ``# requires:`` line names (none without one)."""
    first = snippet.split("\n", 1)[0].strip()
    if not first.startswith("# requires:"):
        return []
    return [m.strip() for m in first.split(":", 1)[1].split(",") if m.strip()]


def runnable_prefix(snippets: list[str]) -> tuple[list[str], list[str]]:
    """The snippets up to the first that cannot run here, and why it cannot."""
    for k, snippet in enumerate(snippets):
        missing = [m for m in requirements(snippet) if importlib.util.find_spec(m) is None]
        if "distributed.LocalCluster(" in snippet:
            missing.append("a Dask cluster")
        if missing:
            return snippets[:k], missing
    return snippets, []


@dataclass
class SnippetRun:
    """Snippets running in a fresh interpreter in their own folder; the output goes to
    files there (a pipe nobody reads yet could fill and stall the run)."""

    proc: subprocess.Popen
    folder: pathlib.Path

    def finish(self) -> tuple[int, str, str]:
        """The exit status, stdout and stderr (-1 and a note when it timed out)."""
        try:
            code, note = self.proc.wait(timeout=TIMEOUT_S), ""
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code, note = -1, f"\n(timed out after {TIMEOUT_S} s)"
        return (code, (self.folder / "stdout").read_text(),
                (self.folder / "stderr").read_text() + note)


def _start(name: str, source: str, workdir: pathlib.Path) -> SnippetRun:
    folder = workdir / name
    folder.mkdir()
    (folder / "snippets.py").write_text(source)
    with open(folder / "stdout", "w") as out, open(folder / "stderr", "w") as err:
        proc = subprocess.Popen([sys.executable, "snippets.py"], cwd=folder, stdout=out,
                                stderr=err)
    return SnippetRun(proc, folder)


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory):
    """Every page's runnable snippets, started at once: page name -> (SnippetRun or None,
    what the snippets left out need)."""
    workdir = tmp_path_factory.mktemp("doc_snippets")
    runs = {}
    for page in DOCS:
        snippets, missing = runnable_prefix(python_snippets(page))
        runs[page.name] = (_start(page.stem, "\n".join(snippets), workdir) if snippets else None,
                           missing)
    yield runs
    for run, _ in runs.values():
        if run is not None and run.proc.poll() is None:
            run.proc.kill()


def test_readme_snippets_run(tmp_path):
    blocks = python_snippets(ROOT / "README.md")
    assert len(blocks) >= 1
    assert not any(requirements(b) for b in blocks), "README snippets need no extras"
    code, out, err = _start("readme", "\n".join(blocks) + CHECKS, tmp_path).finish()
    assert code == 0, err
    assert "README snippets ok" in out


def test_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    unlinked = [p.name for p in DOCS if f"(docs/{p.name})" not in readme]
    assert not unlinked, f"README links no {unlinked}"


@pytest.mark.parametrize("page", [p.name for p in DOCS])
def test_docs_snippets_run(page, page_runs):
    run, missing = page_runs[page]
    if run is None:
        if missing:
            pytest.skip(f"{page}: its snippets need {', '.join(missing)}")
        pytest.skip(f"{page} has no Python snippets")
    code, _, err = run.finish()
    assert code == 0, f"{page}:\n{err}"
    if missing:
        pytest.skip(f"{page}: later snippets need {', '.join(missing)} (the ones before ran)")


def _table_rows(text: str) -> list[list[str]]:
    table = text.split("## Where each feature lives", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] != "feature" and not set(cells[0]) <= set("-: "):
            rows.append(cells)
    return rows


def test_architecture_table_names_what_exists():
    """Each row's modules exist, and each function or class it names is defined in one
    of them (a file name in the last column: a file of the row's folder)."""
    rows = _table_rows((ROOT / "docs" / "architecture.md").read_text())
    assert len(rows) >= 30
    wrong = []
    for feature, _, modules, names in rows:
        paths = [ROOT / m for m in re.findall(r"`([^`]+)`", modules)]
        wrong += [f"{feature}: no {p.relative_to(ROOT)}" for p in paths if not p.exists()]
        sources = [p.read_text() for p in paths if p.is_file()]
        for name in re.findall(r"`([^`]+)`", names):
            if name.endswith(".py"):
                found = any((p / name).is_file() for p in paths)
            else:
                defined = re.compile(rf"^\s*(def|class)\s+{re.escape(name)}\b"
                                     rf"|^{re.escape(name)}\s*[:=]", re.M)
                found = any(defined.search(src) for src in sources)
            if not found:
                wrong.append(f"{feature}: {name} is not in {modules}")
    assert not wrong, "docs/architecture.md is out of date:\n" + "\n".join(wrong)


def test_performance_page_is_rewritten_below_its_preamble(tmp_path):
    """``python -m benchmarks --write-docs`` keeps the hand-written preamble of
    docs/performance.md and replaces only the results; a page without the marker is
    refused rather than overwritten."""
    import datetime

    import importlib.util as util
    spec = util.spec_from_file_location("docs_page", ROOT / "benchmarks" / "docs_page.py")
    docs_page = util.module_from_spec(spec)
    spec.loader.exec_module(docs_page)
    MARKER, preamble, write_page = docs_page.MARKER, docs_page.preamble, docs_page.write_page

    page_text = (ROOT / "docs" / "performance.md").read_text()
    kept = preamble(page_text)
    assert "## The workloads" in kept and "| W9 |" in kept
    page = tmp_path / "performance.md"
    page.write_text(page_text)
    when = datetime.datetime(2027, 1, 2, 3, 4, tzinfo=datetime.timezone.utc)
    write_page("python -m benchmarks --only W7", "x86_64, 2 cores", ["| a |\n|---|\n| 1 |"],
               page, when)
    text = page.read_text()
    assert text.startswith(kept)
    results = text[len(kept):]
    assert "`python -m benchmarks --only W7` on 2027-01-02 03:04 UTC" in results
    assert "Machine: x86_64, 2 cores." in results and results.rstrip().endswith("| 1 |")
    assert results.count(MARKER) == 0 and "29.53 ms" not in results   # old results gone
    page.write_text("# hand-written only\n")
    with pytest.raises(ValueError, match="marker"):
        write_page("python -m benchmarks", "m", [], page)
    assert page.read_text() == "# hand-written only\n"
