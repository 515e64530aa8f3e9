"""The experiment-grid pipelines (``<name>_grid``), built from one template.

``run_grid`` (parameters -> records, every cell one nested MLflow run) -> ``tabulate`` (mean ± std
tables as CSV and Markdown in data/08_reporting/<name>_grid/ and MLflow) -> ``plot``.
The grid itself is a plain library function in :mod:`fedclust.grids`.
"""

from __future__ import annotations

from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from kedro.pipeline import Pipeline, node

from fedclust.experiments import to_markdown


def _flat(tab: pd.DataFrame) -> pd.DataFrame:
    """String column names (a pivot's (setting, epsilon) tuples become 'setting / epsilon')."""
    tab = tab.copy()
    tab.columns = [" / ".join(str(x) for x in c if str(x)) if isinstance(c, tuple) else str(c) for c in tab.columns]
    return tab


def _tables_to_outputs(tables: dict[str, pd.DataFrame], title: str) -> tuple[pd.DataFrame, str]:
    frames, md = [], [f"# {title}\n"]
    for name, tab in tables.items():
        tab = _flat(tab)
        frames.append(tab.assign(table=name))
        shown = tab[[c for c in tab.columns if not c.endswith(("_mean", "_std"))]]
        md.append(to_markdown(shown, name))
    csv = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return csv, "\n".join(md)


