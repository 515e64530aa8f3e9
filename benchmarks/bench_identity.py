"""Are the benchmark's default cells bit-identical to a recorded run? A check for refactors.

    .venv/bin/python benchmarks/bench_identity.py --record FILE     # before a refactor
    .venv/bin/python benchmarks/bench_identity.py --check FILE      # after it: exit 1 on a difference

The cells are those of ``conf/base/parameters_benchmark.yml`` (every method of both halves, each
with its registry defaults) cut to one seed, the iid and Dirichlet partitions, no DP and
epsilon = 1 (the clustered-FL half: no DP and its first private budget), so that every
method's private and non-private path runs in about two minutes. Each record's metrics (all
but times), its per-round history and its labels are hashed with their exact float bits; the
check names every record whose hash differs, and the first metric that moved.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import sys
from pathlib import Path

import numpy as np
import yaml

from fedclust.grids import benchmark

CONF = Path(__file__).resolve().parents[1] / "conf" / "base" / "parameters_benchmark.yml"
#: metrics that measure time or the machine, never compared
TIME_WORDS = ("time", "_s", "seconds", "rss", "memory", "per_s")


def default_config() -> dict:
    config = yaml.safe_load(CONF.read_text())["benchmark"]["config"]
    config.update(seeds=1, epsilons=[None, 1.0], resume=False, executor="serial")
    config["partitions"] = [p for p in config["partitions"] if p["scheme"] in ("iid", "dirichlet")]
    cfl = config["clustered_fl"]
    cfl["epsilons"] = [None, next(e for e in cfl["epsilons"] if e is not None)]
    cfl["rounds"] = min(int(cfl["rounds"]), 5)
    return config


def _exact(value):
    if isinstance(value, float):
        return "nan" if math.isnan(value) else float(value).hex()
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_exact(v) for v in value]
    if isinstance(value, np.ndarray):
        return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    if isinstance(value, np.generic):
        return _exact(value.item())
    return value


def _timing(key: str) -> bool:
    return any(word in key for word in TIME_WORDS)


def fingerprint(records: list[dict]) -> dict[str, dict]:
    out = {}
    for rec in records:
        metrics = {k: v for k, v in rec.get("metrics", {}).items() if not _timing(k)}
        entry = {"metrics": _exact(metrics), "history": _exact(rec.get("history", {}))}
        if "labels" in rec:
            entry["labels"] = _exact(np.asarray(rec["labels"]))
        out[rec["name"]] = entry
    return out


def differences(old: dict, new: dict) -> list[str]:
    lines = [f"missing: {name}" for name in sorted(set(old) - set(new))]
    lines += [f"new: {name}" for name in sorted(set(new) - set(old))]
    for name in sorted(set(old) & set(new)):
        a, b = old[name], new[name]
        if a == b:
            continue
        moved = [k for k in sorted(set(a["metrics"]) | set(b["metrics"])) if a["metrics"].get(k) != b["metrics"].get(k)]
        what = f"metric {moved[0]}" if moved else ("history" if a["history"] != b["history"] else "labels")
        lines.append(f"differs: {name} ({what})")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", type=Path, help="write the fingerprint of this checkout's outputs here")
    mode.add_argument("--check", type=Path, help="compare this checkout's outputs with a recorded fingerprint")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    records = benchmark.run_all(default_config(), data_paths={})
    found = fingerprint(records)
    if args.record:
        args.record.write_text(json.dumps(found, indent=1, sort_keys=True))
        print(f"recorded {len(found)} records in {args.record}")
        return 0
    lines = differences(json.loads(args.check.read_text()), found)
    for line in lines:
        print(line)
    print(f"{len(found)} records, {len(lines)} differences")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
