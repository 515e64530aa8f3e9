"""Experiment grids: records of many (method, data, partition, budget, seed) cells and their summaries
(the cells themselves run through :func:`fedclust.executors.run_cells`).

A *cell* is a dict of parameters; a *record* is what a cell produced::

    {"name": "dp_fedc/eps=20/K=30/seed=0",
     "tags": {"method": "dp_fedc", "dataset": "mnist", "partition": "iid", "epsilon": "20"},
     "params": {...}, "metrics": {"ACC": 0.61, ...}, "history": {"objective": [...], ...}}

Records are plain data: the Kedro side logs each one as a nested MLflow run and writes tables.
No Kedro imports here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def eps_label(e) -> str:
    """How a privacy budget is written in tags and tables: "inf" for none (null, inf or NaN)."""
    if e is None or (isinstance(e, float) and (math.isinf(e) or math.isnan(e))):
        return "inf"
    return f"{float(e):g}"


def records_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record: its tags, params and final metrics as columns."""
    rows = []
    for r in records:
        row = {"name": r.get("name", "")}
        row.update({k: v for k, v in (r.get("tags") or {}).items()})
        row.update({k: v for k, v in (r.get("params") or {}).items() if k not in row})
        row.update(r.get("metrics") or {})
        rows.append(row)
    return pd.DataFrame(rows)


def _fmt(mean: float, std: float, digits: int) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "n/a"
    if abs(mean) >= 1000:  # counts such as uploaded reals: significant digits, not decimals
        return f"{mean:.4g}" if (isinstance(std, float) and math.isnan(std)) or std == 0 else f"{mean:.4g} ± {std:.2g}"
    if isinstance(std, float) and math.isnan(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def summarize(frame: pd.DataFrame, by: list[str], metrics: list[str], digits: int = 3) -> pd.DataFrame:
    """Mean ± std (over seeds, population std) of ``metrics`` grouped by ``by``; also ``n`` per group.

    Returns a frame with, per metric, numeric ``<m>_mean``/``<m>_std`` columns and a formatted
    ``<m>`` column. A group where a metric is missing (not applicable) shows ``n/a``.
    """
    present = [m for m in metrics if m in frame.columns]
    g = frame.groupby(by, sort=False, dropna=False)
    out = g.size().rename("n").to_frame()
    for m in present:
        vals = pd.to_numeric(frame[m], errors="coerce")
        mean = vals.groupby([frame[b] for b in by], sort=False, dropna=False).mean()
        std = vals.groupby([frame[b] for b in by], sort=False, dropna=False).std(ddof=0)
        out[f"{m}_mean"] = mean
        out[f"{m}_std"] = std
        out[m] = [_fmt(a, b, digits) for a, b in zip(mean, std)]
    for m in metrics:
        if m not in present:
            out[m] = "n/a"
    return out.reset_index()


def pivot_table(summary: pd.DataFrame, index: str, columns: list[str] | str, value: str) -> pd.DataFrame:
    """A paper-style table: ``index`` rows, one column per value of ``columns``, cells ``value``."""
    return summary.pivot_table(index=index, columns=columns, values=value, aggfunc="first", sort=False)


def to_markdown(frame: pd.DataFrame, title: str | None = None) -> str:
    """A GitHub-flavoured Markdown table (no extra dependency on tabulate)."""
    frame = frame.copy()
    if not isinstance(frame.index, pd.RangeIndex):
        frame = frame.reset_index()
    frame.columns = [" / ".join(map(str, c)) if isinstance(c, tuple) else str(c) for c in frame.columns]
    head = "| " + " | ".join(frame.columns) + " |"
    sep = "|" + "|".join("---" for _ in frame.columns) + "|"

    def cell(v):
        if isinstance(v, (float, np.floating)):
            return "n/a" if math.isnan(v) else f"{v:.4g}"
        return str(v)

    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    lines = ([f"### {title}", ""] if title else []) + [head, sep, *body]
    return "\n".join(lines) + "\n"
