"""The papers' experiment grids, as plain functions that return records (fedclust.experiments).

One module per paper; each exposes ``cells(config, data_paths) -> list[cell]`` (plain dicts that
carry everything a cell needs), ``run_cell(cell) -> list[record]`` (a pure, module-level function:
the same cell gives the same records on any executor), ``run(config, data_paths) -> list[record]``
(both, through :func:`run_grid`) and ``tables(records) -> dict[name, DataFrame]``. The Kedro
``<name>_grid`` pipelines call ``cells`` and ``run_cell`` through :func:`fedclust.executors.run_cells`
and log every cell as a nested MLflow run as soon as it finishes.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

from fedclust.executors import CellStore, execution, run_cells


def cell_name(cell: dict) -> str:
    """A short description of a cell for progress lines (its own keys, not the shared config)."""
    return "/".join(f"{k}={v}" for k, v in cell.items() if k not in ("config", "data_paths") and not isinstance(v, dict))


def run_grid(module: ModuleType, config: dict, data_paths: dict | None = None, *, label: str = "grid",
             store: CellStore | str | None = None, on_done: Callable[[int, Any, bool], None] | None = None) -> list[dict]:
    """``module.run_cell`` on every cell of ``module.cells(config, data_paths)`` with the executor
    of ``config`` (:func:`fedclust.executors.execution`); the records of all cells, in cell order."""
    ex = execution(config)
    cells = module.cells(config, data_paths)
    results = run_cells(module.run_cell, cells, ex["executor"], ex["options"], on_done=on_done, store=store,
                        resume=ex["resume"], label=label, name=cell_name)
    return [rec for res in results for rec in res]
