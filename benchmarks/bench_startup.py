"""Start-up cost of a `kedro run`: where the seconds before the first node go.

Measures, each in a fresh interpreter (so nothing is cached in the process):

* the imports a run pays for: Kedro's CLI and session, MLflow, kedro-mlflow's hook, torch,
  scikit-learn, and the project's pipeline registry (building only the `fkm` pipeline, as
  `kedro run --pipelines=fkm` does, and building all of them, as `kedro registry list` does);
* the fair floor: `kedro run` of a bare Kedro + kedro-mlflow project built in a temporary folder
  (one trivial node, the same SQLite store and mlflow.yml, the same installed packages, MLflow's
  telemetry off in both), interleaved pair by pair with the tiny run below, and the ratio tiny run /
  bare run (the median of the per-pair ratios; the target is 1.2 at most);
* `kedro --version` in the project (Kedro's CLI with its plugins, and the project's settings, which
  Kedro imports before any command: our hooks and MLflow), interleaved with the runs, and the ratio
  tiny run / `kedro --version`; for reference also `kedro --version` outside any project (Kedro alone);
* the two imports the tiny run adds that no change of ours removes while the run keeps MLflow's
  SQLite tracking store and its figures (MLflow's SQL store, matplotlib), each timed in a fresh
  interpreter after the project's settings;
* a tiny `kedro run --pipelines=fkm` (300 digits, 6 clients, 6 rounds) in a throw-away copy of the
  project: wall time, the time until the first node starts (from time-stamped log lines), the time
  spent inside nodes (from the per-node log lines of fedclust.hooks.RunTagsHook), and the overhead
  (wall time outside nodes: start-up, hooks, MLflow logging, saving outputs).

Run from the project root:

    .venv/bin/python benchmarks/bench_startup.py            # 3 repetitions, 5 pairs with the bare project
    .venv/bin/python benchmarks/bench_startup.py --quick    # 1 repetition

The numbers depend on the machine's load (printed: the 1-minute load average before and after);
compare before/after on the same machine, back to back.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from fedclust import bench

ROOT = Path(__file__).resolve().parents[1]  # the project this script belongs to
PY = sys.executable
KEDRO = str(Path(PY).with_name("kedro"))
ENV = {
    **os.environ,
    "KEDRO_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
    "MPLBACKEND": "Agg",
    "OMP_NUM_THREADS": "1",
    # MLflow's telemetry threads and its Databricks resume probe (an IPython import) are off in both
    # projects, as fedclust's CLI sets them: the comparison is of the projects, not of these defaults
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS": "false",
}

IMPORTS = {
    "kedro CLI + session": "import kedro.framework.cli.cli, kedro.framework.session",
    "mlflow": "import mlflow",
    "kedro-mlflow hook": "import kedro_mlflow.framework.hooks",
    "torch": "import torch",
    "scikit-learn": "import sklearn.cluster",
    "fedclust registry (fkm only)": (
        "from kedro.framework.project import configure_project, pipelines\n"
        "configure_project('fedclust'); pipelines.set_requested(['fkm']); pipelines['fkm']\n"
        "import sys; print('torch imported' if 'torch' in sys.modules else 'no torch')"
    ),
    "fedclust registry (all)": (
        "from kedro.framework.project import configure_project, pipelines\n"
        "configure_project('fedclust'); print(len(pipelines), 'pipelines')"
    ),
}
TINY = "dataset.n_per_class=30,partition.n_clients=6,fkm.train.rounds=6"

#: what the tiny run imports on top of `kedro --version`, each timed after the project's settings (with
#: the settings' objects frozen, as in a `kedro` command): the part of the run's extra time that no
#: change of ours can remove while the run keeps its SQLite tracking store and its figures
RUN_IMPORTS = {
    "MLflow's SQL tracking store (kedro-mlflow's set-up)": "import mlflow.store.tracking.sqlalchemy_store",
    "matplotlib.pyplot (the run's three figures)": "import matplotlib.pyplot",
}
AFTER_SETTINGS = (
    "import gc, time, fedclust.settings\ngc.freeze()\nt = time.perf_counter()\n{statement}\n"
    "print(f'{{time.perf_counter() - t:.3f}}')"
)


def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter; its last printed line when it prints (else "")."""
    out = subprocess.run([PY, "-c", code], cwd=ROOT, env=ENV, check=True, capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    return lines[-1].strip() if "print(" in code and lines else ""


def project_copy(dest: Path) -> Path:
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    if (ROOT / ".telemetry").exists():
        shutil.copy(ROOT / ".telemetry", dest / ".telemetry")
    shutil.copytree(ROOT / "conf", dest / "conf", ignore=shutil.ignore_patterns("local"))
    (dest / "conf" / "local").mkdir()
    (dest / "src").mkdir()
    for layer in ("01_raw", "05_model_input", "07_model_output", "08_reporting"):
        (dest / "data" / layer).mkdir(parents=True)
    return dest


#: plain log lines with their time stamps, so the first node's start can be read off
LOGGING = """
version: 1
disable_existing_loggers: False
formatters:
  stamped: {format: "%(created).3f %(name)s %(message)s"}
handlers:
  console: {class: logging.StreamHandler, formatter: stamped, stream: ext://sys.stdout}
loggers:
  kedro: {level: INFO}
  fedclust: {level: INFO}
  fedclust.hooks: {level: DEBUG}   # its per-node 'finished in' lines
root: {handlers: [console]}
"""


def time_run(project: Path, extra_env: dict | None = None) -> tuple[float, float, float]:
    """(wall s, s before the first node starts, s inside nodes) of one tiny `kedro run --pipelines=fkm`."""
    (project / "bench_logging.yml").write_text(LOGGING)
    env = {**ENV, "KEDRO_LOGGING_CONFIG": str(project / "bench_logging.yml"), **(extra_env or {})}
    t0 = time.time()
    out = subprocess.run(
        [KEDRO, "run", "--pipelines=fkm", f"--params={TINY}"], cwd=project, env=env, capture_output=True, text=True
    )
    wall = time.time() - t0
    if out.returncode != 0:
        raise SystemExit(f"kedro run failed:\n{(out.stdout + out.stderr)[-3000:]}")
    first = min(float(m) for m in re.findall(r"^([0-9.]+) \S+ Running node", out.stdout, re.M))
    nodes = sum(float(s) for s in re.findall(r"finished in ([0-9.]+) s", out.stdout))
    return wall, first - t0, nodes


#: a bare Kedro + kedro-mlflow project: one trivial node, the same SQLite store (our mlflow.yml), the
#: same installed packages; what any project on this stack pays for `kedro run`
BARE_FILES = {
    "pyproject.toml": (
        '[tool.kedro]\npackage_name = "bare_project"\nproject_name = "bare_project"\n'
        'kedro_init_version = "{version}"\nsource_dir = "src"\n'
    ),
    "src/bare_project/__init__.py": "",
    "src/bare_project/settings.py": "",
    "src/bare_project/pipeline_registry.py": (
        "from kedro.pipeline import Pipeline, node\n\n\n"
        "def one(x):\n    return x + 1\n\n\n"
        "def register_pipelines():\n"
        "    p = Pipeline([node(one, 'params:x', 'y', name='one')])\n"
        "    return {'__default__': p}\n"
    ),
    "conf/base/parameters.yml": "x: 1\n",
    "conf/base/catalog.yml": "{}\n",
    "conf/local/.keep": "",
}


def bare_project(dest: Path) -> Path:
    """The bare Kedro + kedro-mlflow project (:data:`BARE_FILES`) in ``dest``, with our mlflow.yml."""
    for name, text in BARE_FILES.items():
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{version}", metadata.version("kedro")))
    shutil.copy(ROOT / "conf" / "base" / "mlflow.yml", dest / "conf" / "base" / "mlflow.yml")
    return dest


def time_bare_run(project: Path) -> float:
    """Wall seconds of `kedro run` in the bare project."""
    t0 = time.time()
    out = subprocess.run([KEDRO, "run"], cwd=project, env=ENV, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bare kedro run failed:\n{(out.stdout + out.stderr)[-3000:]}")
    return time.time() - t0


def time_version(folder: Path) -> float:
    """Wall seconds of `kedro --version` in ``folder``: in the project, Kedro's CLI, its plugins and
    the project's settings; in a folder without a project, Kedro and its plugins alone."""
    t0 = time.time()
    subprocess.run([KEDRO, "--version"], cwd=folder, env=ENV, check=True, capture_output=True, text=True)
    return time.time() - t0


def main() -> None:
    parser = bench.parser(__doc__, quick="one repetition instead of three")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=5, help="interleaved pairs tiny run / bare project's run")
    parser.add_argument("--run-only", action="store_true", help="only the tiny `kedro run`, not the imports")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="also time the tiny run with these environment variables (interleaved), e.g. "
        "MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS=false",
    )
    args = parser.parse_args()
    with bench.session(args):
        run(args)


