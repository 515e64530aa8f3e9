"""Figures for reports: per-run histories, grid sweeps and curves, privacy-utility, centroids, confusion.

Plain matplotlib on plain data (histories, grid records as in :mod:`fedclust.experiments`, summary
tables); no Kedro. Every function returns a :class:`matplotlib.figure.Figure`; the caller saves it.

Conventions shared by the figures:

* a budget is written as in tags (``"4"``, ``"inf"``); non-private results sit at the right end of
  an epsilon axis, at a position marked ``inf (no DP)``;
* a figure never holds an empty panel: a panel is drawn only for data that exist, and a panel
  without data (a figure with nothing to show) says so in words;
* legends sit outside the axes (right of the panels), never over the data.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

#: the footnote of every figure of values measured on raw data
OUTSIDE_GUARANTEE = "experimenter-side evaluation on raw data: outside the DP guarantee"
#: table columns that are results or bookkeeping, never a swept setting
_NOT_KEYS = {
    "method",
    "label",
    "n",
    "dataset",
    "table",
    "status",
    "name",
    "family",
    "at_chance",
    "collapsed",
    "trust_model",
}
_METRIC_NAMES = {
    "ACC",
    "NMI",
    "NMI_paper",
    "ARI",
    "wall_time_s",
    "test_accuracy",
    "client_ACC",
    "client_NMI",
    "objective",
    "objective_ratio",
    "objective_kmeans",
    "epsilon_accountant",
    "uploaded_reals",
    "mean_moved",
    "min_noisy_cluster",
}


# ---------------------------------------------------------------------------------------- helpers


def subplots(nrows: int = 1, ncols: int = 1, *, figsize=None, **kw):
    """``(fig, axes)`` as ``pyplot.subplots`` gives them, on an Agg canvas of the figure's own: no
    pyplot state, no backend chosen, nothing shown. pyplot is never imported here, which keeps it
    off the start-up of runs that draw nothing."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kw)


def panel_grid(n: int, ncols: int = 3, width: float = 4.0, height: float = 3.0, **kw):
    """``(fig, axes)``: ``n`` panels in rows of at most ``ncols``; unused cells are removed."""
    n = max(int(n), 1)
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig, axes = subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kw)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        fig.delaxes(ax)
    return fig, flat[:n]


def message_figure(text: str, title: str = ""):
    """A small figure that says why there is nothing to plot."""
    fig, ax = subplots(figsize=(4.5, 2.0))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    if title:
        ax.set_title(title, fontsize=9)
    return fig


def eps_value(label) -> float:
    """``"4"`` -> 4.0; ``"inf"``, None, NaN -> inf."""
    if label is None:
        return math.inf
    try:
        v = float(label)
    except (TypeError, ValueError):
        return math.inf
    return math.inf if math.isnan(v) else v


def eps_text(eps) -> str:
    v = eps_value(eps)
    return "∞ (no DP)" if math.isinf(v) else f"{v:.3g}"


def _legend_right(fig, axes, fontsize: int = 7, title: str | None = None):
    """One legend for all panels, right of the figure (duplicates dropped)."""
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels and not lab.startswith("_"):
                handles.append(h)
                labels.append(lab)
    if handles:
        return fig.legend(
            handles,
            labels,
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            fontsize=fontsize,
            title=title,
            title_fontsize=fontsize,
            frameon=False,
        )
    return None


def _is_constant(values: Sequence[float]) -> bool:
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return len(vals) == 0 or (max(vals) - min(vals)) <= 1e-12 * max(1.0, abs(max(vals)))


def _numeric(values) -> bool:
    try:
        [float(v) for v in values]
    except (TypeError, ValueError):
        return False
    return True


# --------------------------------------------------------------------------- one run: history


