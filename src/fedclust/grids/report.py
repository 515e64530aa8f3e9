"""The benchmark report: which method to use on which data, at which privacy budget, at what cost.

Plain library code (no Kedro), from a benchmark's records (:mod:`fedclust.grids.benchmark`):

* :func:`method_table`: one row per (data set, partition, epsilon, method): ACC as mean and 95 %
  confidence interval over seeds (Student t), the chance line and whether the result is at chance,
  the majority baseline (every sample in one cluster), NMI with its chance line and whether the
  result looks collapsed (:func:`fedclust.metrics.is_collapsed`), the trust model, the cost (rounds, bytes up and down per client, compute time, wall time of the
  cell) and the best method per (data set, partition, epsilon) marked; sorted by epsilon (no privacy
  last), then by ACC;
* :func:`privacy_statements`: one plain sentence per method: what is protected (one sample or one
  client), under which trust model, at which (epsilon, delta);
* :func:`parent_run_summary`: the metrics and tags of the benchmark's parent MLflow run
  (``best_ACC_eps_<e>``, ``best_method_eps_<e>``, the counts of runs done, failed, at chance and
  collapsed);
* :func:`privacy_utility_figure`: ACC against epsilon with CI bands, no privacy as its own point;
* :func:`to_markdown`, :func:`to_html` (self-contained: the plot inline as a base64 PNG) and
  :func:`terminal_lines` (at most 100 columns).
"""

from __future__ import annotations

import base64
import html
import io
import math
import textwrap

import numpy as np
import pandas as pd
from scipy import stats

from fedclust.experiments import records_frame
from fedclust.metrics import is_at_chance, is_collapsed
from fedclust.privacy.release import DESCRIPTIONS
from fedclust.registry import REFERENCES, REGISTRY

#: the cost columns of the report: record metric -> column name
COST = {
    "rounds": "rounds",
    "bytes_up_per_client": "up/client",
    "bytes_down_per_client": "down/client",
    "compute_time_s": "compute s",
    "cell_wall_time_s": "cell s",
}
BEST = "*"
#: the mark of a row that looks like a collapsed clustering (:func:`fedclust.metrics.is_collapsed`)
COLLAPSED = "COLLAPSED"
#: what the mark means (the legend line of every table that can carry it)
COLLAPSED_RULE = (
    "ACC above its chance line while NMI is within noise of its own (NMI not above the 99th percentile "
    "of the same random splits), or ACC not above the majority baseline (every sample in one cluster, "
    "the largest class share): the ACC reflects the class sizes more than any structure found. "
    "k/n seeds: the rule holds for k of the row's n runs, not for their means."
)


def t_interval(values, level: float = 0.95) -> tuple[float, float]:
    """``(mean, half width)`` of the ``level`` confidence interval of the mean of ``values`` (NaNs
    dropped): Student t with n - 1 degrees of freedom and the sample standard deviation (ddof 1).
    The half width is NaN for fewer than two values."""
    x = np.asarray([float(v) for v in values if v is not None and not math.isnan(float(v))], dtype=float)
    if x.size == 0:
        return math.nan, math.nan
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan
    q = float(stats.t.ppf(0.5 + level / 2.0, df=x.size - 1))
    return mean, q * float(x.std(ddof=1)) / math.sqrt(x.size)


def eps_number(label) -> float:
    """An epsilon label (``"4"``, ``"inf"``) as a number (``inf`` for no privacy)."""
    try:
        return float(label)
    except (TypeError, ValueError):
        return math.inf


def _data_records(records: list[dict]) -> list[dict]:
    return [r for r in records if r["tags"].get("family", "data_clustering") == "data_clustering"]


