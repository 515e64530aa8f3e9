"""Benchmark: the default cross-method benchmark on the serial, processes and Ray executors.

Run from the project root::

    .venv/bin/python benchmarks/bench_executors.py                 # the default benchmark config, 2 workers
    .venv/bin/python benchmarks/bench_executors.py --quick         # 2 partitions, 1 seed: about a minute
    .venv/bin/python benchmarks/bench_executors.py --executors serial,ray --workers 4

The config is ``benchmark.config`` of conf/base/parameters_benchmark.yml (data paths from
conf/base/parameters.yml). Every executor runs every cell from scratch (no cell store). Printed
(Markdown): per executor the wall time of the whole grid (the fastest of ``--repeats`` interleaved
repeats; Ray: a local instance of ``--workers`` CPUs, started before the clock and timed apart), the
speed-up over serial, and whether its records
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
    ap.add_argument("--repeats", type=int, default=1, help="interleaved repeats (the table shows the fastest)")
    args = ap.parse_args()
    cfg, paths = load_config(args.quick)
    n_cells = len(benchmark.all_cells(cfg, paths))
    print(f"benchmark config: {'quick' if args.quick else 'default'}, {n_cells} cells, {args.workers} workers\n")
    names = args.executors.split(",")
    walls: dict[str, list[float]] = {n: [] for n in names}
    starts: dict[str, list[float]] = {n: [] for n in names}
    checks: dict[str, tuple[bool, bool]] = {}
    ref = None
    for rep in range(args.repeats):  # interleaved: serial, processes, ray, serial, ...
        for name in names:
            options = {"max_workers": args.workers} if name == "processes" else {}
            if name == "ray":
                import ray

                t0 = time.perf_counter()
                ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
                starts[name].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            records = benchmark.run_all({**cfg, "executor": name, "executor_options": options}, paths)
            walls[name].append(time.perf_counter() - t0)
            if name == "ray":
                ray.shutdown()
            tabs = summary_tables(records)
            if ref is None:
                ref = (name, records, tabs)
            same_rec = same_results(records, ref[1])
            same_tab = tabs.keys() == ref[2].keys() and all(tabs[k].equals(ref[2][k]) for k in tabs)
            old = checks.get(name, (True, True))
            checks[name] = (old[0] and same_rec, old[1] and same_tab)
            print(f"  repeat {rep + 1}, {name}: {walls[name][-1]:.1f} s", flush=True)
    base = min(walls[ref[0]])
    print(
        f"\n| executor | wall time (s), min of {args.repeats} | all repeats (s) | Ray start (s) | speed-up vs {ref[0]} "
        "| records identical | summary identical |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        w = min(walls[name])
        st = f"{min(starts[name]):.1f}" if starts[name] else "-"
        print(
            f"| {name} | {w:.1f} | {', '.join(f'{x:.1f}' for x in walls[name])} | {st} | {base / w:.2f}x | "
            f"{'yes' if checks[name][0] else 'NO'} | {'yes' if checks[name][1] else 'NO'} |"
        )


if __name__ == "__main__":
    main()