def _releases_up_to(rs: list, t: int, R: int, sequential: bool) -> list:
    """The releases of rounds 1..t (see :func:`epsilon_by_round`)."""
    if not sequential:
        return [replace(r, count=max(1, math.ceil(r.count * t / R))) for r in rs]
    out, left = [], t
    for r in rs:
        if left <= 0:
            break
        out.append(replace(r, count=min(int(r.count), left)))
        left -= int(r.count)
    return out


def epsilon_by_round(
    releases: Iterable, delta: float, accountant: str = "rdp", rounds: int | None = None, max_points: int = 30
) -> list[tuple[int, float]]:
    """``[(t, epsilon after the first t rounds)]``: the accountant on the releases of rounds 1..t.

    Two layouts of a run's releases are read: releases that repeat over the whole run (FKM's
    ``count = rounds``; a once-only release counts from round 1) are cut to their share of the
    first t rounds, ``ceil(count * t / R)``; releases whose counts add up to ``rounds`` and differ
    (DP-FedC: one release per stretch of rounds with the same schedule) are consecutive stretches,
    taken in order. ``R`` is ``rounds`` or the largest ``count``. At most ``max_points`` rounds are
    accounted (evenly spaced, the last always). Empty when no release is private.
    """
    # loaded on first use by the one figure that needs it
    from fedclust.privacy.accountants import epsilon

    rs = [r for r in releases if getattr(r, "count", 0) > 0]
    if not rs or not all(getattr(r, "is_private", True) for r in rs):
        return []
    counts = [int(r.count) for r in rs]
    R = int(rounds) if rounds else max(counts)
    sequential = bool(rounds) and len(rs) > 1 and sum(counts) == R and len(set(counts)) > 1
    ts = sorted({int(round(v)) for v in np.linspace(1, R, min(R, max(int(max_points), 2)))})
    return [(t, float(epsilon(_releases_up_to(rs, t, R, sequential), delta, accountant))) for t in ts]


def _history_steps(history: dict, hist: list) -> list[int]:
    rounds = history.get("round") or []
    return [int(r) for r in rounds] if len(rounds) == len(hist) else list(range(1, len(hist) + 1))


def history_figure(
    history: dict,
    *,
    method: str,
    dataset: str = "",
    partition: str = "",
    epsilon="inf",
    eps_rounds: Sequence[tuple[int, float]] | None = None,
    ncols: int = 3,
):
    """The per-round histories of one run, one panel per metric, in rows of ``ncols``.

    Histories that are empty, not numeric or constant (nothing to read) get no panel; a last panel
    shows epsilon spent against rounds when ``eps_rounds`` is given. The title names the method,
    data, partition and epsilon (as accounted).
    """
    panels = {}
    for key, hist in history.items():
        if key in ("round", "lr") or not len(hist) or not all(isinstance(x, (int, float)) for x in hist):
            continue
        if _is_constant(hist) or [float(v) for v in hist] == [float(t) for t in _history_steps(history, hist)]:
            continue  # nothing to read, or a round counter
        panels[key] = hist
    n = len(panels) + int(bool(eps_rounds))
    title = f"{method} · {dataset or '?'} / {partition or '?'} · ε = {eps_text(epsilon)}"
    if n == 0:
        return message_figure("no per-round metric varies in this run", title)
    fig, axes = panel_grid(n, ncols=2 if n in (2, 4) else ncols, width=3.8, height=2.9)
    for ax, (key, hist) in zip(axes, panels.items()):
        steps = _history_steps(history, hist)
        ax.plot(steps, hist, marker="." if len(hist) < 40 else None)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if key == "objective" and min(hist) > 0 and max(hist) / min(hist) > 50:
            ax.set_yscale("log")
    if eps_rounds:
        ax = axes[-1]
        ts, es = zip(*eps_rounds)
        ax.plot(ts, es, color="tab:red", marker="." if len(ts) < 40 else None)
        ax.set_title("ε spent (accountant)", fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("round")
        ax.set_ylabel("ε")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=11)
    fig.text(0.5, 0.005, OUTSIDE_GUARANTEE, ha="center", va="bottom", fontsize=7, color="0.4")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def centroid_images_figure(centroids: np.ndarray, image_shape: Sequence[int], title: str = "", ncols: int = 10):
    """Each centroid drawn as an image of ``image_shape`` ((H, W) or (C, H, W)), one tile per cluster."""
    C = np.asarray(centroids, dtype=float)
    shape = tuple(int(s) for s in image_shape)
    if C.ndim != 2 or C.shape[1] != int(np.prod(shape)):
        raise ValueError(f"centroids of shape {C.shape} cannot be drawn as images of shape {shape}")
    k = C.shape[0]
    ncols = min(ncols, k)
    nrows = math.ceil(k / ncols)
    fig, axes = subplots(nrows, ncols, figsize=(1.25 * ncols, 1.35 * nrows + 0.5), squeeze=False)
    for i, ax in enumerate(axes.ravel()):
        ax.set_xticks([])
        ax.set_yticks([])
        if i >= k:
            fig.delaxes(ax)
            continue
        img = C[i].reshape(shape)
        if img.ndim == 3:  # (C, H, W) -> (H, W, C), scaled to [0, 1]
            img = np.moveaxis(img, 0, -1)
            lo, hi = img.min(), img.max()
            ax.imshow((img - lo) / (hi - lo) if hi > lo else np.zeros_like(img))
        else:
            ax.imshow(img, cmap="gray_r")
        ax.set_title(f"cluster {i}", fontsize=7)
    fig.suptitle(title or "learned centroids", fontsize=9)
    fig.tight_layout()
    return fig


