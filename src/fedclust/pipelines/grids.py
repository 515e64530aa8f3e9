"""The experiment-grid pipelines (``<name>_grid``), built from one template.

``prepare_cells`` (parameters -> the grid's cells and executor) -> ``run_cells`` (cells -> records on
the chosen executor; every finished cell is at once a nested MLflow run and a line of
data/08_reporting/<name>/cells.jsonl, from which a re-run resumes) -> ``tabulate`` (mean ± std tables
as CSV and Markdown in data/08_reporting/<name>/ and MLflow) -> ``plot``. The grid itself is plain
library code in :mod:`fedclust.grids` (``cells``, ``run_cell``) and :mod:`fedclust.executors`.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Callable

import pandas as pd
from kedro.pipeline import Pipeline, node

from fedclust import plots
from fedclust.executors import execution
from fedclust.experiments import to_markdown
from fedclust.grids import run_planned
from fedclust.grids._data import load as load_grid_data
from fedclust.pipelines.mlflow_io import cell_run_logger


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
    """``metric`` (mean ± std) against each table's swept setting (:func:`fedclust.plots.sweeps_figure`)."""
    return plots.sweeps_figure(tables, metric)


def sweep_metric(tables: dict[str, pd.DataFrame], metric: str) -> str:
    """``metric``, or ``objective_ratio`` where no table has ``metric`` but one has that ratio (a
    benchmark whose data sets all lack labels: :func:`fedclust.metrics.objective_scores`)."""
    cols = [set(t.columns) for t in tables.values() if isinstance(t, pd.DataFrame)]
    if any(f"{metric}_mean" in c for c in cols) or not any("objective_ratio_mean" in c for c in cols):
        return metric
    return "objective_ratio"


def plot_curves(
    records: list[dict],
    keys,
    metrics=("objective", "ACC", "test_accuracy", "train_loss", "n_moved"),
    max_curves: int = 10,
):
    """Convergence curves averaged over seeds (:func:`fedclust.plots.curves_figure`)."""
    return plots.curves_figure(records, keys, metrics, max_curves=max_curves)


def prepare_cells_node(
    module, name: str, with_data_paths: bool = True, settings: Callable[[dict], dict] | None = None
) -> Callable:
    """``prepare_cells(config[, data_paths]) -> {"grid", "cells", "executor", "options", "resume"}``;
    ``settings(config)`` gives the executor keys where a grid has its own defaults."""

    def prepare_cells(config: dict, data_paths: dict | None = None) -> dict:
        ex = execution(settings(config) if settings else config)
        cells = module.cells(config, data_paths) if with_data_paths else module.cells(config)
        return {"grid": name, "cells": cells, **ex}

    return prepare_cells


def run_cells_node(module, name: str, on_record: Callable[[dict], None] | None = None) -> Callable:
    """``run_cells(cells, cell_store) -> records``: ``module.run_cell`` on every cell with the chosen
    executor; each finished cell is logged to MLflow and appended to the store as it finishes."""

    def run_cells_(plan: dict, cell_store) -> list[dict]:
        log = cell_run_logger(f"{name}/")

        def on_done(i, records, resumed):
            log(i, records, resumed)
            for rec in records if on_record is not None else ():
                on_record(rec)

        return run_planned(module, plan, label=name, store=cell_store, on_done=on_done)

    run_cells_.__name__ = "run_cells"
    return run_cells_


def cell_nodes(
    module,
    name: str,
    tags: tuple[str, ...] = ("grid",),
    run_tags: tuple[str, ...] = ("training", "grid"),
    *,
    with_data_paths: bool = True,
    settings: Callable[[dict], dict] | None = None,
    on_record: Callable[[dict], None] | None = None,
) -> list:
    """The two nodes every grid starts with: ``prepare_cells`` (its parameters -> the cells and the
    executor) and ``run_cells`` (cells -> records, through the resumable ``cell_store``)."""
    inputs = ["params:config", "params:data_paths"] if with_data_paths else "params:config"
    return [
        node(
            prepare_cells_node(module, name, with_data_paths, settings),
            inputs,
            "cells",
            name="prepare_cells",
            tags=list(tags),
        ),
        node(
            run_cells_node(module, name, on_record),
            ["cells", "cell_store"],
            "records",
            name="run_cells",
            tags=list(run_tags),
        ),
    ]


