"""docs/performance.md, rewritten from one benchmark run (``python -m benchmarks --write-docs``).

The page has two parts. Above :data:`MARKER` is a hand-written preamble (how to run
the suite, what each workload is, how to read the ratios); the writer keeps it as
it is. Below the marker is what one run measured: the command, the date, the
machine, the table and the peers' notes; the writer replaces all of it, so the
numbers on the page are always one run's, never a paste of several.
"""
from __future__ import annotations

import datetime
import pathlib

#: The line that ends the hand-written preamble; everything after it is generated.
MARKER = ("<!-- Everything below this line is written by `python -m benchmarks --write-docs`; "
          "edit the text above it. -->")

DOCS_PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def preamble(page_text: str, path: pathlib.Path | str = DOCS_PAGE) -> str:
    """The page up to and including :data:`MARKER`; a page without it is refused,
    since the writer would otherwise drop hand-written text."""
    at = page_text.find(MARKER)
    if at < 0:
        raise ValueError(f"{path} has no generated-section marker; add this line where the "
                         f"hand-written text ends:\n{MARKER}")
    return page_text[:at + len(MARKER)]


def generated_section(command: str, machine: str, tables: list[str],
                      when: datetime.datetime | None = None) -> str:
    """The generated part of the page: how and where it was measured, then each
    table (or block of notes) as given, separated by blank lines."""
    when = when or datetime.datetime.now().astimezone()
    header = [f"## Results of the last run",
              "",
              f"Written by `{command}` on {when:%Y-%m-%d %H:%M %Z}.".replace(" .", "."),
              "",
              f"Machine: {machine}."]
    return "\n".join(header) + "\n\n" + "\n\n".join(t.strip("\n") for t in tables) + "\n"


def write_page(command: str, machine: str, tables: list[str],
               path: pathlib.Path | str = DOCS_PAGE,
               when: datetime.datetime | None = None) -> pathlib.Path:
    """Rewrite the page at ``path``: its preamble kept, the results replaced."""
    path = pathlib.Path(path)
    kept = preamble(path.read_text(encoding="utf-8"), path)
    path.write_text(kept + "\n\n" + generated_section(command, machine, tables, when),
                    encoding="utf-8")
    return path