def centroid_heatmap_figure(centroids: np.ndarray, title: str = ""):
    """Centroids of non-image data: one row per cluster, one column per feature."""
    C = np.asarray(centroids, dtype=float)
    k, m = C.shape
    fig, ax = subplots(figsize=(min(2.0 + 0.35 * m, 12.0), 1.2 + 0.3 * k))
    im = ax.imshow(C, aspect="auto", cmap="viridis")
    ax.set_xlabel("feature")
    ax.set_ylabel("cluster")
    ax.set_yticks(range(k))
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set_title(title or "learned centroids", fontsize=9)
    fig.tight_layout()
    return fig


def confusion_figure(y_true, y_pred, title: str = ""):
    """Confusion matrix of true classes (rows) against clusters (columns), the clusters ordered by
    the ACC matching (Hungarian) so that a perfect clustering is diagonal."""
    # loaded on first use by the one figure that needs it
    from scipy.optimize import linear_sum_assignment

    y_true = np.asarray(y_true).astype(int)
    y_pred = np.asarray(y_pred).astype(int)
    classes, yi = np.unique(y_true, return_inverse=True)
    clusters, pi = np.unique(y_pred, return_inverse=True)
    table = np.zeros((len(classes), len(clusters)), dtype=int)
    np.add.at(table, (yi, pi), 1)
    rows, cols = linear_sum_assignment(table, maximize=True)
    order = list(cols[np.argsort(rows)]) + [c for c in range(len(clusters)) if c not in cols]
    table = table[:, order]
    fig, ax = subplots(figsize=(0.45 * len(order) + 2.2, 0.45 * len(classes) + 1.6))
    im = ax.imshow(table, cmap="Blues")
    if table.size <= 400:
        thr = table.max() / 2
        for (i, j), v in np.ndenumerate(table):
            if v:
                ax.text(j, i, str(v), ha="center", va="center", fontsize=6, color="white" if v > thr else "black")
    ax.set_xticks(range(len(order)), [str(clusters[c]) for c in order], fontsize=7)
    ax.set_yticks(range(len(classes)), [str(c) for c in classes], fontsize=7)
    ax.set_xlabel("cluster (matched to classes)")
    ax.set_ylabel("true class")
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------ grid figures


def _group_frame(records: list[dict]) -> pd.DataFrame:
    # loaded on first use by the one figure that needs it
    from fedclust.experiments import records_frame

    return records_frame(records)