def method_table(
    records: list[dict], level: float = 0.95, *, family: str = "data_clustering", metric: str = "ACC"
) -> pd.DataFrame:
    """One row per (dataset, partition, epsilon, method) of the records of ``family`` (module
    docstring; ``"clustered_fl"`` with ``metric="test_accuracy"`` for the clustered-FL half, whose
    score then fills the ``ACC`` columns and has no chance line here). Columns: ``dataset, partition, epsilon, method, trust_model, status, n, ACC, ACC_ci``
    (half width), ``ACC_chance, ACC_majority, NMI, NMI_chance, at_chance, collapsed, collapsed_seeds,
    best`` and the :data:`COST` keys (means over seeds). ``collapsed`` applies
    :func:`fedclust.metrics.is_collapsed` to the means over seeds (ACC, NMI, ``ACC_chance_hi``,
    ``NMI_chance_hi``, ``ACC_majority``); ``collapsed_seeds`` counts the runs flagged one by one (their
    ``collapsed`` metric), which can be nonzero for a row whose means escape the rule.
    ``best`` is True for the highest mean ACC among the runs that ran in each (dataset, partition,
    epsilon). Rows are sorted by dataset, partition, epsilon (no privacy last) and ACC, highest first,
    not-applicable rows last."""
    recs = [r for r in records if r["tags"].get("family", "data_clustering") == family]
    cols = [
        "dataset",
        "partition",
        "epsilon",
        "method",
        "trust_model",
        "status",
        "n",
        "ACC",
        "ACC_ci",
        "ACC_chance",
        "ACC_majority",
        "NMI",
        "NMI_chance",
        "at_chance",
        "collapsed",
        "collapsed_seeds",
        "best",
        *COST,
    ]
    if not recs:
        return pd.DataFrame(columns=cols)
    frame = records_frame(recs)
    if metric != "ACC":  # the score of this family in the ACC columns; no chance line of its own here
        theirs = ("ACC", "ACC_chance", "ACC_chance_hi", "ACC_majority", "NMI", "NMI_chance", "NMI_chance_hi")
        theirs += ("collapsed",)
        frame = frame.drop(columns=[c for c in theirs if c in frame.columns])
        frame = frame.rename(columns={metric: "ACC"})
    if "partition" not in frame.columns:
        frame["partition"] = "-"
    frame["partition"] = frame["partition"].fillna("-")
    for col, fill in (("status", "ok"), ("trust_model", "none")):
        frame[col] = frame[col].fillna(fill) if col in frame.columns else fill
    rows = []
    for (ds, part, eps, method), g in frame.groupby(["dataset", "partition", "epsilon", "method"], sort=False):
        ok = g[g["status"] == "ok"]
        status = "ok" if len(ok) else str(g["status"].iloc[0])
        row = {
            "dataset": ds,
            "partition": part,
            "epsilon": str(eps),
            "method": method,
            "trust_model": str(g["trust_model"].iloc[0]),
            "status": status,
            "n": len(ok),
        }
        acc = ok["ACC"] if "ACC" in ok.columns else pd.Series(dtype=float)
        row["ACC"], row["ACC_ci"] = t_interval(acc, level)
        line = {
            key: float(pd.to_numeric(ok[key], errors="coerce").mean()) if key in ok.columns and len(ok) else math.nan
            for key in ("ACC_chance", "ACC_chance_hi", "ACC_majority", "NMI", "NMI_chance", "NMI_chance_hi")
        }
        row.update({key: line[key] for key in ("ACC_chance", "ACC_majority", "NMI", "NMI_chance")})
        row["at_chance"] = bool(status == "ok" and is_at_chance({"ACC": row["ACC"]}, line))
        row["collapsed"] = bool(status == "ok" and is_collapsed({"ACC": row["ACC"], "NMI": line["NMI"]}, line))
        flags = pd.to_numeric(ok["collapsed"], errors="coerce").fillna(0.0) if "collapsed" in ok.columns else []
        row["collapsed_seeds"] = int(sum(bool(f) for f in flags))
        for key in COST:
            row[key] = (
                float(pd.to_numeric(ok[key], errors="coerce").mean()) if key in ok.columns and len(ok) else math.nan
            )
        rows.append(row)
    table = pd.DataFrame(rows)
    table["best"] = False
    for _, g in table.groupby(["dataset", "partition", "epsilon"], sort=False):
        ran = g[(g["status"] == "ok") & g["ACC"].notna()]
        if len(ran):
            table.loc[ran["ACC"].idxmax(), "best"] = True
    return sort_table(table)[cols]


