"""What a ``kedro run`` shows on the terminal: progress bars over nodes and rounds (on a terminal
only), and at the end a summary table: method, ACC/NMI or test accuracy with their chance line,
the majority baseline and the ``AT CHANCE`` / ``COLLAPSED`` flags, epsilon with its trust model, wall time and MLflow run id, then
where to see the run: ``make mlflow-ui`` and the experiment's runs view in the MLflow UI."""

from __future__ import annotations

import logging
import sys
import time

import mlflow
from kedro.framework.hooks import hook_impl
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from fedclust import progress
from fedclust.hooks.state import RUN, is_grid_run, method_of
from fedclust.hooks.tags import fmt_eps
from fedclust.pipelines.mlflow_io import run_address

#: how a one-model method's client clustering is shown (the benchmark report's words)
ONE_MODEL_FLAG = "n/a (one model)"

logger = logging.getLogger(__name__)


def _eps_of(privacy: dict):
    eps = privacy.get("epsilon_accountant")
    return None if eps in (None, "inf") else eps


def _utility(met: dict, method: str = "") -> str | None:
    if "ACC" in met:
        util = f"ACC {met['ACC']:.3f} · NMI {met.get('NMI', float('nan')):.3f}"
        lines = []
        if "ACC_chance" in met:
            chance = f"chance: ACC {met['ACC_chance']:.3f}"
            if "NMI_chance" in met:
                chance += f", NMI {met['NMI_chance']:.3f}"
            lines.append(chance)
        if "ACC_majority" in met:
            lines.append(f"majority ACC {met['ACC_majority']:.3f}")
        lines += [flag for key, flag in (("at_chance", "AT CHANCE"), ("collapsed", "COLLAPSED")) if met.get(key)]
        return util + (f" ({'; '.join(lines)})" if lines else "")
    if "test_accuracy" in met:
        # here: the method registry (with scikit-learn's metrics, about half a second) loads when a run
        # needs it, not when Kedro imports the project's settings for every command (kedro --version)
        from fedclust.registry.clustered_fl import ONE_MODEL

        util = f"test acc {met['test_accuracy']:.3f}"
        if method in ONE_MODEL:  # one model for every client: there is no client clustering to score
            return util + f" · client clustering {ONE_MODEL_FLAG}"
        if "client_ACC" in met:
            util += f" · client ACC {met['client_ACC']:.3f}"
            if "client_ACC_chance" in met:
                util += f" (chance {met['client_ACC_chance']:.3f}" + (
                    "; AT CHANCE)" if met.get("client_at_chance") else ")"
                )
        return util
    if "objective_ratio" in met:  # a data set without labels
        return f"objective ratio {met['objective_ratio']:.3f} (to k-means)"
    return None


def add_setup_time(metrics: dict, setup_s: float) -> None:
    """A method's ``wall_time_s`` from the start of the run: its training time (kept as
    ``train_time_s``) plus the data and partition steps before it."""
    if isinstance(metrics.get("wall_time_s"), (int, float)) and "train_time_s" not in metrics:
        metrics["train_time_s"] = float(metrics["wall_time_s"])
        metrics["wall_time_s"] = float(metrics["wall_time_s"]) + float(setup_s)


def summary_rows(
    summary: dict[str, dict],
    grid_records: dict[str, list],
    *,
    grid_cells: dict[str, int] | None = None,
    grid_wall_s: dict[str, float] | None = None,
) -> list[dict]:
    """One row per method (or grid) of a finished run, for the summary table.

    ``summary`` maps a method to what its nodes returned (``metrics``, ``privacy``, ``wall_time_s``);
    ``grid_records`` a grid to its records, ``grid_cells`` to its number of cells and ``grid_wall_s``
    to its wall time.
    """
    rows = []
    for method, s in summary.items():
        met, priv = s.get("metrics") or {}, s.get("privacy") or {}
        util = _utility(met, method)
        if util is None:
            continue
        wall = s.get("wall_time_s", met.get("wall_time_s"))
        eps = fmt_eps(_eps_of(priv))
        if priv.get("trust_model") not in (None, "none"):
            eps = f"{eps} ({priv['trust_model']})"
        rows.append(
            {
                "method": method,
                "result": util,
                "epsilon": eps,
                "wall_time_s": "" if wall is None else f"{float(wall):.1f}",
                "run_id": RUN.run_id(method),
            }
        )
    for grid, records in grid_records.items():
        wall = (grid_wall_s or {}).get(grid)
        cells = (grid_cells or {}).get(grid)
        runs = f"{len(records)} runs" + (f" in {cells} cells" if cells is not None else "")
        rows.append(
            {
                "method": grid,
                "result": runs,
                "epsilon": "per cell",
                "wall_time_s": "" if wall is None else f"{wall:.1f}",
                "run_id": RUN.parent_id or "",
            }
        )
    return rows


def print_summary(title: str, rows: list[dict], width: int | None = None) -> None:
    table = Table(title=f"fedclust: {title}", title_justify="left")
    for col, just in (
        ("method", "left"),
        ("result", "left"),
        ("ε", "right"),
        ("wall time (s)", "right"),
        ("MLflow run id", "left"),
    ):
        table.add_column(col, justify=just, no_wrap=col == "MLflow run id")
    for r in rows:
        table.add_row(r["method"], r["result"], r["epsilon"], r["wall_time_s"], r["run_id"])
    Console(width=width or max(120, Console().width)).print(table)