def privacy_utility_figure(
    records: list[dict],
    metric: str = "ACC",
    series: str = "method",
    facets: Sequence[str] = ("dataset", "partition"),
    chance=None,
    title: str = "",
):
    """``metric`` (mean ± std over seeds) against the accounted epsilon, one line per ``series``
    value, one panel per combination of ``facets``.

    The x axis is the epsilon the accountant reports for the noise actually added
    (``metrics.epsilon_accountant``, mean over seeds), on a log scale; non-private results sit at
    the right end, at ``inf (no DP)`` (a slot there only when one ran). ``chance``: a number, or ``{dataset: number}``, drawn as a
    dashed horizontal line.
    """
    recs = [r for r in records if (r.get("metrics") or {}).get(metric) is not None]
    if not recs:
        return message_figure(f"no run with {metric}", title)
    frame = _group_frame(recs)
    if "epsilon_accountant" not in frame.columns:
        frame["epsilon_accountant"] = math.inf
    frame["eps_acc"] = [
        eps_value(a) if eps_value(t) < math.inf else math.inf
        for a, t in zip(frame["epsilon_accountant"], frame.get("epsilon", ["inf"] * len(frame)))
    ]
    facets = [f for f in facets if f in frame.columns]
    if series not in frame.columns:
        series = "method"
    panels = list(frame.groupby(facets, sort=False)) if facets else [((), frame)]
    finite = [e for e in frame["eps_acc"] if math.isfinite(e) and e > 0]
    lo, hi = (min(finite), max(finite)) if finite else (1.0, 1.0)
    x_inf = hi * max(4.0, (hi / lo) ** 0.25) if finite else 1.0
    with_inf = any(not math.isfinite(e) for e in frame["eps_acc"])
    fig, axes = panel_grid(len(panels), ncols=3, width=4.4, height=3.4)
    colors = {s: f"C{i % 10}" for i, s in enumerate(dict.fromkeys(frame[series]))}
    for ax, (key, g) in zip(axes, panels):
        key = key if isinstance(key, tuple) else (key,)
        for s, gs in g.groupby(series, sort=False):
            stats = gs.groupby("epsilon", sort=False).agg(x=("eps_acc", "mean"), m=(metric, "mean"), sd=(metric, "std"))
            stats["x"] = [x_inf if not math.isfinite(x) else x for x in stats["x"]]
            stats = stats.sort_values("x")
            ax.errorbar(
                stats["x"],
                stats["m"],
                yerr=stats["sd"].fillna(0),
                marker="o",
                ms=4,
                capsize=2,
                label=str(s),
                color=colors[s],
            )
        ch = chance.get(dict(zip(facets, key)).get("dataset")) if isinstance(chance, dict) else chance
        if ch is not None:
            ax.axhline(ch, color="0.3", ls="--", lw=1, label="chance level")
        if finite:
            ax.set_xscale("log")
            ticks = sorted({float(f"{e:.2g}") for e in finite})
            if with_inf:  # the no-DP slot only where a non-private result sits in it
                ax.axvline(math.sqrt(hi * x_inf), color="0.7", lw=0.8, ls=":")
                ax.set_xticks(ticks + [x_inf], [f"{t:g}" for t in ticks] + ["∞\n(no DP)"], fontsize=7)
            else:
                ax.set_xticks(ticks, [f"{t:g}" for t in ticks], fontsize=7)
            ax.minorticks_off()
        else:
            ax.set_xticks([x_inf], ["∞\n(no DP)"])
        ax.set_xlabel("ε (accounted)")
        ax.set_ylabel(metric)
        ax.set_title(", ".join(str(k) for k in key), fontsize=9)
        ax.grid(alpha=0.3)
    _legend_right(fig, axes)
    fig.suptitle(title or f"privacy-utility: {metric} against the accounted ε", fontsize=10)
    fig.tight_layout()
    return fig


