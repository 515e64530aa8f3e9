"""Benchmark: the default cross-method benchmark on the serial, processes and Ray executors (issue 16).

Run from the project root::

    .venv/bin/python benchmarks/bench_executors.py                 # the default benchmark config, 2 workers
    .venv/bin/python benchmarks/bench_executors.py --quick         # 2 partitions, 1 seed: about a minute
    .venv/bin/python benchmarks/bench_executors.py --executors serial,ray --workers 4

The config is ``benchmark.config`` of conf/base/parameters_benchmark.yml (data paths from
conf/base/parameters.yml). Every executor runs every cell from scratch (no cell store). Printed
(Markdown): per executor the wall time of the whole grid (Ray: a local instance of ``--workers``
CPUs, started before the clock and timed apart), the speed-up over serial, and whether its records
and its summary tables equal the serial ones bit for bit (``wall_time_s``, the per-method timings,
excluded). On a shared machine the wall times are noisy: compare them within one run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

from fedclust.executors import same_results
from fedclust.grids import benchmark

ROOT = Path(__file__).resolve().parents[1]


def load_config(quick: bool) -> tuple[dict, dict]:
    cfg = yaml.safe_load((ROOT / "conf/base/parameters_benchmark.yml").read_text())["benchmark"]["config"]
    paths = yaml.safe_load((ROOT / "conf/base/parameters.yml").read_text())["data_paths"]
    paths = {k: str((ROOT / v).resolve()) for k, v in paths.items()}
    if quick:
        cfg = {**cfg, "partitions": cfg["partitions"][:2], "seeds": 1}
    return cfg, paths


def summary_tables(records: list[dict]) -> dict:
    tabs = benchmark.tables(records)
    return {k: t[[c for c in t.columns if not c.startswith("wall_time_s")]] for k, t in tabs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executors", default="serial,processes,ray")
    ap.add_argument("--workers", type=int, default=2, help="processes / Ray CPUs")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    cfg, paths = load_config(args.quick)
    n_cells = len(benchmark.all_cells(cfg, paths))
    print(f"benchmark config: {'quick' if args.quick else 'default'}, {n_cells} cells, {args.workers} workers\n")
    rows, ref = [], None
    for name in args.executors.split(","):
        options, start = {}, None
        if name == "processes":
            options = {"max_workers": args.workers}
        if name == "ray":
            import ray

            t0 = time.perf_counter()
            ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
            start = time.perf_counter() - t0
        t0 = time.perf_counter()
        records = benchmark.run_all({**cfg, "executor": name, "executor_options": options}, paths)
        wall = time.perf_counter() - t0
        if name == "ray":
            ray.shutdown()
        tabs = summary_tables(records)
        if ref is None:
            ref = (name, wall, records, tabs)
        same_rec = same_results(records, ref[2])
        same_tab = tabs.keys() == ref[3].keys() and all(tabs[k].equals(ref[3][k]) for k in tabs)
        rows.append((name, wall, start, ref[1] / wall, same_rec, same_tab))
        print(f"  {name}: {wall:.1f} s", flush=True)
    print(f"\n| executor | wall time (s) | start (s) | speed-up vs {ref[0]} | records identical | summary identical |")
    print("|---|---|---|---|---|---|")
    for name, wall, start, speed, same_rec, same_tab in rows:
        print(f"| {name} | {wall:.1f} | {'-' if start is None else f'{start:.1f}'} | {speed:.2f}x | "
              f"{'yes' if same_rec else 'NO'} | {'yes' if same_tab else 'NO'} |")


if __name__ == "__main__":
    main()