def sort_table(table: pd.DataFrame) -> pd.DataFrame:
    """Rows by dataset, partition, epsilon ascending (no privacy last), then ACC highest first, the
    rows without an ACC (not applicable) last."""
    key = table.assign(_eps=table["epsilon"].map(eps_number), _na=table["ACC"].isna(), _acc=-table["ACC"].fillna(0.0))
    key = key.sort_values(["dataset", "partition", "_eps", "_na", "_acc", "method"], kind="stable")
    return table.loc[key.index].reset_index(drop=True)


def best_per_epsilon(table: pd.DataFrame) -> dict[tuple[str, str], dict]:
    """``(dataset, epsilon) -> {"method", "ACC"}``: the best mean ACC over the partitions of a data set
    (each method's ACC averaged over partitions first)."""
    ran = table[(table["status"] == "ok") & table["ACC"].notna()]
    out = {}
    for (ds, eps), g in ran.groupby(["dataset", "epsilon"], sort=False):
        means = g.groupby("method", sort=False)["ACC"].mean()
        out[(ds, eps)] = {"method": str(means.idxmax()), "ACC": float(means.max())}
    return out


def parent_run_summary(records: list[dict], table: pd.DataFrame | None = None) -> tuple[dict, dict]:
    """``(metrics, tags)`` of the benchmark's parent MLflow run: ``best_ACC_eps_<e>`` (a metric per
    epsilon, ``<e>`` as in the tags: ``4``, ``0.5``, ``inf``; over every data set when there is one,
    else ``best_ACC_<dataset>_eps_<e>``), ``best_method_eps_<e>`` (a tag), and the number of runs
    (one method in one cell) ``runs_done``, ``runs_failed``, ``runs_not_applicable``,
    ``runs_at_chance``, ``runs_collapsed``. Every value is finite."""
    table = method_table(records) if table is None else table
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    best = best_per_epsilon(table)
    datasets = {ds for ds, _ in best}
    for (ds, eps), b in best.items():
        where = "" if len(datasets) == 1 else f"{ds}_"
        metrics[f"best_ACC_{where}eps_{eps}"] = b["ACC"]
        tags[f"best_method_{where}eps_{eps}"] = b["method"]
    statuses = [r["tags"].get("status", "ok") for r in records]
    metrics["runs_done"] = float(sum(s == "ok" for s in statuses))
    metrics["runs_not_applicable"] = float(sum(s == "not applicable" for s in statuses))
    metrics["runs_failed"] = float(sum(s not in ("ok", "not applicable") for s in statuses))
    metrics["runs_at_chance"] = float(sum(bool((r.get("metrics") or {}).get("at_chance")) for r in records))
    metrics["runs_collapsed"] = float(sum(bool((r.get("metrics") or {}).get("collapsed")) for r in records))
    return {k: v for k, v in metrics.items() if math.isfinite(v)}, tags


# ---- privacy statements ------------------------------------------------------------------------------


def privacy_statements(records: list[dict]) -> dict[str, str]:
    """One plain-language sentence per method of ``records``: what a private run protects, under
    which trust model and at which (epsilon, delta); or why it is not private."""
    recs = _data_records(records) + [r for r in records if r["tags"].get("family") == "clustered_fl"]
    out: dict[str, str] = {}
    for method in dict.fromkeys(r["tags"]["method"] for r in recs):
        mine = [r for r in recs if r["tags"]["method"] == method and r["tags"].get("status", "ok") == "ok"]
        budgets = sorted({eps_number(r["tags"]["epsilon"]) for r in mine} - {math.inf})
        deltas = sorted({float((r.get("params") or {}).get("delta") or 1e-5) for r in mine})
        models = sorted({str(r["tags"].get("trust_model", "none")) for r in mine} - {"none", "n/a"})
        client_level = any(r["tags"].get("family") == "clustered_fl" for r in mine)
        out[method] = _statement(method, budgets, deltas, models, "client" if client_level else None)
    return out