def rounds_by_epsilon_figure(
    records: list[dict],
    metric: str,
    series: str = "method",
    title: str = "",
    focus: Sequence[str] = ("dataset", "partition"),
    ncols: int = 3,
):
    """``metric`` per round (mean over seeds), one panel per ``series`` value, one line per epsilon
    in the same colors in every panel (darker = smaller ε, grey dashed = no DP).

    Only the first value of each ``focus`` key (e.g. the first data set and partition) is drawn, so
    lines compare budgets and nothing else; the title says which.
    """
    recs = [r for r in records if (r.get("history") or {}).get(metric)]
    if not recs:
        return message_figure(f"no run recorded {metric} per round", title)

    def val(r, k):
        return (r.get("tags") or {}).get(k, (r.get("params") or {}).get(k))

    shown = []
    for k in focus:
        first = next((val(r, k) for r in recs if val(r, k) is not None), None)
        if first is not None:
            recs = [r for r in recs if val(r, k) == first]
            shown.append(f"{k} {first}")
    by = {}
    for r in recs:
        by.setdefault(val(r, series) or val(r, "method"), {}).setdefault(val(r, "epsilon") or "inf", []).append(
            r["history"][metric]
        )
    multi = {s: d for s, d in by.items() if len(d) > 1}
    by = multi or by  # series run at one budget only say nothing about budgets: left out when others exist
    eps_all = sorted({e for d in by.values() for e in d}, key=eps_value)
    finite = [e for e in eps_all if math.isfinite(eps_value(e))]
    cmap = colormaps["viridis"]
    color = {e: cmap(0.15 + 0.7 * i / max(len(finite) - 1, 1)) for i, e in enumerate(finite)}
    fig, axes = panel_grid(len(by), ncols=ncols, width=3.8, height=2.9, sharey=False)
    for ax, (s, per_eps) in zip(axes, by.items()):
        for e in sorted(per_eps, key=eps_value):
            hs = per_eps[e]
            n = min(len(h) for h in hs)
            mean = np.mean([np.asarray(h[:n], dtype=float) for h in hs], axis=0)
            inf = not math.isfinite(eps_value(e))
            ax.plot(
                range(1, n + 1),
                mean,
                color="0.35" if inf else color[e],
                ls="--" if inf else "-",
                label=f"ε = {eps_text(e)}",
            )
        ax.set_title(str(s), fontsize=9)
        ax.set_xlabel("round (evaluation)" if metric == "test_accuracy" else "round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        if metric == "objective":
            ax.set_yscale("log")
    _legend_right(fig, axes, title="budget")
    fig.suptitle(title or f"{metric} per round across ε" + (f" ({', '.join(shown)})" if shown else ""), fontsize=10)
    fig.tight_layout()
    return fig


def _flat_columns(tab: pd.DataFrame) -> pd.DataFrame:
    tab = tab.copy()
    tab.columns = [" / ".join(str(x) for x in c if str(x)) if isinstance(c, tuple) else str(c) for c in tab.columns]
    return tab


def _order(values) -> list:
    vals = list(dict.fromkeys(values))
    if _numeric([v for v in vals if str(v) != "inf"]) and all(str(v) != "-" for v in vals):
        return sorted(vals, key=eps_value)
    return vals


def sweeps_figure(tables: dict[str, pd.DataFrame], metric: str = "ACC", max_panels: int = 12):
    """``metric`` (mean ± std) of every summary table against its swept setting.

    In each table, the key columns (settings that vary) are split into the x axis (``epsilon``
    where it varies, else the first numeric setting, else the first setting) and facets (one panel
    per combination of the other settings), and lines are drawn per method (or label) within one
    panel only: a line never joins results of different settings. One legend, right of the panels.
    """
    jobs = []
    for name, tab in tables.items():
        tab = _flat_columns(tab)
        if f"{metric}_mean" not in tab.columns:
            continue
        series = next((c for c in ("label", "method") if c in tab.columns), None)
        keys = [
            c
            for c in tab.columns
            if c not in _NOT_KEYS
            and c not in _METRIC_NAMES
            and not c.endswith(("_mean", "_std"))
            and tab[c].astype(str).nunique() > 1
        ]
        if "dataset" in tab.columns and tab["dataset"].nunique() > 1:
            keys = ["dataset"] + keys
        x = (
            "epsilon"
            if "epsilon" in keys
            else next(
                (k for k in keys if _numeric(tab[k].astype(str).replace("inf", "1e999"))), keys[0] if keys else None
            )
        )
        facets = [k for k in keys if k != x]
        groups = list(tab.groupby(facets, sort=False)) if facets else [((), tab)]
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            sub = ", ".join(f"{f}={v}" for f, v in zip(facets, key))
            jobs.append((f"{name}" + (f": {sub}" if sub else ""), x, series, g))
    if not jobs:
        return message_figure(f"no table has {metric}")
    extra = len(jobs) - max_panels
    jobs = jobs[:max_panels]
    fig, axes = panel_grid(len(jobs), ncols=3, width=4.2, height=3.2)
    colors: dict = {}
    for ax, (title, x, series, g) in zip(axes, jobs):
        xs_all = _order(g[x].astype(str)) if x else []
        for s, gs in g.groupby(series, sort=False) if series else [("", g)]:
            colors.setdefault(s, f"C{len(colors) % 10}")
            if x:
                gs = gs.assign(_pos=[xs_all.index(v) for v in gs[x].astype(str)]).sort_values("_pos")
                pos = list(gs["_pos"])
            else:
                pos = list(range(len(gs)))
            ax.errorbar(
                pos,
                gs[f"{metric}_mean"],
                yerr=gs[f"{metric}_std"].fillna(0),
                marker="o",
                ms=4,
                capsize=2,
                label=str(s),
                color=colors[s],
            )
        if x:
            labels = ["∞" if v == "inf" else v for v in xs_all]
            long = max((len(v) for v in labels), default=0) > 6 or len(labels) > 6
            ax.set_xticks(range(len(labels)), labels, rotation=90 if long else 0, fontsize=7)
            ax.set_xlim(-0.5, len(labels) - 0.5)
        ax.set_xlabel(x or "")
        ax.set_ylabel(metric)
        ax.set_title(title, fontsize=8)
        ax.grid(alpha=0.3)
    _legend_right(fig, axes)
    if extra > 0:
        fig.suptitle(f"first {max_panels} of {max_panels + extra} panels (summary.csv has all)", fontsize=8)
    fig.tight_layout()
    return fig


def _param_or_tag(r: dict, k: str):
    """A record's parameter ``k``, else its tag ``k`` (None when neither)."""
    return (r.get("params") or {}).get(k, (r.get("tags") or {}).get(k))


def _panel_groups(recs: list[dict], metric: str, keys: Sequence[str], focus: Sequence[str]):
    """(groups, fixed, varying) of the records that hold ``metric``: focus keys fixed to their first value."""
    val = _param_or_tag
    sub = [r for r in recs if len(r["history"].get(metric) or [])]
    fixed = []
    for k in focus:
        if k in keys and len({str(val(r, k)) for r in sub}) > 1:
            first = val(sub[0], k)
            sub = [r for r in sub if val(r, k) == first]
            fixed.append(f"{k} {first}")
    varying = [k for k in keys if len({str(val(r, k)) for r in sub}) > 1]
    groups: dict[tuple, list[dict]] = {}
    for r in sub:
        groups.setdefault(tuple((k, val(r, k)) for k in varying), []).append(r["history"])
    return groups, fixed, varying


def _curve_label(g) -> str:
    """The legend label of a curve's group ``g`` ((key, value) pairs)."""
    return ", ".join(f"{k}={v}" if k != "method" else str(v) for k, v in g if v is not None) or "all"


class _CurveStyles:
    """Color by method (else the first varying key), line style by epsilon (else the next key): the
    same curve looks the same in every panel."""

    STYLES = ("-", "--", ":", "-.")

    def __init__(self):
        self.colors: dict = {}
        self.lines: dict = {}

    def __call__(self, g, varying) -> dict:
        d = dict(g)
        ckey = "method" if "method" in d else (varying[0] if varying else None)
        lkey = "epsilon" if "epsilon" in d and ckey != "epsilon" else next((k for k in varying if k != ckey), None)
        colors, lines = self.colors, self.lines
        c = colors.setdefault(
            d.get(ckey), f"C{len(colors) % 10}" if len(colors) < 10 else colormaps["tab20"](len(colors) % 20)
        )
        ls = lines.setdefault(d.get(lkey), self.STYLES[len(lines) % len(self.STYLES)])
        return {"color": c, "ls": ls}


def _curve_panels(recs, shown, keys, focus, max_curves: int) -> list:
    """The panels ``(metric, title, items, varying)``: every curve is drawn; a metric with more than
    ``max_curves`` curves gets one panel per method (or per value of its first varying key), in panels
    of at most ``max_curves`` curves."""
    panels = []
    for metric in shown:
        groups, fixed, varying = _panel_groups(recs, metric, keys, focus)
        first_seen = list(dict.fromkeys(str(g[0][1]) if g else "" for g in groups))
        items = sorted(
            groups.items(),
            key=lambda kv: (
                first_seen.index(str(kv[0][0][1]) if kv[0] else ""),
                tuple(eps_value(v) if k == "epsilon" else 0 for k, v in kv[0]),
            ),
        )
        note = f" ({'; '.join(fixed)})" if fixed else ""
        if len(items) <= max_curves or not varying:
            for i in range(0, len(items), max_curves):
                panels.append((metric, metric + note, items[i : i + max_curves], varying))
            continue
        fkey = "method" if "method" in varying else varying[0]
        for fv in dict.fromkeys(dict(g)[fkey] for g, _ in items):
            sub = [(g, h) for g, h in items if dict(g)[fkey] == fv]
            for i in range(0, len(sub), max_curves):
                panels.append(
                    (
                        metric,
                        f"{metric} · {fv if fkey == 'method' else f'{fkey}={fv}'}{note}",
                        sub[i : i + max_curves],
                        varying,
                    )
                )
    return panels


def _draw_curve_panel(ax, metric: str, title: str, items, varying, style: _CurveStyles) -> None:
    """One panel: every group's history of ``metric``, averaged over its seeds."""
    for g, hists in items:
        series = [h[metric] for h in hists if len(h.get(metric) or [])]
        n = min(len(s_) for s_ in series)
        mean = np.mean([np.asarray(s_[:n], dtype=float) for s_ in series], axis=0)
        ax.plot(range(1, n + 1), mean, label=_curve_label(g), marker="." if n < 25 else None, **style(g, varying))
    ax.set_xlabel("round" if metric != "test_accuracy" else "evaluation")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3)
    if metric == "objective":
        ax.set_yscale("log")


