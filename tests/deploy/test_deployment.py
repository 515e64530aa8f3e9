"""A real deployment on one machine: a SuperLink and 3 SuperNodes as separate processes on
localhost, and `flwr run` of the repository's Flower App (flower_app/): one private FedDP-KMeans
job on digits (the weighting release and the server's k-means), every sum through SecAgg+, to the end."""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fedclust

APP = Path(__file__).resolve().parents[2] / "flower_app"
BIN = Path(sys.executable).parent


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _start(cmd: list[str], log: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def _tails(tmp: Path) -> str:
    return "\n".join(f"--- {p.name}\n" + p.read_text()[-1500:] for p in sorted(tmp.glob("*.log")))


@pytest.mark.slow
def test_superlink_and_three_supernodes_run_a_private_fed_dp_kmeans_job(tmp_path):
    home = tmp_path / "flwr"
    home.mkdir()
    src = str(Path(fedclust.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # the SuperLink starts flower-superexec
        "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p),
        "OMP_NUM_THREADS": "1",
    }
    link, *node_apis = _free_ports(4)  # the SuperLink serves its Fleet, Control and Runtime APIs on one port
    out = tmp_path / "result.json"
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local-test"\n\n[superlink.local-test]\naddress = "127.0.0.1:{link}"\ninsecure = true\n'
    )
    procs = []
    try:
        procs.append(
            _start(
                [str(BIN / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation"]
                + ["--host", "127.0.0.1", "--port", str(link)],
                tmp_path / "superlink.log",
                env,
            )
        )
        for i, port in enumerate(node_apis):
            procs.append(
                _start(
                    [str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}"]
                    + ["--port", str(port), "--node-config", f"partition-id={i} num-partitions=3"],
                    tmp_path / f"supernode{i}.log",
                    env,
                )
            )
        submit = None
        for _ in range(30):  # the SuperLink's control API takes a few seconds to come up
            submit = subprocess.run(
                [str(BIN / "flwr"), "run", str(APP), "local-test", "--run-config", f"out='{out}' epsilon=4.0 steps=0"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            if submit.returncode == 0 and "unavailable" not in submit.stdout:
                break
            time.sleep(1)
        assert submit.returncode == 0, submit.stdout + submit.stderr
        deadline = time.monotonic() + 180
        while not out.exists():
            dead = [p.args[0] for p in procs if p.poll() is not None]
            assert not dead and time.monotonic() < deadline, f"no result (stopped: {dead})\n{_tails(tmp_path)}"
            time.sleep(1)
    finally:
        for p in reversed(procs):
            _stop(p)
    res = json.loads(out.read_text())
    agg = res["aggregation"]
    assert agg["protocol"] == "SecAgg+" and agg["clients"] == 3
    assert agg["threshold_t"] == 3 and agg["fewest_clients_in_sum"] == 3  # ceil(0.8 x 3); nobody dropped
    # the weighting release only (steps=0): every message spawns a ClientApp process per node, a few
    # seconds each on a small machine; tests/deploy/test_flower_engine.py runs every stage
    assert [r["stage"] for r in agg["releases"]] == ["weighting"]
    # t = n: the noise present is the calibrated one, so the accountant gives back the target
    assert math.isclose(res["epsilon"], 4.0, rel_tol=0.02)
    assert len(res["centres"]) == 10 and 0.0 <= res["ACC"] <= 1.0