def _statement(
    method: str, budgets: list[float], deltas: list[float], models: list[str], unit: str | None = None
) -> str:
    if method in REFERENCES:
        return f"{method}: a centralized reference on the pooled data; it protects nothing (not private)."
    spec = REGISTRY.get(method)
    if not budgets:
        why = "it has no differentially private variant" if spec is None or not spec.private else "no run had a budget"
        return f"{method}: not private in this benchmark ({why}); its results are at ε = ∞."
    unit = unit or (spec.unit if spec is not None else "sample")
    who = (
        "any one sample (one data row of one client)"
        if unit == "sample"
        else "any one client (all of its data at once)"
    )
    eps = ", ".join(f"{e:g}" for e in budgets)
    delta = ", ".join(f"{d:g}" for d in deltas) or "1e-05"
    model = "; ".join(f"{m}: {DESCRIPTIONS.get(m, m)}" for m in models) or "local"
    return (
        f"{method}: protects {who}: changing that {unit} alters the distribution of "
        f"everything the run releases by at most a factor e^ε (plus a probability δ), with ε in {{{eps}}} "
        f"and δ = {delta}, accounted over the whole run. Trust model {model}. "
        f"Its runs without a budget (ε = ∞) protect nothing."
    )


# ---- the plot ---------------------------------------------------------------------------------------