def plot_sweeps(tables: dict[str, pd.DataFrame], metric: str = "ACC"):
    """One panel per table: ``metric`` (mean ± std) against the table's swept key, one line per method."""
    tabs = {k: _flat(t) for k, t in tables.items() if f"{metric}_mean" in _flat(t).columns}
    n = max(len(tabs), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, (name, tab) in zip(axes[0], tabs.items()):
        keys = [c for c in tab.columns if c not in ("method", "label", "n", "dataset", "table") and not c.endswith(("_mean", "_std"))
                and c not in ("ACC", "NMI", "NMI_paper", "ARI", "wall_time_s", "test_accuracy", "client_ACC", "client_NMI", "objective")]
        x = keys[0] if keys else None
        series = next((c for c in ("method", "label") if c in tab.columns), None)
        if series is None:
            continue
        for (method, *rest), g in tab.groupby([series] + (["dataset"] if "dataset" in tab.columns else []), sort=False):
            label = method if not rest else f"{method} ({rest[0]})"
            xs = g[x].astype(str) if x else range(len(g))
            ax.errorbar(list(xs), g[f"{metric}_mean"], yerr=g[f"{metric}_std"].fillna(0), marker="o", capsize=3, label=label)
        ax.set_title(name)
        ax.set_xlabel(x or "")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def plot_curves(records: list[dict], keys, metrics=("objective", "ACC", "test_accuracy", "train_loss", "n_moved"),
                max_curves: int = 12):
    """Convergence: per-round histories averaged over seeds, one line per combination of ``keys``.

    When the histories hold ``comm_reals`` (cumulative uploaded reals), a last panel shows the
    objective against communication.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if not r.get("history"):
            continue
        label = tuple((k, (r.get("params") or {}).get(k, (r.get("tags") or {}).get(k))) for k in keys)
        groups.setdefault(label, []).append(r["history"])
    shown = [m for m in metrics if any(m in h for hs in groups.values() for h in hs)]
    comm = any("comm_reals" in h and "objective" in h for hs in groups.values() for h in hs)
    n_panels = max(len(shown) + int(comm), 1)
    fig, axes = plt.subplots(1, n_panels, figsize=(5.0 * n_panels, 3.6), squeeze=False)
    if comm:
        ax = axes[0][-1]
        for label, hists in list(groups.items())[:max_curves]:
            h = next((h for h in hists if "comm_reals" in h and "objective" in h), None)
            if h:
                n = min(len(h["comm_reals"]), len(h["objective"]))
                ax.plot(h["comm_reals"][:n], h["objective"][:n], label=", ".join(f"{k}={v}" for k, v in label if v is not None))
        ax.set_xlabel("uploaded reals (first seed)")
        ax.set_ylabel("objective")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for ax, metric in zip(axes[0], shown):
        for label, hists in list(groups.items())[:max_curves]:
            series = [h[metric] for h in hists if metric in h and len(h[metric])]
            if not series:
                continue
            n = min(len(s_) for s_ in series)
            mean = np.mean([s_[:n] for s_ in series], axis=0)
            ax.plot(range(1, n + 1), mean, label=", ".join(f"{k}={v}" for k, v in label if v is not None))
        ax.set_xlabel("round")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        if metric == "objective":
            ax.set_yscale("log")
    if shown:
        axes[0][-1].legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
    if len(groups) > max_curves:
        fig.suptitle(f"first {max_curves} of {len(groups)} curves (all are in MLflow)", fontsize=8)
    fig.tight_layout()
    return fig


def grid_pipeline(name: str, run: Callable, tables: Callable, title: str, metric: str = "ACC",
                  curve_keys=("method",)) -> Pipeline:
    """A ``<name>`` pipeline around ``run(config, data_paths) -> records`` and ``tables(records)``."""

    def run_grid(config: dict, data_paths: dict) -> tuple[list[dict], list[dict]]:
        records = run(config, data_paths)
        return records, records

    def tabulate(records: list[dict]):
        tabs = tables(records)
        csv, md = _tables_to_outputs(tabs, title)
        return csv, md, plot_sweeps(tabs, metric), plot_curves(records, curve_keys)

    run_grid.__name__ = "run_grid"
    tabulate.__name__ = "tabulate"
    return Pipeline(
        [
            node(run_grid, ["params:config", "params:data_paths"], ["records", "child_runs"], name="run_grid", tags=["training", "grid"]),
            node(tabulate, "records", ["summary_csv", "summary_md", "sweep_plot", "curves_plot"], name="tabulate", tags=["reporting", "grid"]),
        ],
        namespace=name,
        parameters={"params:data_paths"},
    )


def _fedsc_grid():
    from fedclust.grids import fedsc

    return grid_pipeline("fedsc_grid", fedsc.run, fedsc.tables, "FedSC grid: ACC/NMI mean ± std over trials")


def _dp_fedc_grid():
    from fedclust.grids import dp_fedc

    return grid_pipeline("dp_fedc_grid", dp_fedc.run, dp_fedc.tables,
                         "DP-FedC grid: Table I layout and the eps_bar / K / split sweep (mean ± std over seeds)",
                         curve_keys=dp_fedc.CURVE_KEYS)


def _fedc_mf_grid():
    from fedclust.grids import fedc_mf

    return grid_pipeline("fedc_mf_grid", fedc_mf.run, fedc_mf.tables,
                         "FedCAvg / FedCGds grid (mean ± std over common initializations)", curve_keys=fedc_mf.CURVE_KEYS)


def _benchmark():
    from fedclust.grids import benchmark

    def figures(records: list[dict], config: dict, data_paths: dict):
        return (
            benchmark.privacy_utility_figure(records),
            benchmark.communication_figure(records),
            benchmark.embedding_figure(records, data_paths),
            benchmark.partition_heatmaps(config, data_paths),
        )

    figures.__name__ = "benchmark_figures"
    base = grid_pipeline("benchmark", benchmark.run_all, benchmark.tables,
                         "Cross-method benchmark: same data, partition, accounted privacy budget and seeds",
                         curve_keys=benchmark.CURVE_KEYS)
    extra = Pipeline(
        [node(figures, ["records", "params:config", "params:data_paths"],
              ["privacy_utility_plot", "communication_plot", "embedding_plot", "partition_plot"],
              name="figures", tags=["reporting", "grid"])],
        namespace="benchmark",
        parameters={"params:data_paths"},
    )
    return base + extra


def _cfl_grid():
    from fedclust.grids import cfl

    return grid_pipeline("cfl_grid", cfl.run, cfl.tables,
                         "CFL-MGD / IFCA / FedAvg on rotated data (Table 2 layout: test accuracy, mean ± std over seeds)",
                         metric="test_accuracy", curve_keys=cfl.CURVE_KEYS)


def _rr_grid():
    from fedclust.grids import rr

    return grid_pipeline("rr_grid", rr.run, rr.tables,
                         "RR-Cluster grid: Table 1 (test accuracy) and Table 4 (clustering accuracy) layouts",
                         metric="test_accuracy", curve_keys=rr.CURVE_KEYS)


def _privacy_audit():
    from fedclust.grids import privacy_audit

    def run_audits(config: dict) -> tuple[list[dict], list[dict]]:
        records = privacy_audit.run(config)
        return records, records

    def tabulate_audits(records: list[dict]):
        tabs = privacy_audit.tables(records)
        csv, md = _tables_to_outputs(tabs, "Privacy audit: ε accounted (upper bound) vs ε audited (lower bound, "
                                           "noise on and off), canary audits")
        per_method = {f"{r['name']}/audit": r["audit"] for r in records}
        return csv, md, privacy_audit.audit_figure(records), per_method

    def check_verdicts(records: list[dict]) -> None:
        bad = [r["name"] for r in records if not r["metrics"]["sound"]]
        weak = [r["name"] for r in records if r["metrics"].get("powerful") == 0.0]
        if bad or weak:
            raise RuntimeError(
                "privacy audit failed: "
                + (f"audited epsilon above the accounted one for {bad} (a leak); " if bad else "")
                + (f"no power (noise-off bound not above the accounted epsilon) for {weak}" if weak else "")
                + "; see data/08_reporting/privacy_audit/summary.md"
            )

    return Pipeline(
        [
            node(run_audits, "params:config", ["records", "child_runs"], name="run_audits", tags=["privacy", "audit"]),
            node(tabulate_audits, "records", ["summary_csv", "summary_md", "audit_plot", "audits"],
                 name="tabulate_audits", tags=["reporting", "audit"]),
            node(check_verdicts, "records", None, name="check_verdicts", tags=["privacy", "audit"]),
        ],
        namespace="privacy_audit",
    )


#: name -> pipeline factory
GRID_PIPELINES: dict[str, Callable[[], Pipeline]] = {
    "fedsc_grid": _fedsc_grid,
    "dp_fedc_grid": _dp_fedc_grid,
    "fedc_mf_grid": _fedc_mf_grid,
    "cfl_grid": _cfl_grid,
    "rr_grid": _rr_grid,
    "benchmark": _benchmark,
    "privacy_audit": _privacy_audit,
}