def _draw_comm_panel(ax, recs, keys, focus, style: _CurveStyles) -> None:
    """The objective against the uploaded reals (first seed of every group)."""
    groups, _, varying = _panel_groups(recs, "objective", keys, focus)
    for g, hists in groups.items():
        h = next((h for h in hists if "comm_reals" in h and "objective" in h), None)
        if h:
            n = min(len(h["comm_reals"]), len(h["objective"]))
            ax.plot(h["comm_reals"][:n], h["objective"][:n], label=_curve_label(g), **style(g, varying))
    ax.set_xlabel("uploaded reals (first seed)")
    ax.set_ylabel("objective")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title("objective against communication", fontsize=9)
    ax.grid(alpha=0.3)


def curves_figure(
    records: list[dict],
    keys: Sequence[str],
    metrics: Sequence[str] = ("objective", "ACC", "test_accuracy", "train_loss", "n_moved"),
    max_curves: int = 10,
    focus: Sequence[str] = ("dataset", "partition", "setting"),
):
    """Convergence: per-round histories averaged over seeds, one panel per metric that some record
    holds, one line per combination of ``keys`` among the records that hold that metric.

    ``focus`` keys (among ``keys``) are fixed to their first value, and keys that are the same for
    every curve are left out of the labels. Where histories hold ``comm_reals``, a last panel shows
    the objective against uploaded reals. Every curve is drawn: a metric with more than
    ``max_curves`` curves is split into one panel per method (facets), each of at most ``max_curves``
    lines; one legend for all panels sits outside them, at the right.
    """
    recs = [r for r in records if r.get("history")]
    if not recs:
        return message_figure("no run recorded a per-round history")
    shown = [m for m in metrics if any(len(r["history"].get(m) or []) for r in recs)]
    comm = any("comm_reals" in r["history"] and "objective" in r["history"] for r in recs)
    if not shown and not comm:
        return message_figure(f"no history of {', '.join(metrics)}")
    style = _CurveStyles()
    panels = _curve_panels(recs, shown, keys, focus, max_curves)
    n_panels = len(panels) + int(comm)
    fig, axes = panel_grid(n_panels, ncols=2 if n_panels <= 4 else 3, width=4.6, height=3.2)
    for ax, (metric, title, items, varying) in zip(axes, panels):
        _draw_curve_panel(ax, metric, title, items, varying, style)
    if comm:
        _draw_comm_panel(axes[-1], recs, keys, focus, style)
    fig.suptitle("convergence, mean over seeds (every curve is in MLflow)", fontsize=9)
    fig.tight_layout()
    _legend_right(fig, axes)  # one legend for every panel, outside the axes (saved with bbox_inches="tight")
    return fig