def privacy_utility_figure(table: pd.DataFrame, dataset: str):
    """ACC against epsilon for one data set, one panel per partition: per method the mean over seeds
    with its 95 % CI band; the non-private result as its own marked point at the right (``no DP``);
    the chance line dashed."""
    # matplotlib's pyplot picks a backend when imported: only once the report draws its plot
    import matplotlib

    matplotlib.use("Agg")
    # matplotlib's pyplot picks a backend when imported: only once the report draws its plot
    import matplotlib.pyplot as plt

    sub = table[(table["dataset"] == dataset) & (table["status"] == "ok") & table["ACC"].notna()]
    parts = list(dict.fromkeys(sub["partition"])) or ["-"]
    finite = sorted({eps_number(e) for e in sub["epsilon"]} - {math.inf})
    x_inf = (finite[-1] * 4.0) if finite else 1.0
    fig, axes = plt.subplots(1, len(parts), figsize=(4.6 * len(parts) + 2.2, 3.6), squeeze=False, sharey=True)
    methods = list(dict.fromkeys(sub["method"]))
    cmap = plt.get_cmap("tab10" if len(methods) <= 10 else "tab20")
    colors = {m: cmap(i % cmap.N) for i, m in enumerate(methods)}
    # the no-DP points side by side (a small offset per method), so equal results do not hide each other
    offset = {m: 1.0 + 0.06 * (i - (len(methods) - 1) / 2) for i, m in enumerate(methods)}
    for ax, part in zip(axes[0], parts):
        g = sub[sub["partition"] == part]
        for method in methods:
            m = g[g["method"] == method].assign(x=lambda d: d["epsilon"].map(eps_number)).sort_values("x")
            if m.empty:
                continue
            fin = m[np.isfinite(m["x"])]
            ci = fin["ACC_ci"].fillna(0.0)
            if len(fin):
                ax.plot(fin["x"], fin["ACC"], "o-", color=colors[method], label=method, ms=4)
                ax.fill_between(
                    fin["x"],
                    (fin["ACC"] - ci).clip(0.0, 1.0),
                    (fin["ACC"] + ci).clip(0.0, 1.0),
                    color=colors[method],
                    alpha=0.15,
                )  # ACC lies in [0, 1]: so does its band
            inf = m[~np.isfinite(m["x"])]
            if len(inf):
                ax.errorbar(
                    [x_inf * offset[method]],
                    inf["ACC"],
                    yerr=inf["ACC_ci"].fillna(0.0),
                    fmt="*",
                    ms=10,
                    color=colors[method],
                    capsize=3,
                    label=None if len(fin) else method,
                )
        chance = g["ACC_chance"].dropna()
        if len(chance):
            ax.axhline(float(chance.mean()), ls="--", color="grey", lw=1, label="chance")
        ax.set_xscale("log")
        ax.set_ylim(0.0, 1.02)
        ticks = finite + [x_inf]
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{e:g}" for e in finite] + ["no DP"])
        ax.minorticks_off()
        ax.axvline(math.sqrt(finite[-1] * x_inf) if finite else x_inf, color="lightgrey", lw=0.8)
        ax.set_xlabel("ε (accounted); ★ = no DP")
        ax.set_title(f"{dataset} / {part}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("ACC (mean, 95 % CI)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    for ax in axes[0][1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen.keys()), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(f"privacy-utility on {dataset}: ACC against ε", fontsize=10)
    fig.tight_layout()
    return fig


def figure_png_base64(fig) -> str:
    """The figure as a base64 PNG (for an ``<img src="data:...">``), closed afterwards."""
    # matplotlib's pyplot picks a backend when imported: only once the report draws its plot
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


# ---- rendering --------------------------------------------------------------------------------------


def _num(v, fmt: str) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _bytes(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v:.0f} B"


def display_rows(table: pd.DataFrame) -> list[dict[str, str]]:
    """The table's rows as text cells (the same in Markdown, HTML and the terminal)."""
    rows = []
    for r in table.itertuples(index=False):
        acc = (
            "n/a"
            if r.status != "ok"
            else (_num(r.ACC, ".3f") + (f" ± {r.ACC_ci:.3f}" if not math.isnan(r.ACC_ci) else ""))
        )
        rows.append(
            {
                "data / partition": f"{r.dataset} / {r.partition}",
                "ε": str(r.epsilon),
                "method": (BEST + " " if r.best else "") + str(r.method),
                "ACC (95% CI)": acc,
                "chance": _num(r.ACC_chance, ".3f"),
                "majority": _num(r.ACC_majority, ".3f"),
                "NMI": _num(r.NMI, ".3f"),
                "NMI chance": _num(r.NMI_chance, ".3f"),
                "at chance": "AT CHANCE" if r.at_chance else "",
                "collapsed": COLLAPSED
                if r.collapsed
                else (f"{r.collapsed_seeds}/{r.n} seeds" if r.collapsed_seeds else ""),
                "trust model": str(r.trust_model),
                "n": str(r.n),
                "rounds": _num(r.rounds, ".0f"),
                "up/client": _bytes(r.bytes_up_per_client),
                "down/client": _bytes(r.bytes_down_per_client),
                "compute s": _num(r.compute_time_s, ".2f"),
                "cell s": _num(r.cell_wall_time_s, ".1f"),
                "status": str(r.status),
            }
        )
    return rows


_HEAD = [
    "ε",
    "method",
    "ACC (95% CI)",
    "chance",
    "majority",
    "NMI",
    "NMI chance",
    "at chance",
    "collapsed",
    "trust model",
    "n",
    "rounds",
    "up/client",
    "down/client",
    "compute s",
    "cell s",
]


def _groups(table: pd.DataFrame):
    for (ds, part), g in table.groupby(["dataset", "partition"], sort=False):
        yield ds, part, g


def _header(h: str, label: str) -> str:
    return h.replace("ACC", label, 1) if h.startswith("ACC") else h


def _md_table(g: pd.DataFrame, label: str) -> list[str]:
    rows = display_rows(g)
    return ["| " + " | ".join(_header(h, label) for h in _HEAD) + " |", "|" + "|".join("---" for _ in _HEAD) + "|"] + [
        "| " + " | ".join(r[h] for h in _HEAD) + " |" for r in rows
    ]


def to_markdown(
    table: pd.DataFrame,
    statements: dict[str, str],
    *,
    title: str,
    plots: dict[str, str] | None = None,
    notes: list[str] | None = None,
    extra: list[tuple[str, pd.DataFrame, str]] | None = None,
) -> str:
    """The report as Markdown: per data set and partition the methods x epsilon table, then the
    ``extra`` tables (``(heading, table, score name)``: the clustered-FL half), then the privacy
    statements. ``plots``: data set -> file name of its plot, linked where given."""
    legend = (
        f"`{BEST}` best mean ACC at that ε (data set and partition). ACC: mean ± half width "
        "of the 95 % t-interval over seeds. chance: mean ACC (NMI chance: mean NMI) of random splits of the "
        "same sizes; `AT CHANCE`: within noise of them. majority: ACC of one cluster for every sample. "
        f"`{COLLAPSED}`: {COLLAPSED_RULE} Bytes per client: up = what a client sends in the whole run, down = the centroids the server sends "
        "(estimated). compute s = the method's calibration and run; cell s = the whole cell (data, partition, "
        "every method)."
    )
    out = [f"# {title}", "", legend, ""]
    out += [f"- {n}" for n in notes or []]
    for ds, part, g in _groups(table):
        out += ["", f"## {ds} / {part}", ""]
        if plots and ds in plots:
            out += [f"![privacy-utility on {ds}]({plots[ds]})", ""]
        out += _md_table(g, "ACC")
    for heading, tab, label in extra or ():
        for ds, part, g in _groups(tab):
            out += ["", f"## {heading}: {ds} / {part}", ""] + _md_table(g, label)
    out += ["", "## What each method protects", ""] + [f"- {s}" for s in statements.values()]
    return "\n".join(out) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 7px;font-size:13px;text-align:right}td.l,th.l{text-align:left}