def grid_pipeline(
    name: str, module, tables: Callable, title: str, metric: str = "ACC", curve_keys=("method",)
) -> Pipeline:
    """A ``<name>`` pipeline around ``module.cells(config, data_paths)``, ``module.run_cell(cell)``
    and ``tables(records)``: prepare_cells -> run_cells -> tabulate -> plot."""

    def tabulate(records: list[dict]):
        tabs = tables(records)
        csv, md = _tables_to_outputs(tabs, title)
        return tabs, csv, md

    def plot(tabs: dict, records: list[dict]):
        return plot_sweeps(tabs, sweep_metric(tabs, metric)), plot_curves(records, curve_keys)

    return Pipeline(
        [
            *cell_nodes(module, name),
            node(
                tabulate,
                "records",
                ["tables", "summary_csv", "summary_md"],
                name="tabulate",
                tags=["reporting", "grid"],
            ),
            node(plot, ["tables", "records"], ["sweep_plot", "curves_plot"], name="plot", tags=["reporting", "grid"]),
        ],
        namespace=name,
        parameters={"params:data_paths"},
    )


def _fedsc_grid():
    # a grid's module (and every method it runs) loads when its node runs, not at every kedro start
    from fedclust.grids import fedsc

    return grid_pipeline("fedsc_grid", fedsc, fedsc.tables, "FedSC grid: ACC/NMI mean ± std over trials")


def _dp_fedc_grid():
    # a grid's module (and every method it runs) loads when its node runs, not at every kedro start
    from fedclust.grids import dp_fedc

    return grid_pipeline(
        "dp_fedc_grid",
        dp_fedc,
        dp_fedc.tables,
        "DP-FedC grid: Table I layout and the eps_bar / K / split sweep (mean ± std over seeds)",
        curve_keys=dp_fedc.CURVE_KEYS,
    )


def _fedc_mf_grid():
    # a grid's module (and every method it runs) loads when its node runs, not at every kedro start
    from fedclust.grids import fedc_mf

    return grid_pipeline(
        "fedc_mf_grid",
        fedc_mf,
        fedc_mf.tables,
        "FedCAvg / FedCGds grid (mean ± std over common initializations)",
        curve_keys=fedc_mf.CURVE_KEYS,
    )


def _benchmark():
    # a grid's module (and every method it runs) loads when its node runs, not at every kedro start
    from fedclust.grids import benchmark

    both = SimpleNamespace(cells=benchmark.all_cells, run_cell=benchmark.run_cell)  # data clustering + clustered FL

    def figures(records: list[dict], config: dict, data_paths: dict):
        chance = benchmark.chance_levels(records, data_paths, config)
        cfl = config.get("clustered_fl") or {}
        ran_cfl = benchmark.clustered_fl_methods(config)  # no clustered-FL half: no data set to read for it
        cfl_chance = _chance_of_classes(cfl.get("datasets", ["digits"]) if ran_cfl else [], data_paths)
        return (
            benchmark.privacy_utility_figure(records, chance),
            benchmark.clustered_fl_privacy_utility_figure(records, cfl_chance),
            benchmark.communication_figure(records),
            benchmark.embedding_figure(records, data_paths, config),
            benchmark.partition_heatmaps(config, data_paths),
            benchmark.rounds_figure(records),
            benchmark.confusion_figure(records, data_paths, config),
        )

    figures.__name__ = "benchmark_figures"

    base = grid_pipeline(
        "benchmark",
        both,
        benchmark.tables,
        "Cross-method benchmark: same data, partition, accounted privacy budget and seeds",
        curve_keys=benchmark.CURVE_KEYS,
    )
    extra = Pipeline(
        [
            node(
                figures,
                ["records", "params:config", "params:data_paths"],
                [
                    "privacy_utility_plot",
                    "privacy_utility_clustered_fl_plot",
                    "communication_plot",
                    "embedding_plot",
                    "partition_plot",
                    "rounds_by_epsilon_plot",
                    "confusion_plot",
                ],
                name="figures",
                tags=["reporting", "grid"],
            ),
            report_node(),
        ],
        namespace="benchmark",
        parameters={"params:data_paths"},
    )
    staged = Pipeline([_in_stage(n, BENCHMARK_STAGES[n.name.rsplit(".", 1)[-1]]) for n in (base + extra).nodes])
    # each stage's last node reads back what no other stage reads (its tables, figures, report), so in
    # Kedro-Viz the benchmark is one box with no loose outputs, and expanded, its stages
    # (BENCHMARK_STAGES: data, run, tables, plots, report) are boxes joined only by the cells, the
    # records and the tables
    done = []
    for stage in dict.fromkeys(BENCHMARK_STAGES.values()):
        mine = staged.only_nodes_with_namespaces([f"benchmark.{stage}"]).all_outputs()
        ends = sorted(d for d in mine if not any(d in n.inputs for n in staged.nodes))
        if ends:
            done.append(
                node(
                    benchmark_done if stage == "report" else stage_done,
                    ends,
                    None,
                    name="summarize",
                    tags=["reporting", "grid"],
                    namespace=f"benchmark.{stage}",
                )
            )
    return staged + Pipeline(done)


