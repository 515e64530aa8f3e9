"""The papers' experiment grids, as plain functions that return records (fedclust.experiments).

One module per paper; each exposes ``cells(config, data_paths) -> list[cell]`` (plain dicts that
carry everything a cell needs), ``run_cell(cell) -> list[record]`` (a pure, module-level function:
the same cell gives the same records on any executor), ``run(config, data_paths) -> list[record]``
(both, through :func:`run_grid`) and ``tables(records) -> dict[name, DataFrame]``. A cell names its
data (:func:`cell_sources`), and the key under which it is stored covers a hash of that data's
content (:func:`cell_data_digest`) and of the grid's code. :func:`run_planned` is the one grid runner
(over :func:`fedclust.executors.run_cells`): :func:`run_grid` and the Kedro ``<name>_grid`` pipelines
(which log every cell as a nested MLflow run as soon as it finishes) both run their cells there.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

from fedclust.data.registry import dataset_digest
from fedclust.digest import text_digest
from fedclust.executors import CellStore, code_version, execution, run_cells


def cell_name(cell: dict) -> str:
    """A short description of a cell for progress lines (its own keys, not the shared config)."""
    return "/".join(
        f"{k}={v}" for k, v in cell.items() if k not in ("config", "data_paths") and not isinstance(v, dict)
    )


def cell_sources(cell: dict) -> list[dict]:
    """The data sets a cell reads, as ``{name, path, options}``: a cell's own ``source`` (FedSC),
    the cell inside a wrapper cell (the benchmark's clustered-FL half), or the data set the cell
    or its shared config names (``dataset``, default ``digits``) with its path from ``data_paths``.
    A cell with neither ``source`` nor ``data_paths`` reads no data set (it generates its own)."""
    if isinstance(cell.get("source"), dict):
        src = cell["source"]
        return [{"name": src.get("name"), "path": src.get("path"), "options": dict(src.get("options") or {})}]
    if isinstance(cell.get("cell"), dict):
        return cell_sources(cell["cell"])
    if "data_paths" not in cell:
        return []
    config = cell.get("config") or {}
    name = cell["dataset"] if isinstance(cell.get("dataset"), str) else config.get("dataset", "digits")
    return [
        {
            "name": name,
            "path": (cell["data_paths"] or {}).get(name),
            "options": dict(config.get("dataset_options") or {}),
        }
    ]


def cell_data_digest(cell: dict) -> str:
    """A hash of the content of every data set ``cell`` reads (:func:`cell_sources`)."""
    return text_digest(*(dataset_digest(s["name"], s["path"], 0, s["options"]) for s in cell_sources(cell)))


def grid_code(module) -> str:
    """The code version of a grid (:func:`fedclust.executors.code_version`): the sources of the
    module that defines its ``run_cell`` and of what that module imports."""
    name = module.__name__ if isinstance(module, ModuleType) else module.run_cell.__module__
    return code_version(name)


def run_grid(
    module: ModuleType,
    config: dict,
    data_paths: dict | None = None,
    *,
    label: str = "grid",
    store: CellStore | str | None = None,
    on_done: Callable[[int, Any, bool], None] | None = None,
) -> list[dict]:
    """``module.run_cell`` on every cell of ``module.cells(config, data_paths)`` with the executor
    of ``config`` (:func:`fedclust.executors.execution`); the records of all cells, in cell order."""
    plan = {"cells": module.cells(config, data_paths), **execution(config)}
    return run_planned(module, plan, label=label, store=store, on_done=on_done)


def run_planned(
    module: ModuleType,
    plan: dict,
    *,
    label: str = "grid",
    store: CellStore | str | None = None,
    on_done: Callable[[int, Any, bool], None] | None = None,
) -> list[dict]:
    """The one grid runner: ``module.run_cell`` on ``plan["cells"]`` with ``plan``'s ``executor``,
    ``options`` and ``resume`` (:func:`fedclust.executors.execution`), each cell named, keyed by
    its data and the grid's code, stored and handed to ``on_done`` as it finishes (the library's
    :func:`run_grid` and the Kedro grid pipelines both run here); the records of all cells, in cell order."""
    results = run_cells(
        module.run_cell,
        plan["cells"],
        plan["executor"],
        plan["options"],
        on_done=on_done,
        store=store,
        resume=plan["resume"],
        label=label,
        name=cell_name,
        data_of=cell_data_digest,
        code=grid_code(module),
    )
    return [rec for res in results for rec in res]