tr.best{background:#e5f5e0;font-weight:600}tr.na{color:#999}span.chance{color:#b30000;font-weight:600}
img{max-width:100%;border:1px solid #eee}li{margin:.3em 0}"""


def _html_table(g: pd.DataFrame, label: str) -> str:
    esc = html.escape
    left = ("method", "trust model", "at chance", "collapsed")
    parts = [
        "<table class='methods'><thead><tr>"
        + "".join(f"<th class='{'l' if h in left else ''}'>{esc(_header(h, label))}</th>" for h in _HEAD)
        + "</tr></thead><tbody>"
    ]
    for flag, r in zip(g["best"], display_rows(g)):
        cls = "best" if flag else ("na" if r["status"] != "ok" else "")
        cells = []
        for h in _HEAD:
            v = esc(r[h])
            if h in ("at chance", "collapsed") and v:
                v = f"<span class='chance'>{v}</span>"
            cells.append(f"<td class='{'l' if h in left else ''}'>{v}</td>")
        parts.append(f"<tr class='{cls}'>" + "".join(cells) + "</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def to_html(
    table: pd.DataFrame,
    statements: dict[str, str],
    *,
    title: str,
    figures: dict[str, str],
    notes: list[str] | None = None,
    extra: list[tuple[str, pd.DataFrame, str]] | None = None,
) -> str:
    """The report as one self-contained HTML page (no external file or script): ``figures`` are data
    set -> base64 PNG, shown inline above the data set's tables."""
    esc = html.escape
    head = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title><style>{_CSS}</style>"
        f"</head><body><h1>{esc(title)}</h1>"
    )
    parts = [
        head,
        (
            f"<p><b>{BEST}</b> (green row) best mean ACC at that ε for the data set and partition. ACC: mean ± "
            "half width of the 95 % t-interval over seeds. chance: mean ACC (NMI chance: mean NMI) of random "
            "splits with the same sizes; <span class='chance'>AT CHANCE</span>: within noise of them. majority: "
            f"ACC of one cluster for every sample. <span class='chance'>{COLLAPSED}</span>: "
            f"{esc(COLLAPSED_RULE)} Bytes per client: up = sent by a client in the whole run, "
            "down = the centroids the server sends (estimated). compute s = the method's calibration and run; "
            "cell s = the whole cell (data, partition, every method).</p>"
        ),
    ]
    if notes:
        parts.append("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    shown = set()
    for ds, part, g in _groups(table):
        if ds not in shown and ds in figures:
            shown.add(ds)
            parts.append(
                f"<h2>{esc(ds)}</h2><img class='privacy-utility' alt='privacy-utility plot of {esc(ds)}' "
                f"src='data:image/png;base64,{figures[ds]}'>"
            )
        parts.append(f"<h3>{esc(ds)} / {esc(part)}</h3>" + _html_table(g, "ACC"))
    for heading, tab, label in extra or ():
        for ds, part, g in _groups(tab):
            parts.append(f"<h2>{esc(heading)}: {esc(ds)} / {esc(part)}</h2>" + _html_table(g, label))
    parts.append(
        "<h2>What each method protects</h2><ul>"
        + "".join(f"<li>{esc(s)}</li>" for s in statements.values())
        + "</ul></body></html>"
    )
    return "\n".join(parts)


_SHORT_MODELS = {"secure_aggregation": "sec-agg", "none": "-", "n/a": "-"}


def terminal_lines(table: pd.DataFrame, width: int = 100) -> list[str]:
    """The table for the terminal, at most ``width`` columns: per data set and partition, rows sorted
    by epsilon then ACC (the table's order), without the cost columns that do not fit. The flags
    (``AT CHANCE``, ``COLLAPSED`` or ``k/n seeds``) share one column, explained in a legend line
    under the tables where a row carries a collapse mark."""
    cols = ["ε", "method", "ACC (95% CI)", "chance", "majority", "NMI", "flag", "trust", "rounds", "up/client"]
    cols += ["compute s", "cell s"]
    lines = []
    for ds, part, g in _groups(table):
        rows = [
            {
                **r,
                "flag": " ".join(f for f in (r["at chance"], r["collapsed"]) if f),
                "trust": _SHORT_MODELS.get(r["trust model"], r["trust model"]),
            }
            for r in display_rows(g)
            if r["status"] == "ok"
        ]
        if not rows:
            continue
        keep = list(cols)
        while True:
            w = {c: max(len(c), *(len(r[c]) for r in rows)) for c in keep}
            if sum(w.values()) + 2 * (len(keep) - 1) <= width or len(keep) <= 4:
                break
            keep.pop()  # drop the rightmost cost column until the table fits
        lines.append(f"{ds} / {part}"[:width])
        lines.append("  ".join(c.ljust(w[c]) for c in keep).rstrip()[:width])
        lines += ["  ".join(r[c].ljust(w[c]) for c in keep).rstrip()[:width] for r in rows]
        lines.append("")
    if table["collapsed"].astype(bool).any() or (pd.to_numeric(table["collapsed_seeds"]) > 0).any():
        lines += textwrap.wrap(f"{COLLAPSED}: {COLLAPSED_RULE}", width) + [""]
    return lines


def build(
    records: list[dict],
    *,
    title: str = "fedclust benchmark",
    notes: list[str] | None = None,
    plot_name: str = "privacy_utility.png",
) -> dict:
    """Everything the report needs from ``records``: ``table``, ``statements``, ``figures`` (data set
    -> base64 PNG), ``html``, ``markdown``, ``metrics`` and ``tags`` of the parent run, ``terminal``."""
    table = method_table(records)
    cfl = method_table(records, family="clustered_fl", metric="test_accuracy")
    extra = [("clustered FL, test accuracy (client-level privacy)", cfl, "test acc")] if len(cfl) else []
    statements = privacy_statements(records)
    figures = {ds: figure_png_base64(privacy_utility_figure(table, ds)) for ds in dict.fromkeys(table["dataset"])}
    metrics, tags = parent_run_summary(records, table)
    return {
        "table": table,
        "statements": statements,
        "figures": figures,
        "metrics": metrics,
        "tags": tags,
        "html": to_html(table, statements, title=title, figures=figures, notes=notes, extra=extra),
        "markdown": to_markdown(
            table, statements, title=title, notes=notes, extra=extra, plots={ds: plot_name for ds in figures}
        ),
        "terminal": terminal_lines(table),
    }
