"""Every script of benchmarks/ imports: a refactor that renames a library function a benchmark uses
breaks the benchmark here, not the next time someone reproduces a table."""

from __future__ import annotations

import os
import subprocess
import sys

IMPORT_ALL = """
import importlib, pathlib, sys
bad = []
for p in sorted(pathlib.Path("benchmarks").glob("*.py")):
    try:
        importlib.import_module(p.stem)
    except Exception as exc:  # report every script that fails, not only the first
        bad.append(f"{p.name}: {exc!r}")
print("\\n".join(bad))
sys.exit(1 if bad else 0)
"""


def test_every_benchmark_script_imports(project_root):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(project_root / "src"), str(project_root / "benchmarks")]),
        "OMP_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL], cwd=project_root, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