class _Bars:
    """A bar over the nodes and, under it, one over the rounds of the training node that runs (the
    library's round loops report through :mod:`fedclust.progress`); nothing when not on a terminal."""

    def __init__(self, total: int):
        self.bar = Progress(
            TextColumn("[bold]{task.fields[unit]:>6}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            transient=True,
        )
        self.task = self.bar.add_task("", total=total, unit="nodes")
        self.rounds = None
        self.bar.start()

    def start_rounds(self, node) -> None:
        if "training" not in node.tags or self.rounds is not None:
            return
        bar, where = self.bar, node.namespace or node.name
        task = bar.add_task(where, total=None, unit="rounds")

        def update(label: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None, description=f"{where} · {label}")

        listening = progress.listening(update)
        listening.__enter__()
        self.rounds = (task, listening)

    def stop_rounds(self) -> None:
        if self.rounds is None:
            return
        task, listening = self.rounds
        self.rounds = None
        listening.__exit__(None, None, None)
        self.bar.remove_task(task)

    def node_done(self, name: str) -> None:
        self.stop_rounds()
        self.bar.update(self.task, advance=1, description=name)

    def stop(self) -> None:
        self.stop_rounds()
        self.bar.stop()


class SummaryHook:
    """Progress bars during the run (grids show their own bar over cells) and the summary table at
    its end, from the ``result``, ``metrics``, ``privacy`` and ``records`` outputs of each method."""

    def __init__(self):
        self._bars: _Bars | None = None
        self._t0: dict[str, float] = {}
        self._summary: dict[str, dict] = {}
        self._grid_records: dict[str, list] = {}
        self._grid_cells: dict[str, int] = {}
        self._setup_s = 0.0  # the data and partition steps: part of every method's wall time
        self._node_s: dict[str, float] = {}  # time in each method's (or grid's) nodes

    def _stop_bars(self) -> None:
        if self._bars is not None:
            try:
                self._bars.stop()
            finally:
                self._bars = None

    @hook_impl
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        self._summary, self._grid_records, self._grid_cells = {}, {}, {}
        self._setup_s, self._node_s = 0.0, {}
        self._stop_bars()
        if sys.stderr.isatty() and not is_grid_run(pipeline):  # quiet in logs, pipes and tests
            self._bars = _Bars(len(pipeline.nodes))

    @hook_impl
    def before_node_run(self, node, catalog, inputs) -> None:
        self._t0[node.name] = time.perf_counter()
        if self._bars is not None:
            self._bars.start_rounds(node)

    @hook_impl
    def after_node_run(self, node, catalog, inputs, outputs) -> None:
        dt = time.perf_counter() - self._t0.pop(node.name, time.perf_counter())
        logger.debug("node %s finished in %.2f s", node.name, dt)
        if self._bars is not None:
            self._bars.node_done(node.name)
        method = method_of(node)
        if method is None:
            self._setup_s += dt
            return
        self._node_s[method] = self._node_s.get(method, 0.0) + dt
        for name, value in outputs.items():
            short = name.rsplit(".", 1)[-1]
            if short == "metrics" and isinstance(value, dict):
                add_setup_time(value, self._setup_s)  # before metrics.json and MLflow get them
            elif short == "cells" and isinstance(value, dict) and isinstance(value.get("cells"), list):
                self._grid_cells[method] = len(value["cells"])
            if short == "result" and hasattr(value, "info"):
                wall = value.info.get("wall_time_s")
                self._summary.setdefault(method, {})["wall_time_s"] = None if wall is None else wall + self._setup_s
            elif short == "metrics" and isinstance(value, dict):
                self._summary.setdefault(method, {}).update(metrics=value)
            elif short == "privacy" and isinstance(value, dict):
                self._summary.setdefault(method, {}).update(privacy=value)
            elif short == "records" and isinstance(value, list):
                self._grid_records[method] = value

    @hook_impl
    def on_node_error(self, error, node, catalog, inputs, is_async) -> None:
        if self._bars is not None:
            self._bars.stop_rounds()

    @hook_impl
    def after_pipeline_run(self, run_params, run_result, pipeline, catalog) -> None:
        self._stop_bars()
        walls = {g: self._setup_s + self._node_s.get(g, 0.0) for g in self._grid_records}
        rows = summary_rows(self._summary, self._grid_records, grid_cells=self._grid_cells, grid_wall_s=walls)
        if rows:
            try:
                only_grids = self._grid_records and not self._summary  # a grid's table fits 100 columns
                print_summary(RUN.name, rows, width=100 if only_grids else None)
            except Exception as exc:  # never fail a finished run for its summary
                logger.warning("could not print the summary: %s", exc)
        benchmarks = [g for g, records in self._grid_records.items() if g.endswith("benchmark") and records]
        for grid in benchmarks:
            self._print_benchmark(grid, self._grid_records[grid])
        if rows and not benchmarks and RUN.parent_id:  # a benchmark's lines end with the same hint
            self._print_ui_hint(RUN.parent_id)

    @staticmethod
    def _print_ui_hint(run_id: str) -> None:
        """Where to see the run among the others: the MLflow UI to start, and its runs view."""
        try:
            exp = mlflow.get_run(run_id).info.experiment_id
            print("MLflow: " + run_address(mlflow.get_tracking_uri(), exp, run_id))
        except Exception as exc:  # never fail a finished run for its summary
            logger.warning("could not print where the MLflow run is: %s", exc)

    @staticmethod
    def _print_benchmark(grid: str, records: list[dict]) -> None:
        """After a benchmark: its table (sorted by epsilon, then ACC; 100 columns), the report's path
        and the MLflow address of its run."""
        try:
            # imported here: the report pulls in matplotlib and every method's registry entry, which
            # the start of every other run would pay for
            from fedclust.pipelines.reporting.nodes import grid_report_lines

            print("\n".join(grid_report_lines(grid, records, RUN.method_run_ids.get(grid) or RUN.parent_id)))
        except Exception as exc:  # never fail a finished run for its summary
            logger.warning("could not print the benchmark table: %s", exc)

    @hook_impl
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        self._stop_bars()
