"""``kedro run`` as a user types it, in a project copy: its exit status, stdout and stderr apart, the
MLflow runs it started with their status, and a fingerprint of the results stored in the copy."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

KEDRO = str(Path(sys.executable).parent / "kedro")
SRC = str(Path(__file__).resolve().parents[2] / "src")
#: a fast fkm run: 300 samples, 6 clients, 4 rounds
TINY = "dataset.n_per_class=30,partition.n_clients=6,fkm.train.rounds=4"


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    new_runs: list  # the MLflow runs this command started: (run name, status)

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]

    @property
    def first_error(self) -> str:
        return self.err_lines[0] if self.err_lines else ""


class Project:
    """A project copy with a stored earlier result, and ``run(*args)`` -> :class:`Outcome`."""

    def __init__(self, root: Path):
        self.root = root
        self.store = root / "mlflow.db"

    def env(self, **extra) -> dict:
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "KEDRO_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "1",
            "MPLBACKEND": "Agg",
            "PYTHONPATH": os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")])),
        }
        for name in ("FEDCLUST_TRACEBACK", "FEDCLUST_DEBUG"):
            env.pop(name, None)
        env.update(extra)
        return env

    def runs(self) -> dict[str, tuple[str, str]]:
        """run id -> (run name, status) of every run in the project's store."""
        import mlflow

        if not self.store.exists():
            return {}
        client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{self.store}")
        exps = [e.experiment_id for e in client.search_experiments()]
        return {
            r.info.run_id: (r.data.tags.get("mlflow.runName", ""), r.info.status)
            for r in (client.search_runs(exps) if exps else [])
        }

    def run(self, *args: str, env: dict | None = None, timeout: int = 300) -> Outcome:
        before = self.runs()
        proc = subprocess.run(
            [KEDRO, "run", *args], cwd=self.root, env=env or self.env(), capture_output=True, text=True, timeout=timeout
        )
        after = self.runs()
        return Outcome(proc.returncode, proc.stdout, proc.stderr, [v for k, v in after.items() if k not in before])

    def start(self, *args: str) -> subprocess.Popen:
        """``kedro run *args`` started in the background (stdout and stderr piped, as text), for a
        test that acts on the store while the run goes on."""
        return subprocess.Popen(
            [KEDRO, "run", *args],
            cwd=self.root,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def fingerprint(self) -> dict[str, str]:
        """sha256 of every stored result file (reports, grid cells)."""
        out = {}
        for path in sorted((self.root / "data").rglob("*")):
            if path.is_file():
                out[str(path.relative_to(self.root))] = hashlib.sha256(path.read_bytes()).hexdigest()
        return out
