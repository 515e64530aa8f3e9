"""Which benchmark runs the collapse rule marks: the benchmark's data-clustering cells on one data set
(default wine: classes 59/71/48, majority share 0.399), iid over 10 clients, secure aggregation, the
methods' own defaults, printed as the report's terminal table (chance, majority, NMI and the flags)
followed by every run flagged ``collapsed`` one by one with the numbers the rule compared.

The rule (:func:`fedclust.metrics.is_collapsed`): ACC above ``ACC_chance_hi`` while NMI is not above
``NMI_chance_hi`` (the same shuffles), or ACC not above ``ACC_majority``.

    python benchmarks/bench_collapsed.py [--dataset wine] [--seeds 3] [--quick]
"""

from __future__ import annotations

import argparse

from fedclust.grids import benchmark, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="wine")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="one seed, FKM and k-means only")
    args = ap.parse_args()
    config = {
        "datasets": [args.dataset],
        "methods": ["fkm", "kmeans"] if args.quick else ["fkm", "dk_pp", "fed_dp_kmeans", "kmeans"],
        "epsilons": [0.5, 1.0, 4.0, None],
        "seeds": 1 if args.quick else args.seeds,
        "partitions": [{"scheme": "iid"}],
        "n_clients": 10,
        "trust_model": "secure_aggregation",
    }
    records = []
    for cell in benchmark.cells(config):
        records += benchmark.run_cell(cell)
    print("\n".join(report.terminal_lines(report.method_table(records))))
    keys = ("ACC", "ACC_chance_hi", "ACC_majority", "NMI", "NMI_chance_hi")
    flagged = [r for r in records if (r.get("metrics") or {}).get("collapsed")]
    private = [r for r in records if r["tags"].get("status") == "ok" and r["tags"]["epsilon"] != "inf"]
    print(f"runs flagged one by one: {len(flagged)} of {len(records)} ({len(private)} private runs)")
    for r in flagged:
        print(f"  {r['name']}: " + ", ".join(f"{k} {r['metrics'][k]:.3f}" for k in keys))


if __name__ == "__main__":
    main()