#: the stage (nested namespace ``benchmark.<stage>``) of each node of the benchmark
BENCHMARK_STAGES = {
    "prepare_cells": "data",
    "run_cells": "run",
    "tabulate": "tables",
    "plot": "plots",
    "figures": "plots",
    "report": "report",
}


def _in_stage(n, stage: str):
    """Node ``n`` of the benchmark in its stage's namespace ``benchmark.<stage>``, with the same
    function, datasets, name and tags."""
    outputs = n.outputs[0] if len(n.outputs) == 1 else (n.outputs or None)
    return node(
        n.func,
        n.inputs,
        outputs,
        name=n.name.rsplit(".", 1)[-1],
        tags=sorted(n.tags),
        namespace=f"benchmark.{stage}",
    )


def stage_done(*outputs) -> None:
    """The last node of a benchmark stage: it reads back the stage's outputs that no other stage
    reads (from memory: they are CachedDatasets), so Kedro-Viz keeps them inside the stage's box."""


def benchmark_done(*outputs) -> None:
    """The last node of the benchmark's report stage (:func:`stage_done`), which also logs where
    the report is."""
    logging.getLogger(__name__).info(
        "benchmark: report in data/08_reporting/benchmark/report.html (and report.md; each run's copy in versions/)"
    )


def report_node():
    """``report``: the benchmark report of the records (:func:`write_report`)."""
    return node(
        write_report,
        ["records", "params:config"],
        ["report_html", "report_md", "run_summary"],
        name="report",
        tags=["reporting", "grid"],
    )


def write_report(records: list[dict], config: dict):
    """The benchmark report (:mod:`fedclust.grids.report`): HTML and Markdown, and the parent run's
    best ACC per epsilon and counts."""
    # a grid's module (and every method it runs) loads when its node runs, not at every kedro start
    from fedclust.grids import report

    built = report.build(
        records,
        title="fedclust benchmark: which method, at which privacy budget, at what cost",
        notes=report_notes(config),
    )
    return built["html"], built["markdown"], {"metrics": built["metrics"], "tags": built["tags"]}


def tour_benchmark() -> Pipeline:
    """The quick tour's private slice: the data-clustering cells of the benchmark on
    ``tour_benchmark.config`` (no figures), its report and its table at the end of the run."""
    # a grid's module (and every method it runs) loads when its node runs, not at every kedro start
    from fedclust.grids import benchmark

    data_half = SimpleNamespace(cells=benchmark.cells, run_cell=benchmark.run_cell)
    name = "tour_benchmark"
    return Pipeline(
        [
            *cell_nodes(data_half, name),
            report_node(),
        ],
        namespace=name,
        parameters={"params:data_paths"},
    )