def run(args) -> None:
    repeat = 1 if args.quick else args.repeat
    load_before = os.getloadavg()[0]
    notes: dict = {}
    imports = {} if args.run_only else IMPORTS
    med = bench.interleaved(
        {label: functools.partial(run_python, code) for label, code in imports.items()}, repeat, results=notes
    )
    rows = [(f"{label} ({notes[label]})" if notes[label] else label, med[label]) for label in imports]
    after = {
        label: statistics.median(float(run_python(AFTER_SETTINGS.format(statement=statement))) for _ in range(repeat))
        for label, statement in RUN_IMPORTS.items()
    }
    with (
        tempfile.TemporaryDirectory() as tmp,
        tempfile.TemporaryDirectory() as bare,
        tempfile.TemporaryDirectory() as bare_tmp,
    ):
        project = project_copy(Path(tmp))
        bare_proj = bare_project(Path(bare_tmp))
        time_run(project)  # first runs create the MLflow stores: not what a user pays every time
        time_bare_run(bare_proj)
        runs, versions, kedro_alone, variants, bare_runs = [], [], [], [], []
        extra = dict(v.split("=", 1) for v in args.variant)
        for _ in range(max(repeat, 1 if args.quick else args.pairs)):  # interleaved: same load for all
            versions.append(time_version(project))
            runs.append(time_run(project))
            bare_runs.append(time_bare_run(bare_proj))
            kedro_alone.append(time_version(Path(bare)))
            if extra:
                variants.append(time_run(project, extra))
    load_after = os.getloadavg()[0]
    version = statistics.median(versions)
    alone = statistics.median(kedro_alone)
    ratio = statistics.median(w / v for (w, _, _), v in zip(runs, versions))
    bare_wall = statistics.median(bare_runs)
    bare_ratio = statistics.median(w / b for (w, _, _), b in zip(runs, bare_runs))
    wall = statistics.median(w for w, _, _ in runs)
    first = statistics.median(f for _, f, _ in runs)
    nodes = statistics.median(n for _, _, n in runs)

    print(
        f"\nStart-up cost (median of {repeat}; each import in a fresh interpreter, including "
        f"the interpreter's own start; load average {load_before:.2f} before, {load_after:.2f} after)\n"
    )
    bench.table(
        ["step", "seconds"],
        [(f"import {label}", f"{seconds:.2f}") for label, seconds in rows]
        + [
            ("`kedro run --pipelines=fkm` (tiny): wall", f"{wall:.2f}"),
            ("... before the first node starts", f"{first:.2f}"),
            ("... inside nodes", f"{nodes:.2f}"),
            ("... overhead (wall - inside nodes)", f"{wall - nodes:.2f}"),
            ("`kedro --version` in the project (Kedro's floor with our settings), interleaved", f"{version:.2f}"),
            ("`kedro --version` outside any project (Kedro and its plugins alone), interleaved", f"{alone:.2f}"),
            ("`kedro run` of a bare Kedro + kedro-mlflow project (one trivial node), interleaved", f"{bare_wall:.2f}"),
            (
                f"tiny run / bare project's run (median of {len(runs)} per-pair ratios; target <= 1.2)",
                f"{bare_ratio:.2f}",
            ),
            (f"tiny run / `kedro --version` (median of {len(runs)} per-repeat ratios)", f"{ratio:.2f}"),
            ("... the run's time on top of `kedro --version` (median run - median version)", f"{wall - version:.2f}"),
            ("... of which at least, imports after the settings:", ""),
        ]
        + [(f"    {label}", f"{seconds:.2f}") for label, seconds in after.items()]
        + (
            [
                (
                    f"tiny run with {' '.join(args.variant)}: wall",
                    f"{statistics.median(w for w, _, _ in variants):.2f}",
                ),
                (
                    "... / `kedro --version`",
                    f"{statistics.median(w / v for (w, _, _), v in zip(variants, versions)):.2f}",
                ),
            ]
            if variants
            else []
        ),
    )

    print(
        f"\nratio tiny run / bare Kedro + kedro-mlflow run = {bare_ratio:.2f} (median of {len(runs)} interleaved "
        f"pair(s); target <= 1.2); tiny run / `kedro --version` in the project = {ratio:.2f}"
    )


if __name__ == "__main__":
    main()
