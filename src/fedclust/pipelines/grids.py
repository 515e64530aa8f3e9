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
import pandas as pd
from kedro.pipeline import Pipeline, node

from fedclust.experiments import to_markdown


def _tables_to_outputs(tables: dict[str, pd.DataFrame], title: str) -> tuple[pd.DataFrame, str]:
    frames, md = [], [f"# {title}\n"]
    for name, tab in tables.items():
        frames.append(tab.assign(table=name))
        shown = tab[[c for c in tab.columns if not c.endswith(("_mean", "_std"))]]
        md.append(to_markdown(shown, name))
    csv = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return csv, "\n".join(md)


def plot_sweeps(tables: dict[str, pd.DataFrame], metric: str = "ACC"):
    """One panel per table: ``metric`` (mean ± std) against the table's swept key, one line per method."""
    tabs = {k: t for k, t in tables.items() if f"{metric}_mean" in t.columns}
    n = max(len(tabs), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, (name, tab) in zip(axes[0], tabs.items()):
        keys = [c for c in tab.columns if c not in ("method", "n", "dataset", "table") and not c.endswith(("_mean", "_std"))
                and c not in ("ACC", "NMI", "NMI_paper", "ARI", "wall_time_s", "test_accuracy", "client_ACC", "client_NMI", "objective")]
        x = keys[0] if keys else None
        for (method, *rest), g in tab.groupby(["method"] + (["dataset"] if "dataset" in tab.columns else []), sort=False):
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


def grid_pipeline(name: str, run: Callable, tables: Callable, title: str, metric: str = "ACC") -> Pipeline:
    """A ``<name>`` pipeline around ``run(config, data_paths) -> records`` and ``tables(records)``."""

    def run_grid(config: dict, data_paths: dict) -> tuple[list[dict], list[dict]]:
        records = run(config, data_paths)
        return records, records

    def tabulate(records: list[dict]):
        tabs = tables(records)
        csv, md = _tables_to_outputs(tabs, title)
        return csv, md, plot_sweeps(tabs, metric)

    run_grid.__name__ = "run_grid"
    tabulate.__name__ = "tabulate"
    return Pipeline(
        [
            node(run_grid, ["params:config", "params:data_paths"], ["records", "child_runs"], name="run_grid", tags=["training", "grid"]),
            node(tabulate, "records", ["summary_csv", "summary_md", "sweep_plot"], name="tabulate", tags=["reporting", "grid"]),
        ],
        namespace=name,
        parameters={"params:data_paths"},
    )


def _fedsc_grid():
    from fedclust.grids import fedsc

    return grid_pipeline("fedsc_grid", fedsc.run, fedsc.tables, "FedSC grid: ACC/NMI mean ± std over trials")


#: name -> pipeline factory
GRID_PIPELINES: dict[str, Callable[[], Pipeline]] = {
    "fedsc_grid": _fedsc_grid,
}