def report_notes(config: dict) -> list[str]:
    """The settings a benchmark report states at its top, under what ran (which the report reads
    from the records: :func:`fedclust.grids.report.ran_lines`)."""
    shared = ("rounds", "private_rounds", "clients_per_round", "clip", "trust_model")
    # the per-method settings of the methods that run (no "methods": every method runs)
    ran = set(config["methods"]) if config.get("methods") is not None else set(config.get("method_settings") or {})
    setup = (
        f"data clustering: {int(config.get('n_clients', 10))} clients; δ = {float(config.get('delta', 1e-5)):g}, "
        f"accountant {config.get('accountant', 'rdp')} (sample-level unless a protection entry says client)"
    )
    settings = (", ".join(f"{k} = {config[k]}" for k in shared if config.get(k) is not None) or "none") + (
        "; per method "
        + "; ".join(
            f"{m}: " + ", ".join(f"{k} = {v}" for k, v in (over or {}).items())
            for m, over in config["method_settings"].items()
            if m in ran
        )
        if any(m in ran for m in config.get("method_settings") or {})
        else ""
    )
    return [
        setup,
        f"every method runs with its own defaults (as a single run of it) except the benchmark's shared "
        f"settings: {settings}",
    ]


def _cfl_grid():
    # a grid's module (and every method it runs) loads when its node runs, not at every kedro start
    from fedclust.grids import cfl

    return grid_pipeline(
        "cfl_grid",
        cfl,
        cfl.tables,
        "CFL-MGD / IFCA / FedAvg on rotated data (Table 2 layout: test accuracy, mean ± std over seeds)",
        metric="test_accuracy",
        curve_keys=cfl.CURVE_KEYS,
    )


def _rr_grid():
    # a grid's module (and every method it runs) loads when its node runs, not at every kedro start
    from fedclust.grids import rr

    def figures(records: list[dict], config: dict, data_paths: dict):
        chance = _chance_of_classes([config.get("dataset", "digits")], data_paths)
        return rr.privacy_utility_figure(records, chance), rr.rounds_figure(records)

    figures.__name__ = "rr_grid_figures"
    base = grid_pipeline(
        "rr_grid",
        rr,
        rr.tables,
        "RR-Cluster grid: Table 1 (test accuracy) and Table 4 (clustering accuracy) layouts",
        metric="test_accuracy",
        curve_keys=rr.CURVE_KEYS,
    )
    extra = Pipeline(
        [
            node(
                figures,
                ["records", "params:config", "params:data_paths"],
                ["privacy_utility_plot", "rounds_by_epsilon_plot"],
                name="figures",
                tags=["reporting", "grid"],
            )
        ],
        namespace="rr_grid",
        parameters={"params:data_paths"},
    )
    return base + extra


def _chance_of_classes(datasets: list[str], data_paths: dict | None) -> float | None:
    """1 / number of classes of the first data set: the test accuracy of guessing (clustered FL)."""
    if not datasets:
        return None
    return 1.0 / load_grid_data(datasets[0], data_paths).n_classes


def _privacy_audit():
    # a grid's module (and every method it runs) loads when its node runs, not at every kedro start
    from fedclust.grids import privacy_audit

    def tabulate_audits(records: list[dict]):
        tabs = privacy_audit.tables(records)
        csv, md = _tables_to_outputs(
            tabs,
            "Privacy audit: ε accounted (upper bound) vs ε audited (lower bounds: "
            "distribution-free, tight Gaussian-DP, measured noise; noise off), "
            "tightness (LOW below 0.5) and the halved-noise mutant's verdict",
        )
        per_method = {f"{r['name']}/audit": r["audit"] for r in records}
        return csv, md, privacy_audit.audit_figure(records), per_method

    def check_verdicts(records: list[dict]) -> None:
        errors = privacy_audit.verdict_errors(records)
        if errors:
            raise RuntimeError(
                "privacy audit failed: " + "; ".join(errors) + "; see data/08_reporting/privacy_audit/summary.md"
            )

    return Pipeline(
        [
            *cell_nodes(
                privacy_audit,
                "privacy_audit",
                ("privacy", "audit"),
                ("privacy", "audit"),
                with_data_paths=False,
                settings=lambda c: privacy_audit.execution_config(privacy_audit.check_config(c)),
                on_record=privacy_audit.log_record,
            ),
            node(
                tabulate_audits,
                "records",
                ["summary_csv", "summary_md", "audit_plot", "audits"],
                name="tabulate_audits",
                tags=["reporting", "audit"],
            ),
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