def audit_bars_figure(names: Sequence[str], accounted, audited, noise_off, title: str = ""):
    """Accounted epsilon (upper bound) against the audited lower bounds, noise on and off, per case:
    grouped bars on a log scale (an audited bound is often 100 times below the accounted one), every
    bar labelled with its value, and a bound of 0 drawn as a short stub at the bottom so it stays
    visible."""
    names = list(names)
    series = [
        ("ε accounted (upper bound)", accounted, "#1f5fbf"),
        ("ε audited, noise on (lower bound)", audited, "#1a9641"),
        ("ε audited, noise off (power check)", noise_off, "#7f7f7f"),
    ]
    values = [np.asarray([np.nan if v is None else float(v) for v in vals], dtype=float) for _, vals, _ in series]
    positive = np.concatenate([v[np.isfinite(v) & (v > 0)] for v in values]) if values else np.array([])
    floor = (positive.min() / 3.0) if positive.size else 1e-3
    x = np.arange(len(names))
    fig, ax = subplots(figsize=(max(5.5, 1.1 * len(names) + 2.5), 3.8))
    w = 0.27
    for i, ((lab, _, color), v) in enumerate(zip(series, values)):
        shown = np.where(np.isfinite(v), np.maximum(v, floor * 1.4), np.nan)
        bars = ax.bar(
            x + (i - 1) * w, shown - floor, w, bottom=floor, label=lab, color=color, edgecolor="black", linewidth=0.4
        )
        for b, val in zip(bars, v):
            if np.isfinite(val):
                ax.annotate(
                    f"{val:.3g}",
                    (b.get_x() + b.get_width() / 2, b.get_y() + b.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    xytext=(0, 1),
                    textcoords="offset points",
                )
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor)
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_ylabel("ε (log scale)")
    ax.set_title(title or "Privacy audit: a sound method keeps the green bar below the blue one", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def best_run(records: list[dict], metric: str = "ACC") -> dict | None:
    """The record with the highest ``metric`` among those that kept their labels."""
    cands = [r for r in records if "labels" in r and (r.get("metrics") or {}).get(metric) is not None]
    return max(cands, key=lambda r: r["metrics"][metric]) if cands else None
