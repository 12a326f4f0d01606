"""The README's Python snippets run as written (in one fresh interpreter, in order,
as a reader pasting them would), and its gradient rule matches finite differences."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

CHECKS = '''
assert max(c.max_error for c in check) < 1e-6
import numpy as np
x_clip = y.op.inputs[0]
(jac,) = gf.gradient_check(y, [x_clip], [np.array([-0.5, 0.3, 0.7, 1.5], np.float32)])
assert (np.diag(jac.theoretical) == [0, 1, 1, 0]).all()
print("README snippets ok")
'''


def test_readme_snippets_run(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    # the cluster snippet starts a Dask cluster: tests/test_distributed*.py cover that path
    blocks = [b for b in blocks if "distributed.Client" not in b]
    assert len(blocks) >= 4
    script = tmp_path / "readme.py"
    script.write_text("\n".join(blocks) + CHECKS)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "README snippets ok" in proc.stdout
