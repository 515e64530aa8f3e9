"""The benchmark report: which method to use on which data, at which privacy budget, at what cost.

Plain library code (no Kedro), from a benchmark's records (:mod:`fedclust.grids.benchmark`):

* :func:`method_table`: one row per (data set, partition, epsilon, method): ACC as the mean over
  seeds with, from :data:`MIN_SEEDS_FOR_CI` seeds on, a 95 % confidence interval that stays in
  [0, 1] (:func:`logit_t_interval`), the chance line and whether the result is at chance, the
  majority baseline (every sample in one cluster), NMI with its chance line and whether the result
  looks collapsed (:func:`fedclust.metrics.is_collapsed`), the trust model, the method's own cost
  (rounds, bytes up and down per client, compute seconds) and the mark of the best method per (data
  set, partition, epsilon): ``*`` when one method is clear of the others, ``≈`` on every method tied
  for best (:func:`best_marks`, the rule in :data:`BEST_RULE` and :data:`FEW_SEEDS_RULE`); sorted by
  epsilon (no privacy last), then by ACC;
* :func:`protection_legend`: one plain sentence per kind of protection (what is protected: one
  sample or one client, under which trust model, at which (epsilon, delta)), numbered, with the
  methods it applies to; a row names its entry (``P1``);
* :func:`ran_lines`: what ran (data sets, partitions, epsilons, methods and seeds of each half), read
  from the records, for the report's header;
* :func:`parent_run_summary`: the metrics and tags of the benchmark's parent MLflow run
  (``best_ACC_eps_<e>``, ``best_method_eps_<e>`` under the same rule, the counts of runs done,
  failed, at chance and collapsed);
* :func:`privacy_utility_figure`: ACC against epsilon with interval bands, no privacy as its own
  point when it ran;
* :func:`to_markdown`, :func:`to_html` (self-contained: the plot inline as a base64 PNG) and
  :func:`terminal_lines` (at most 100 columns).

A data set without labels (its records carry ``objective_ratio``, :func:`fedclust.metrics.objective_scores`,
instead of ACC) is scored by that ratio in the same columns (``score`` names it): the best is the
lowest, its interval a t-interval on the log scale (:func:`log_t_interval`), and its tables leave
out the columns that need labels (chance line, majority baseline, NMI, the flags), saying so
(:data:`UNLABELLED_NOTE`).
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
from scipy.special import expit, logit

from fedclust.data.preprocess import SCALING_WORDS, scaling_of
from fedclust.experiments import records_frame
from fedclust.metrics import is_at_chance, is_collapsed
from fedclust.privacy.release import DESCRIPTIONS
from fedclust.registry import REFERENCES, REGISTRY
from fedclust.registry.clustered_fl import ONE_MODEL

#: the cost columns of the report (each the method's own, mean over seeds): record metric -> column
COST = {
    "rounds": "rounds",
    "bytes_up_per_client": "up/client",
    "bytes_down_per_client": "down/client",
    "compute_time_s": "compute s",
}
#: the mark of the one best method of a (data set, partition, epsilon), clear of every other
BEST = "*"
#: the mark of each method tied for best (within noise of the highest mean, :func:`within_noise`)
TIE = "≈"
#: the confidence level of every interval of the report
LEVEL = 0.95
#: fewer seeds than this: no interval is computed (two or three points give no usable spread)
MIN_SEEDS_FOR_CI = 3
#: with fewer than :data:`MIN_SEEDS_FOR_CI` seeds, two means closer than this are within noise
#: (0.02 ACC: twice the sampling standard error sqrt(p (1 - p) / n) of an accuracy at p = 0.5 on
#: about 2,500 samples, a lower bound on the seed-to-seed spread that the runs cannot measure)
NOISE_FLOOR = 0.02
#: ACC values are clipped to [LOGIT_CLIP, 1 - LOGIT_CLIP] before the logit (which is infinite at 0, 1)
LOGIT_CLIP = 1e-3
INTERVAL_RULE = (
    f"95 % CI: Student t-interval of the mean over seeds computed on the logit scale (each seed's ACC p "
    f"as log(p / (1 - p)), p clipped to [{LOGIT_CLIP:g}, {1 - LOGIT_CLIP:g}]) and mapped back, so both ends "
    f"lie in [0, 1]; the interval is widened to contain the mean where the mapping would leave it out. "
    f"Shown from {MIN_SEEDS_FOR_CI} seeds on."
)
BEST_RULE = (
    f"`{BEST}`: the highest mean, and its 95 % CI overlaps no other method's; `{TIE}`: tied for best, the "
    f"highest mean and every method whose 95 % CI overlaps the highest mean's CI (no single best)."
)
FEW_SEEDS_RULE = (
    f"Fewer than {MIN_SEEDS_FOR_CI} seeds: no confidence interval (the ACC shown is the mean of the seeds). "
    f"Two methods are then within noise when the ranges of their seeds overlap or their means differ by "
    f"less than {NOISE_FLOOR:g}; `{BEST}` only where the highest mean is not within noise of any other, "
    f"else `{TIE}` on each method within noise of it."
)
#: the mark of a row that looks like a collapsed clustering (:func:`fedclust.metrics.is_collapsed`)
COLLAPSED = "COLLAPSED"
#: what the mark means (the legend line of every table that can carry it)
COLLAPSED_RULE = (
    "ACC above its chance line while NMI is within noise of its own (NMI not above the 99th percentile "
    "of the same random splits), or ACC not above the majority baseline (every sample in one cluster, "
    "the largest class share): the ACC reflects the class sizes more than any structure found. "
    "k/n seeds: the rule holds for k of the row's n runs, not for their means."
)
#: the client-clustering flag of a method that trains one model for every client
ONE_MODEL_FLAG = "n/a (one model)"
#: the score of a data set without labels (in the table's ACC columns; ``score`` names it)
RATIO = "objective_ratio"
#: the column head of that score
RATIO_LABEL = "objective ratio (lower is better)"
#: with fewer than :data:`MIN_SEEDS_FOR_CI` seeds, two objective ratios whose logarithms differ by
#: less than this (about 2 % of the objective) are within noise: the counterpart of
#: :data:`NOISE_FLOOR` on the ratio's relative scale, a convention that such few runs cannot check
RATIO_NOISE_FLOOR = 0.02
#: what a table of a data set without labels says under its heading
UNLABELLED_NOTE = (
    "No labels: every method is ranked by its objective ratio, the k-means objective of its centres on "
    "the data (mean squared distance to the nearest centre) over that of non-private centralized k-means "
    "with the same number of clusters (10 restarts); lower is better, 1 = as good as k-means. The columns "
    "that need labels (ACC, chance line, majority baseline, NMI, AT CHANCE, COLLAPSED) and the confusion "
    "matrix are left out for it."
)
RATIO_RULES = (
    f"Objective ratio (data sets without labels): 95 % CI: Student t-interval of the mean over seeds of the "
    f"logarithms of the ratios, mapped back with exp (widened to contain the mean), shown from "
    f"{MIN_SEEDS_FOR_CI} seeds on. `{BEST}`: the lowest mean, and its CI overlaps no other method's; `{TIE}`: "
    f"tied for best. With fewer seeds, two methods are within noise when the ranges of their seeds overlap "
    f"or the logarithms of their means differ by less than {RATIO_NOISE_FLOOR:g}."
)
#: the line under a terminal table of a data set without labels
TERMINAL_UNLABELLED = (
    "no labels: ranked by objective ratio (k-means objective over centralized k-means'), lowest first; "
    "1 = as good as k-means; no chance line, majority or NMI"
)
#: the columns of a data-clustering table that need labels, left out for a data set without them
LABEL_ONLY = ("chance", "majority", "NMI", "NMI chance", "at chance", "collapsed")


def _finite(values) -> np.ndarray:
    return np.asarray(
        [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))], dtype=float
    )


def t_interval(values, level: float = LEVEL) -> tuple[float, float]:
    """``(mean, half width)`` of the ``level`` Student t-interval of the mean of ``values`` (NaNs
    dropped; n - 1 degrees of freedom, sample standard deviation): for a quantity without bounds, such
    as a paired difference of accuracies. The half width is NaN for fewer than two values."""
    x = _finite(values)
    if x.size == 0:
        return math.nan, math.nan
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan
    q = float(stats.t.ppf(0.5 + level / 2.0, df=x.size - 1))
    return mean, q * float(x.std(ddof=1)) / math.sqrt(x.size)


def _mapped_t_interval(values, level: float, forward, back) -> tuple[float, float, float]:
    """``(mean, low, high)``: the arithmetic mean of ``values`` (NaNs dropped) and the ``level``
    Student t-interval of the mean of ``forward(values)`` mapped back with ``back``, widened to
    contain the mean; ``low`` and ``high`` NaN for fewer than :data:`MIN_SEEDS_FOR_CI` values, equal
    values give ``(v, v, v)``."""
    x = _finite(values)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size < MIN_SEEDS_FOR_CI:
        return mean, math.nan, math.nan
    if float(x.max() - x.min()) == 0.0:
        return mean, mean, mean
    z_mean, half = t_interval(forward(x), level)
    low, high = float(back(z_mean - half)), float(back(z_mean + half))
    return mean, min(low, mean), max(high, mean)


def logit_t_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
    """``(mean, low, high)`` of ``values`` in [0, 1] (NaNs dropped): the arithmetic mean and the
    ``level`` Student t-interval (n - 1 degrees of freedom, sample standard deviation) of the mean of
    ``logit(clip(values))``, mapped back with the logistic function, so that ``0 <= low <= high <= 1``
    (:data:`INTERVAL_RULE`). The interval is widened to contain the mean where needed (the mean of
    the logits maps to a different centre than the mean of the values). ``low`` and ``high`` are NaN
    for fewer than :data:`MIN_SEEDS_FOR_CI` values; equal values give ``(v, v, v)``."""
    return _mapped_t_interval(values, level, lambda x: logit(np.clip(x, LOGIT_CLIP, 1.0 - LOGIT_CLIP)), expit)


def log_t_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
    """``(mean, low, high)`` of positive ``values`` (NaNs dropped), such as objective ratios: the
    arithmetic mean and the ``level`` Student t-interval of the mean of ``log(values)`` mapped back
    with exp, so that ``0 < low <= high``, widened to contain the mean; ``low`` and ``high`` NaN for
    fewer than :data:`MIN_SEEDS_FOR_CI` values; equal values give ``(v, v, v)``."""
    return _mapped_t_interval(values, level, lambda x: np.log(np.maximum(x, 1e-300)), np.exp)


def _log(x: float) -> float:
    return math.log(max(x, 1e-300))


def within_noise(a, b, level: float = LEVEL, *, ratio: bool = False) -> bool:
    """Whether two methods' seed values ``a`` and ``b`` cannot be told apart: both with
    :data:`MIN_SEEDS_FOR_CI` values or more, their :func:`logit_t_interval` overlap; else
    (:data:`FEW_SEEDS_RULE`) the ranges of their values overlap or their means differ by less than
    :data:`NOISE_FLOOR`. ``ratio``: the values are objective ratios (:data:`RATIO_RULES`: their
    :func:`log_t_interval`, or their ranges and :data:`RATIO_NOISE_FLOOR` on the log scale)."""
    a, b = _finite(a), _finite(b)
    if a.size == 0 or b.size == 0:
        return False
    if a.size >= MIN_SEEDS_FOR_CI and b.size >= MIN_SEEDS_FOR_CI:
        interval = log_t_interval if ratio else logit_t_interval
        _, lo_a, hi_a = interval(a, level)
        _, lo_b, hi_b = interval(b, level)
        return bool(lo_a <= hi_b and lo_b <= hi_a)
    overlap = a.min() <= b.max() and b.min() <= a.max()
    ma, mb = float(a.mean()), float(b.mean())
    gap, floor = (abs(_log(ma) - _log(mb)), RATIO_NOISE_FLOOR) if ratio else (abs(ma - mb), NOISE_FLOOR)
    return bool(overlap or gap < floor)


def best_marks(values: dict, level: float = LEVEL, *, ratio: bool = False) -> dict:
    """``key -> mark`` for the keys of ``values`` (each a list of seed values, the higher the
    better): :data:`BEST` on the highest mean when no other key is :func:`within_noise` of it,
    else :data:`TIE` on it and on every key within noise of it; ``""`` elsewhere, and everywhere
    when fewer than two keys have a value (nothing to compare). ``ratio``: the values are objective
    ratios, the lower the better (:data:`RATIO_RULES`)."""
    means = {k: float(_finite(v).mean()) for k, v in values.items() if _finite(v).size}
    out = {k: "" for k in values}
    if len(means) < 2:  # one method (or none) with a result: nothing to be best among
        return out
    leader = (min if ratio else max)(means, key=means.get)
    tied = [k for k in means if k != leader and within_noise(values[leader], values[k], level, ratio=ratio)]
    if not tied:
        out[leader] = BEST
    else:
        for k in (leader, *tied):
            out[k] = TIE
    return out


def few_seeds(table: pd.DataFrame) -> bool:
    """Whether a row of ``table`` that ran has fewer than :data:`MIN_SEEDS_FOR_CI` seeds."""
    ran = table[table["status"] == "ok"] if len(table) else table
    return bool(len(ran) and (pd.to_numeric(ran["n"]) < MIN_SEEDS_FOR_CI).any())


def only_few_seeds(table: pd.DataFrame) -> bool:
    """Whether every row of ``table`` that ran has fewer than :data:`MIN_SEEDS_FOR_CI` seeds."""
    ran = table[table["status"] == "ok"] if len(table) else table
    return bool(len(ran) and (pd.to_numeric(ran["n"]) < MIN_SEEDS_FOR_CI).all())


def is_ratio(table: pd.DataFrame) -> pd.Series:
    """Which rows of ``table`` score a data set without labels by its objective ratio (``score``)."""
    if "score" not in table.columns:
        return pd.Series(False, index=table.index)
    return table["score"] == RATIO


def rule_lines(*tables: pd.DataFrame) -> list[str]:
    """The lines that state how the report's intervals and marks are made: the interval and the
    best rule where a row has :data:`MIN_SEEDS_FOR_CI` seeds or more, the few-seeds rule where a
    row has fewer (both of the rows scored by ACC), and :data:`RATIO_RULES` where a row is scored by
    an objective ratio."""
    tables = [t for t in tables if len(t)]
    scored = [t[~is_ratio(t)] for t in tables]
    scored = [t for t in scored if len(t)]
    lines = [INTERVAL_RULE, BEST_RULE] if any(not only_few_seeds(t) for t in scored) else []
    if any(few_seeds(t) for t in scored):
        lines.append(FEW_SEEDS_RULE)
    if any(is_ratio(t).any() for t in tables):
        lines.append(RATIO_RULES)
    return lines


def eps_number(label) -> float:
    """An epsilon label (``"4"``, ``"inf"``) as a number (``inf`` for no privacy)."""
    try:
        return float(label)
    except (TypeError, ValueError):
        return math.inf


def _data_records(records: list[dict]) -> list[dict]:
    return [r for r in records if r["tags"].get("family", "data_clustering") == "data_clustering"]


def unlabelled_datasets(records: list[dict]) -> list[str]:
    """The data sets of the data-clustering ``records`` that have no labels: some record of theirs
    carries an objective ratio (:data:`RATIO`) and none an ACC; in the order they first appear."""
    recs = _data_records(records)
    has = {
        key: {r["tags"]["dataset"] for r in recs if _number((r.get("metrics") or {}).get(key)) is not None}
        for key in (RATIO, "ACC")
    }
    return [d for d in dict.fromkeys(r["tags"]["dataset"] for r in recs) if d in has[RATIO] - has["ACC"]]


#: the columns of :func:`method_table`
TABLE_COLUMNS = [
    "dataset",
    "partition",
    "epsilon",
    "method",
    "trust_model",
    "status",
    "note",
    "n",
    "ACC",
    "ACC_lo",
    "ACC_hi",
    "ACC_chance",
    "ACC_majority",
    "NMI",
    "NMI_chance",
    "at_chance",
    "collapsed",
    "collapsed_seeds",
    "client_ACC",
    "client_ACC_chance",
    "client_flag",
    "mark",
    "best",
    *COST,
    "score",
]


def _mean_of(frame: pd.DataFrame, key: str) -> float:
    if key not in frame.columns or not len(frame):
        return math.nan
    return float(pd.to_numeric(frame[key], errors="coerce").mean())


def method_table(
    records: list[dict], level: float = LEVEL, *, family: str = "data_clustering", metric: str = "ACC"
) -> pd.DataFrame:
    """One row per (dataset, partition, epsilon, method) of the records of ``family`` (module
    docstring; ``"clustered_fl"`` with ``metric="test_accuracy"`` for the clustered-FL half, whose
    score then fills the ``ACC`` columns, its chance line being the records' ``test_accuracy_chance``,
    one over the number of classes). Columns :data:`TABLE_COLUMNS`: ``ACC`` (mean over the seeds
    that ran), ``ACC_lo``/``ACC_hi`` (:func:`logit_t_interval`, NaN under
    :data:`MIN_SEEDS_FOR_CI` seeds), the chance lines, ``at_chance``, ``collapsed`` (
    :func:`fedclust.metrics.is_collapsed` of the means over seeds), ``collapsed_seeds`` (the runs
    flagged one by one, which can be nonzero for a row whose means escape the rule), the clustered-FL
    client clustering (``client_ACC``, its chance line and ``client_flag``: ``AT CHANCE``, or
    :data:`ONE_MODEL_FLAG` for a method with one model), ``mark`` (:func:`best_marks` in each
    (dataset, partition, epsilon)), ``best`` (True where ``mark`` is :data:`BEST`), ``note`` (why a
    row is not applicable), the :data:`COST` keys (the method's own, means over seeds) and ``score``
    (what the ACC columns hold: ``metric``, or :data:`RATIO` for a data set without labels, whose
    records carry an objective ratio and no ACC: its interval is :func:`log_t_interval`, its best the
    lowest, its chance lines NaN and its flags False). Rows are sorted by dataset, partition, epsilon
    (no privacy last) and ACC, highest first (an objective ratio lowest first), not-applicable rows
    last."""
    recs = [r for r in records if r["tags"].get("family", "data_clustering") == family]
    if not recs:
        return pd.DataFrame(columns=TABLE_COLUMNS)
    frame = records_frame(recs)
    frame["note"] = [str(r.get("note") or "") for r in recs]
    if metric != "ACC":  # the score of this family in the ACC columns, with its own chance line
        theirs = ("ACC", "ACC_chance", "ACC_chance_hi", "ACC_majority", "NMI", "NMI_chance", "NMI_chance_hi")
        theirs += ("collapsed",)
        frame = frame.drop(columns=[c for c in theirs if c in frame.columns])
        frame = frame.rename(columns={metric: "ACC", f"{metric}_chance": "ACC_chance"})
    if "partition" not in frame.columns:
        frame["partition"] = "-"
    frame["partition"] = frame["partition"].fillna("-")
    for col, fill in (("status", "ok"), ("trust_model", "none")):
        frame[col] = frame[col].fillna(fill) if col in frame.columns else fill
    frame["score"] = metric
    if family == "data_clustering" and RATIO in frame.columns:
        # a data set without labels: its records carry an objective ratio and no ACC; the ratio is its score
        acc_of = pd.to_numeric(frame["ACC"], errors="coerce") if "ACC" in frame.columns else None
        ratio_of = pd.to_numeric(frame[RATIO], errors="coerce")
        mask = frame["dataset"].isin(unlabelled_datasets(recs))
        frame["ACC"] = acc_of if acc_of is not None else math.nan
        frame.loc[mask, "ACC"] = ratio_of[mask]
        frame.loc[mask, "score"] = RATIO
    rows, seed_values = [], {}
    for (ds, part, eps, method), g in frame.groupby(["dataset", "partition", "epsilon", "method"], sort=False):
        ok = g[g["status"] == "ok"]
        status = "ok" if len(ok) else str(g["status"].iloc[0])
        ratio = g["score"].iloc[0] == RATIO
        acc = pd.to_numeric(ok["ACC"], errors="coerce") if "ACC" in ok.columns else pd.Series(dtype=float)
        seed_values[(ds, part, str(eps), method)] = list(acc.dropna())
        row = {
            "dataset": ds,
            "partition": part,
            "epsilon": str(eps),
            "method": method,
            "trust_model": str(g["trust_model"].iloc[0]),
            "status": status,
            "note": "" if status == "ok" else next((n for n in g["note"] if n), ""),
            "n": len(ok),
            "score": g["score"].iloc[0],
        }
        row["ACC"], row["ACC_lo"], row["ACC_hi"] = (log_t_interval if ratio else logit_t_interval)(acc, level)
        line = {
            key: _mean_of(ok, key)
            for key in ("ACC_chance", "ACC_chance_hi", "ACC_majority", "NMI", "NMI_chance", "NMI_chance_hi")
        }
        row.update({key: line[key] for key in ("ACC_chance", "ACC_majority", "NMI", "NMI_chance")})
        row["at_chance"] = bool(status == "ok" and not ratio and is_at_chance({"ACC": row["ACC"]}, line))
        row["collapsed"] = bool(
            status == "ok" and not ratio and is_collapsed({"ACC": row["ACC"], "NMI": line["NMI"]}, line)
        )
        flags = pd.to_numeric(ok["collapsed"], errors="coerce").fillna(0.0) if "collapsed" in ok.columns else []
        row["collapsed_seeds"] = int(sum(bool(f) for f in flags))
        # one model for every client: no clients grouped, nothing to score (said only where it ran)
        one_model = family == "clustered_fl" and method in ONE_MODEL and status == "ok"
        row["client_ACC"] = math.nan if one_model else _mean_of(ok, "client_ACC")
        row["client_ACC_chance"] = math.nan if one_model else _mean_of(ok, "client_ACC_chance")
        at = _mean_of(ok, "client_at_chance")
        row["client_flag"] = ONE_MODEL_FLAG if one_model else ("AT CHANCE" if status == "ok" and at >= 0.5 else "")
        for key in COST:
            row[key] = _mean_of(ok, key)
        rows.append(row)
    table = pd.DataFrame(rows)
    table["mark"] = ""
    for (ds, part, eps), g in table.groupby(["dataset", "partition", "epsilon"], sort=False):
        ran = g[(g["status"] == "ok") & g["ACC"].notna()]
        values = {i: seed_values[(ds, part, eps, table.at[i, "method"])] for i in ran.index}
        marks = best_marks(values, level, ratio=bool((g["score"] == RATIO).all()))
        for i, mark in marks.items():
            table.at[i, "mark"] = mark
    table["best"] = table["mark"] == BEST
    return sort_table(table)[TABLE_COLUMNS]


def sort_table(table: pd.DataFrame) -> pd.DataFrame:
    """Rows by dataset, partition, epsilon ascending (no privacy last), then ACC highest first (an
    objective ratio, ``score`` :data:`RATIO`, lowest first), the rows without an ACC (not
    applicable) last."""
    acc = table["ACC"].fillna(0.0)
    ratio = table["score"] == RATIO if "score" in table.columns else False
    key = table.assign(_eps=table["epsilon"].map(eps_number), _na=table["ACC"].isna(), _acc=acc.where(ratio, -acc))
    key = key.sort_values(["dataset", "partition", "_eps", "_na", "_acc", "method"], kind="stable")
    return table.loc[key.index].reset_index(drop=True)


def best_per_epsilon(records: list[dict], level: float = LEVEL) -> dict[tuple[str, str], dict]:
    """``(dataset, epsilon) -> {"method", "ACC", "mark", "tied"}`` over the data-clustering runs:
    each method's ACC per seed averaged over the partitions of the data set, then the highest mean
    (``method``, ``ACC``) and :func:`best_marks` on those per-seed values: ``mark`` :data:`BEST` (one
    clear best) or :data:`TIE` with ``tied`` the methods tied for best, highest mean first. A data
    set without labels (records with an objective ratio and no ACC) gets the lowest mean objective
    ratio in ``ACC`` instead, ``score`` :data:`RATIO` (else ``"ACC"``)."""
    recs = []
    for r in _data_records(records):
        met = r.get("metrics") or {}
        if r["tags"].get("status", "ok") != "ok":
            continue
        if _number(met.get("ACC")) is not None:
            recs.append((r, float(met["ACC"]), "ACC"))
        elif _number(met.get(RATIO)) is not None:
            recs.append((r, float(met[RATIO]), RATIO))
    out: dict[tuple[str, str], dict] = {}
    if not recs:
        return out
    frame = records_frame([r for r, _, _ in recs])
    frame["seed"] = [(r.get("params") or {}).get("seed", i) for i, (r, _, _) in enumerate(recs)]
    frame["ACC"] = [v for _, v, _ in recs]
    frame["score"] = [score for _, _, score in recs]
    if "partition" not in frame.columns:
        frame["partition"] = "-"
    for (ds, eps), g in frame.groupby(["dataset", "epsilon"], sort=False):
        ratio = bool((g["score"] == RATIO).all())
        per_seed = g.groupby(["method", "seed"], sort=False)["ACC"].mean()  # mean over partitions
        values = {m: list(per_seed[m].dropna()) for m in dict.fromkeys(g["method"])}
        marks = best_marks(values, level, ratio=ratio)
        means = {m: float(np.mean(v)) for m, v in values.items() if v}
        if not means:
            continue
        sign = 1.0 if ratio else -1.0
        tied = sorted((m for m, mark in marks.items() if mark == TIE), key=lambda m: sign * means[m])
        leader = (min if ratio else max)(means, key=means.get)
        entry = {"method": leader, "ACC": means[leader], "mark": marks[leader], "tied": tied}
        out[(ds, str(eps))] = {**entry, "score": RATIO} if ratio else entry
    return out


def _number(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def parent_run_summary(records: list[dict], table: pd.DataFrame | None = None) -> tuple[dict, dict]:
    """``(metrics, tags)`` of the benchmark's parent MLflow run: ``best_ACC_eps_<e>`` (a metric per
    epsilon, ``<e>`` as in the tags: ``4``, ``0.5``, ``inf``; over every data set when there is one,
    else ``best_ACC_<dataset>_eps_<e>``: the highest mean ACC), ``best_method_eps_<e>`` (a tag, under
    the report's rule, :func:`best_per_epsilon`: the method when one is clear of the others, else
    ``tie: a, b`` with every method tied for best; a data set without labels has
    ``best_objective_ratio_..._eps_<e>``, its lowest mean objective ratio, instead of
    ``best_ACC_...``), ``best_rule`` (the rule in words) and the number
    of runs (one method in one cell) ``runs_done``, ``runs_failed``, ``runs_not_applicable``,
    ``runs_at_chance``, ``runs_collapsed``. Every value is finite. ``table`` is not needed (kept
    for callers that pass one)."""
    metrics: dict[str, float] = {}
    tags: dict[str, str] = {}
    best = best_per_epsilon(records)
    datasets = {ds for ds, _ in best}
    for (ds, eps), b in best.items():
        where = "" if len(datasets) == 1 else f"{ds}_"
        metrics[f"best_{b.get('score', 'ACC')}_{where}eps_{eps}"] = b["ACC"]
        tags[f"best_method_{where}eps_{eps}"] = "tie: " + ", ".join(b["tied"]) if b["mark"] == TIE else b["method"]
    if best:
        seeds = _finite(pd.to_numeric(pd.Series([(r.get("params") or {}).get("seed") for r in _data_records(records)])))
        n_seeds = len(set(seeds.tolist()))
        tags["best_rule"] = (
            f"{n_seeds} seed(s): no interval; a tie where seed ranges overlap or means differ by < {NOISE_FLOOR:g}"
            if n_seeds < MIN_SEEDS_FOR_CI
            else f"{n_seeds} seeds: a tie where 95 % t-intervals on the logit scale overlap"
        )
        if any(b.get("score") == RATIO for b in best.values()):
            tags["best_rule"] += "; objective ratio (no labels): the lowest, intervals on the log scale"
    statuses = [r["tags"].get("status", "ok") for r in records]
    metrics["runs_done"] = float(sum(s == "ok" for s in statuses))
    metrics["runs_not_applicable"] = float(sum(s == "not applicable" for s in statuses))
    metrics["runs_failed"] = float(sum(s not in ("ok", "not applicable") for s in statuses))
    metrics["runs_at_chance"] = float(sum(bool((r.get("metrics") or {}).get("at_chance")) for r in records))
    metrics["runs_collapsed"] = float(sum(bool((r.get("metrics") or {}).get("collapsed")) for r in records))
    return {k: v for k, v in metrics.items() if math.isfinite(v)}, tags


def ran_lines(records: list[dict]) -> list[str]:
    """What ran, read from the records (not from the config): per half (data clustering, clustered
    FL) the data sets, partitions, epsilons, seeds and the methods with a result, then those only
    reported as not applicable."""
    out = []
    for family, title in (("data_clustering", "data clustering"), ("clustered_fl", "clustered FL")):
        recs = [r for r in records if r["tags"].get("family", "data_clustering") == family]
        if not recs:
            continue

        def values(key, rs=recs):
            return list(dict.fromkeys(str(r["tags"].get(key, "-")) for r in rs))

        eps = sorted(values("epsilon"), key=eps_number)
        ok = [r for r in recs if r["tags"].get("status", "ok") == "ok"]
        seeds = {(r.get("params") or {}).get("seed") for r in recs} - {None}
        ran = values("method", ok)
        na = [m for m in values("method") if m not in ran]
        line = (
            f"{title}: data sets {', '.join(values('dataset'))}; partitions {', '.join(values('partition'))}; "
            f"ε in {{{', '.join('∞ (no DP)' if e == 'inf' else e for e in eps)}}}; {len(seeds)} seed(s); "
            f"methods {', '.join(ran) or 'none'}"
        )
        if na:
            line += f"; not applicable at every ε that ran: {', '.join(na)}"
        out.append(line + f" ({len(ok)} runs done)")
    return out


def scaling_lines(records: list[dict]) -> list[str]:
    """One line per data set whose records say how it was scaled: by public numbers (a declared pixel
    range or declared bounds), or by statistics of the whole data set, which no ε covers
    (:func:`fedclust.data.preprocess.scaling_of`)."""
    seen: dict[str, str] = {}
    for r in _data_records(records):
        scaling = (r.get("params") or {}).get("scaling")
        if scaling in SCALING_WORDS:
            seen.setdefault(str(r["tags"].get("dataset")), scaling)
    out = []
    for ds, scaling in seen.items():
        if scaling_of(scaling)["reads"] == "data":
            out.append(f"scaling of {ds}: {SCALING_WORDS[scaling]}, statistics of every client's data that no ε covers")
        else:
            out.append(f"scaling of {ds}: {SCALING_WORDS[scaling]}, public numbers (nothing read from the data)")
    return out


# ---- privacy statements ------------------------------------------------------------------------------


def protection_legend(records: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """``(entries, label_of)``: one legend entry per distinct protection sentence of the methods of
    ``records`` (``{"label": "P1", "methods": [...], "text": ...}``; the sentences of the methods
    that protect nothing are labelled ``none``), and ``method -> label``, which the rows name. A private
    method's row at ε = ∞ protects nothing: its protection cell says ``none`` (the table does that)."""
    recs = _data_records(records) + [r for r in records if r["tags"].get("family") == "clustered_fl"]
    entries: dict[str, dict] = {}
    label_of: dict[str, str] = {}
    for method in dict.fromkeys(r["tags"]["method"] for r in recs):
        mine = [r for r in recs if r["tags"]["method"] == method and r["tags"].get("status", "ok") == "ok"]
        budgets = sorted({eps_number(r["tags"]["epsilon"]) for r in mine} - {math.inf})
        deltas = sorted({float((r.get("params") or {}).get("delta") or 1e-5) for r in mine})
        models = sorted({str(r["tags"].get("trust_model", "none")) for r in mine} - {"none", "n/a"})
        client_level = any(r["tags"].get("family") == "clustered_fl" for r in mine)
        text = _statement(method, budgets, deltas, models, "client" if client_level else None)
        if text not in entries:
            private = bool(budgets)
            n_private = sum(e["label"] != "none" for e in entries.values())
            entries[text] = {"label": f"P{n_private + 1}" if private else "none", "methods": [], "text": text}
        entries[text]["methods"].append(method)
        label_of[method] = entries[text]["label"]
    ordered = sorted(entries.values(), key=lambda e: (e["label"] == "none", len(e["label"]), e["label"]))
    return ordered, label_of


def privacy_statements(records: list[dict]) -> dict[str, str]:
    """``method -> "<method>: <its protection sentence>"`` (:func:`protection_legend`)."""
    entries, _ = protection_legend(records)
    return {m: f"{m}: {e['text']}" for e in entries for m in e["methods"]}


def _statement(
    method: str, budgets: list[float], deltas: list[float], models: list[str], unit: str | None = None
) -> str:
    if method in REFERENCES:
        return "a centralized reference on the pooled data; it protects nothing (not private)."
    spec = REGISTRY.get(method)
    if not budgets:
        if spec is not None and spec.private:
            return "not private in this benchmark (no run had a budget); its results are at ε = ∞."
        return "not private (no differentially private variant); its results are at ε = ∞ only."
    unit = unit or (spec.unit if spec is not None else "sample")
    who = (
        "any one sample (one data row of one client)"
        if unit == "sample"
        else "any one client (all of its data at once)"
    )
    delta = ", ".join(f"{d:g}" for d in deltas) or "1e-05"
    model = "; ".join(f"{m}: {DESCRIPTIONS.get(m, m)}" for m in models) or "local"
    return (
        f"protects {who}: changing that {unit} alters the distribution of everything the run releases by "
        f"at most a factor e^ε (plus a probability δ), with ε the row's budget and δ = {delta}, accounted "
        f"over the whole run. Trust model {model}."
    )


def protection_of(row, label_of: dict[str, str]) -> str:
    """A row's protection cell: its legend label, or ``none`` at ε = ∞ and for a row that did not run."""
    if row.status != "ok" or eps_number(row.epsilon) == math.inf:
        return "none"
    return label_of.get(row.method, "none")


# ---- the plot ---------------------------------------------------------------------------------------


def privacy_utility_figure(table: pd.DataFrame, dataset: str):
    """ACC against epsilon for one data set, one panel per partition: per method the mean over seeds
    with its 95 % CI band (:func:`logit_t_interval`, in [0, 1]; no band under
    :data:`MIN_SEEDS_FOR_CI` seeds); where ε = ∞ ran, the non-private result as its own starred
    point at the right (``no DP``); the chance line dashed. A data set without labels is drawn by its
    objective ratio instead (:func:`log_t_interval` bands, lower is better), with no chance line and
    a dotted line at 1 (as good as centralized k-means)."""
    # plots (matplotlib) load only when the report draws its plot
    from matplotlib import colormaps

    from fedclust.plots import subplots  # likewise: figures on canvases of their own

    sub = table[(table["dataset"] == dataset) & (table["status"] == "ok") & table["ACC"].notna()]
    ratio = bool(len(sub)) and bool(is_ratio(sub).all())
    parts = list(dict.fromkeys(sub["partition"])) or ["-"]
    finite = sorted({eps_number(e) for e in sub["epsilon"]} - {math.inf})
    with_inf = bool((sub["epsilon"].map(eps_number) == math.inf).any())
    x_inf = (finite[-1] * 4.0) if finite else 1.0
    fig, axes = subplots(1, len(parts), figsize=(4.6 * len(parts) + 2.2, 3.6), squeeze=False, sharey=True)
    methods = list(dict.fromkeys(sub["method"]))
    cmap = colormaps["tab10" if len(methods) <= 10 else "tab20"]
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
            if len(fin):
                ax.plot(fin["x"], fin["ACC"], "o-", color=colors[method], label=method, ms=4)
                band = fin[fin["ACC_lo"].notna()]
                if len(band):
                    ax.fill_between(band["x"], band["ACC_lo"], band["ACC_hi"], color=colors[method], alpha=0.15)
            inf = m[~np.isfinite(m["x"])]
            if len(inf):
                lo, hi = inf["ACC_lo"].fillna(inf["ACC"]), inf["ACC_hi"].fillna(inf["ACC"])
                ax.errorbar(
                    [x_inf * offset[method]],
                    inf["ACC"],
                    yerr=[(inf["ACC"] - lo).to_numpy(), (hi - inf["ACC"]).to_numpy()],
                    fmt="*",
                    ms=10,
                    color=colors[method],
                    capsize=3,
                    label=None if len(fin) else method,
                )
        chance = g["ACC_chance"].dropna()
        if len(chance) and not ratio:
            ax.axhline(float(chance.mean()), ls="--", color="grey", lw=1, label="chance")
        ax.set_xscale("log")
        if ratio:  # no upper bound: from just under 1 (k-means) to the worst band
            ax.axhline(1.0, ls=":", color="grey", lw=1, label="k-means (ratio 1)")
            top = float(pd.concat([sub["ACC"], sub["ACC_hi"].dropna()]).max())
            ax.set_ylim(min(0.95, float(sub["ACC"].min()) * 0.95), max(1.05, top * 1.05))
        else:
            ax.set_ylim(0.0, 1.02)
        ticks = finite + ([x_inf] if with_inf or not finite else [])
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{e:g}" for e in finite] + (["no DP"] if with_inf or not finite else []))
        ax.minorticks_off()
        if with_inf and finite:
            ax.axvline(math.sqrt(finite[-1] * x_inf), color="lightgrey", lw=0.8)
        ax.set_xlabel("ε (accounted)" + ("; ★ = no DP" if with_inf else ""))
        ax.set_title(f"{dataset} / {part}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"{RATIO_LABEL if ratio else 'ACC'} (mean; band: 95 % CI)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    for ax in axes[0][1:]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen.keys()), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    score = "objective ratio against ε (no labels; lower is better)" if ratio else "ACC against ε"
    fig.suptitle(f"privacy-utility on {dataset}: {score}", fontsize=10)
    fig.tight_layout()
    return fig


def figure_png_base64(fig) -> str:
    """The figure as a base64 PNG (for an ``<img src="data:...">``); the report's figures have canvases
    of their own (:func:`fedclust.plots.subplots`), outside pyplot's state: nothing to close."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
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


def _score(r) -> str:
    """The score cell: ``n/a``, the mean, and its interval where there is one."""
    if r.status != "ok":
        return "n/a"
    text = _num(r.ACC, ".3f")
    if not math.isnan(r.ACC_lo):
        text += f" [{r.ACC_lo:.2f}, {r.ACC_hi:.2f}]"
    return text


def display_rows(table: pd.DataFrame, label_of: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The table's rows as text cells (the same in Markdown, HTML and the terminal); ``label_of``:
    method -> its protection legend label (:func:`protection_legend`)."""
    rows = []
    for r in table.itertuples(index=False):
        rows.append(
            {
                "data / partition": f"{r.dataset} / {r.partition}",
                "ε": str(r.epsilon),
                "method": (r.mark + " " if r.mark else "") + str(r.method),
                "ACC": _score(r),
                "chance": _num(r.ACC_chance, ".3f"),
                "majority": _num(r.ACC_majority, ".3f"),
                "NMI": _num(r.NMI, ".3f"),
                "NMI chance": _num(r.NMI_chance, ".3f"),
                "at chance": "AT CHANCE" if r.at_chance else "",
                "collapsed": COLLAPSED
                if r.collapsed
                else (f"{r.collapsed_seeds}/{r.n} seeds" if r.collapsed_seeds else ""),
                "client ACC": _num(r.client_ACC, ".3f"),
                "client chance": _num(r.client_ACC_chance, ".3f"),
                "client clustering": str(r.client_flag),
                "trust model": str(r.trust_model),
                "protects": protection_of(r, label_of or {}),
                "n": str(r.n),
                "rounds": _num(r.rounds, ".0f"),
                "up/client": _bytes(r.bytes_up_per_client),
                "down/client": _bytes(r.bytes_down_per_client),
                "compute s": _num(r.compute_time_s, ".2f"),
                "status": str(r.status),
                "note": str(r.note),
            }
        )
    return rows


#: the columns of a data-clustering table
_HEAD = [
    "ε",
    "method",
    "ACC",
    "chance",
    "majority",
    "NMI",
    "NMI chance",
    "at chance",
    "collapsed",
    "trust model",
    "protects",
    "n",
    "rounds",
    "up/client",
    "down/client",
    "compute s",
]
#: the columns of a data-clustering table of a data set without labels (no column that needs labels)
_RATIO_HEAD = [h for h in _HEAD if h not in LABEL_ONLY]
#: the columns of a clustered-FL table (its score: test accuracy; its clustering: of the clients)
_CFL_HEAD = [
    "ε",
    "method",
    "ACC",
    "chance",
    "client ACC",
    "client chance",
    "client clustering",
    "trust model",
    "protects",
    "n",
    "rounds",
    "compute s",
]


def _groups(table: pd.DataFrame):
    for (ds, part), g in table.groupby(["dataset", "partition"], sort=False):
        yield ds, part, g


def _header(h: str, label: str, interval: bool) -> str:
    if h == "ACC":
        return f"{label} [95% CI]" if interval else f"{label} (mean)"
    return h


def _md_table(g: pd.DataFrame, label: str, head: list[str], label_of: dict[str, str]) -> list[str]:
    rows = display_rows(g, label_of)
    interval = bool(g["ACC_lo"].notna().any())
    return [
        "| " + " | ".join(_header(h, label, interval) for h in head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
    ] + ["| " + " | ".join(r[h] for h in head) + " |" for r in rows]


def _groups_of(table: pd.DataFrame):
    """:func:`_groups` with, per group, its column heads and score label: a data set without labels
    gets :data:`_RATIO_HEAD` and :data:`RATIO_LABEL`."""
    for ds, part, g in _groups(table):
        ratio = bool(len(g)) and bool(is_ratio(g).all())
        yield ds, part, g, ratio, (_RATIO_HEAD, RATIO_LABEL) if ratio else (_HEAD, "ACC")


def _legend(extra: bool, labelled: bool = True, unlabelled: bool = False) -> list[str]:
    """What the columns mean, one item each (``extra``: with the clustered-FL columns; ``labelled``:
    with those of data sets with labels, ``unlabelled``: with the objective ratio of those without)."""
    items = (
        [
            "ACC: mean over seeds. chance: mean ACC (NMI chance: mean NMI) of random splits of the same sizes; "
            "`AT CHANCE`: within noise of them. majority: ACC of one cluster for every sample.",
            f"`{COLLAPSED}`: {COLLAPSED_RULE}",
        ]
        if labelled
        else []
    )
    if unlabelled:
        items.append(
            "objective ratio (data sets without labels): mean over seeds of a method's k-means objective on the "
            "data over that of non-private centralized k-means with as many clusters; lower is better."
        )
    items += [
        "protects: the entry of the list at the end (P1, P2, ...) that says what a run protects; `none` for "
        "a run without a budget.",
        "Cost, the method's own (mean over seeds): rounds; bytes per client, up = what a client sends in the "
        "whole run, down = the centroids the server sends (estimated); compute s = the method's calibration "
        "and run (not the data and partition steps it shares with the other methods of its cell).",
    ]
    if extra:
        items.append(
            "Clustered FL: the score is the test accuracy of each client's model, its chance 1 / number of "
            "classes; client ACC: how well the clients were grouped by their true rotation, with its chance "
            f"line (`AT CHANCE` in at least half of the seeds); `{ONE_MODEL_FLAG}`: one model for every client, "
            "so no clients are grouped."
        )
    return items


def to_markdown(
    table: pd.DataFrame,
    legend_entries: list[dict],
    label_of: dict[str, str] | None = None,
    *,
    title: str,
    plots: dict[str, str] | None = None,
    notes: list[str] | None = None,
    extra: list[tuple[str, pd.DataFrame, str]] | None = None,
) -> str:
    """The report as Markdown: what ran (``notes``), the rules of its intervals and marks, per data
    set and partition the methods x epsilon table, then the ``extra`` tables (``(heading, table,
    score name)``: the clustered-FL half), then the protection legend. ``plots``: data set -> file
    name of its plot, linked where given."""
    out = [f"# {title}", ""]
    out += [f"- {n}" for n in notes or []]
    out += [""] + [f"- {line}" for line in rule_lines(table, *(t for _, t, _ in extra or ()))]
    ratio = is_ratio(table)
    out += [""] + [f"- {item}" for item in _legend(bool(extra), bool((~ratio).any()) or not len(table), ratio.any())]
    for ds, part, g, unlabelled, (head, label) in _groups_of(table):
        out += ["", f"## {ds} / {part}", ""]
        if plots and ds in plots:
            out += [f"![privacy-utility on {ds}]({plots[ds]})", ""]
        if unlabelled:
            out += [UNLABELLED_NOTE, ""]
        out += _md_table(g, label, head, label_of or {})
    for heading, tab, label in extra or ():
        for ds, part, g in _groups(tab):
            out += ["", f"## {heading}: {ds} / {part}", ""] + _md_table(g, label, _CFL_HEAD, label_of or {})
    out += ["", "## What each method protects", ""]
    out += [f"- **{e['label']}** ({', '.join(e['methods'])}): {e['text']}" for e in legend_entries]
    return "\n".join(out) + "\n"


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 7px;font-size:13px;text-align:right}td.l,th.l{text-align:left}
tr.best{background:#e5f5e0;font-weight:600}tr.tie{background:#f3faf0}tr.na{color:#999}
span.chance{color:#b30000;font-weight:600}img{max-width:100%;border:1px solid #eee}li{margin:.3em 0}
p.rule{font-size:13px;margin:.2em 0}"""


def _html_table(g: pd.DataFrame, label: str, head: list[str], label_of: dict[str, str]) -> str:
    esc = html.escape
    left = ("method", "trust model", "at chance", "collapsed", "client clustering", "protects")
    interval = bool(g["ACC_lo"].notna().any())
    parts = [
        "<table class='methods'><thead><tr>"
        + "".join(f"<th class='{'l' if h in left else ''}'>{esc(_header(h, label, interval))}</th>" for h in head)
        + "</tr></thead><tbody>"
    ]
    for mark, r in zip(g["mark"], display_rows(g, label_of)):
        cls = {BEST: "best", TIE: "tie"}.get(mark, "na" if r["status"] != "ok" else "")
        cells = []
        for h in head:
            v = esc(r[h])
            if h in ("at chance", "collapsed", "client clustering") and v and v != esc(ONE_MODEL_FLAG):
                v = f"<span class='chance'>{v}</span>"
            if h == "ACC" and r["status"] != "ok" and r["note"]:
                v = f"<span title='{esc(r['note'])}'>{v}</span>"
            cells.append(f"<td class='{'l' if h in left else ''}'>{v}</td>")
        parts.append(f"<tr class='{cls}'>" + "".join(cells) + "</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def to_html(
    table: pd.DataFrame,
    legend_entries: list[dict],
    label_of: dict[str, str] | None = None,
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
    parts = [head]
    if notes:
        parts.append("<ul class='ran'>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    rules = rule_lines(table, *(t for _, t, _ in extra or ()))
    parts.append("".join(f"<p class='rule'>{esc(line).replace('`', '')}</p>" for line in rules))
    flags = {f"`{COLLAPSED}`": f"<span class='chance'>{COLLAPSED}</span>"}
    flags["`AT CHANCE`"] = "<span class='chance'>AT CHANCE</span>"
    items = []
    ratio = is_ratio(table)
    for item in _legend(bool(extra), bool((~ratio).any()) or not len(table), ratio.any()):
        text = esc(item)
        for code, shown in flags.items():
            text = text.replace(code, shown)
        items.append(f"<li>{text.replace('`', '')}</li>")
    parts.append("<ul class='legend'>" + "".join(items) + "</ul>")
    shown = set()
    for ds, part, g, unlabelled, (head, label) in _groups_of(table):
        if ds not in shown and ds in figures:
            shown.add(ds)
            parts.append(
                f"<h2>{esc(ds)}</h2><img class='privacy-utility' alt='privacy-utility plot of {esc(ds)}' "
                f"src='data:image/png;base64,{figures[ds]}'>"
            )
        note = f"<p class='rule'>{esc(UNLABELLED_NOTE)}</p>" if unlabelled else ""
        parts.append(f"<h3>{esc(ds)} / {esc(part)}</h3>" + note + _html_table(g, label, head, label_of or {}))
    for heading, tab, label in extra or ():
        for ds, part, g in _groups(tab):
            parts.append(
                f"<h2>{esc(heading)}: {esc(ds)} / {esc(part)}</h2>" + _html_table(g, label, _CFL_HEAD, label_of or {})
            )
    parts.append(
        "<h2>What each method protects</h2><ul class='protection'>"
        + "".join(
            f"<li id='{esc(e['label'])}'><b>{esc(e['label'])}</b> ({esc(', '.join(e['methods']))}): "
            f"{esc(e['text'])}</li>"
            for e in legend_entries
        )
        + "</ul></body></html>"
    )
    return "\n".join(parts)


_SHORT_MODELS = {"secure_aggregation": "sec-agg", "none": "-", "n/a": "-"}


def terminal_lines(table: pd.DataFrame, width: int = 100, label_of: dict[str, str] | None = None) -> list[str]:
    """The table for the terminal, at most ``width`` columns: per data set and partition, every
    method (``n/a`` where it is not applicable), rows sorted by epsilon then ACC (the table's order),
    without the cost columns that do not fit. The flags (``AT CHANCE``, ``COLLAPSED`` or ``k/n
    seeds``, ``not applicable``) share one column. Under the tables: the rule of the marks (and of
    few seeds, where a row has fewer than :data:`MIN_SEEDS_FOR_CI`), and the collapse rule where a
    row carries that mark."""
    cols = ["ε", "method", "ACC", "chance", "majority", "NMI", "flag", "trust", "prot", "rounds", "up/client"]
    cols += ["compute s"]
    lines = []
    interval = bool(table["ACC_lo"].notna().any()) if len(table) else False
    for ds, part, g, unlabelled, _ in _groups_of(table):
        rows = [
            {
                **r,
                "flag": " ".join(f for f in (r["at chance"], r["collapsed"]) if f)
                or ("not applicable" if r["status"] != "ok" else ""),
                "trust": _SHORT_MODELS.get(r["trust model"], r["trust model"]),
                "prot": r["protects"],
            }
            for r in display_rows(g, label_of)
        ]
        if not rows:
            continue
        keep = [c for c in cols if not (unlabelled and c in LABEL_ONLY)]
        head = {c: (_header(c, "obj. ratio" if unlabelled else "ACC", interval) if c == "ACC" else c) for c in cols}
        while True:
            w = {c: max(len(head[c]), *(len(r[c]) for r in rows)) for c in keep}
            if sum(w.values()) + 2 * (len(keep) - 1) <= width or len(keep) <= 4:
                break
            keep.pop()  # drop the rightmost cost column until the table fits
        lines.append(f"{ds} / {part}"[:width])
        lines.append("  ".join(head[c].ljust(w[c]) for c in keep).rstrip()[:width])
        lines += ["  ".join(r[c].ljust(w[c]) for c in keep).rstrip()[:width] for r in rows]
        if unlabelled:
            lines += textwrap.wrap(TERMINAL_UNLABELLED, width)
        lines.append("")
    if not len(table):
        return lines
    for rule in rule_lines(table):
        lines += textwrap.wrap(rule.replace("`", ""), width)
    lines.append("")
    if table["collapsed"].astype(bool).any() or (pd.to_numeric(table["collapsed_seeds"]) > 0).any():
        lines += textwrap.wrap(f"{COLLAPSED}: {COLLAPSED_RULE}", width) + [""]
    return lines


#: where RR-Cluster's rebalancing helps, from its measured regime map (docs/methods/rr_cluster.md)
RR_HELPS_UP_TO, RR_NO_GAIN_FROM, RR_NO_MOVE_FROM = 10.0, 12.5, 25.0


def rr_guidance(records: list[dict]) -> list[str]:
    """One line on when RR-Cluster helps, with the expected sampled clients per cluster and round of
    the RR rows that ran (none without an RR-Cluster record)."""
    rr = [r for r in records if r.get("tags", {}).get("method") == "rr_cluster"]
    if not rr:
        return []
    per = sorted(
        {
            round(float(r["metrics"]["expected_clients_per_cluster"]), 1)
            for r in rr
            if "expected_clients_per_cluster" in (r.get("metrics") or {})
        }
    )
    here = f" Here: {', '.join(f'{v:g}' for v in per)} per cluster and round." if per else ""
    return [
        "RR-Cluster helps only where few clients per cluster are sampled in a round: on our MNIST map it beats "
        f"DP-IFCA up to about {RR_HELPS_UP_TO:g} expected clients per cluster and round, gains nothing measurable "
        f"from about {RR_NO_GAIN_FROM:g}, and moves no update (equals DP-IFCA) from {RR_NO_MOVE_FROM:g}." + here
    ]


def build(
    records: list[dict],
    *,
    title: str = "fedclust benchmark",
    notes: list[str] | None = None,
    plot_name: str = "privacy_utility.png",
) -> dict:
    """Everything the report needs from ``records``: ``table``, ``clustered_fl`` (its table),
    ``statements`` (method -> sentence), ``legend`` (:func:`protection_legend`), ``figures`` (data
    set -> base64 PNG), ``html``, ``markdown``, ``metrics`` and ``tags`` of the parent run,
    ``terminal``. The report's header lists what ran (:func:`ran_lines`), then ``notes``."""
    table = method_table(records)
    cfl = method_table(records, family="clustered_fl", metric="test_accuracy")
    extra = [("clustered FL, test accuracy (client-level privacy)", cfl, "test acc")] if len(cfl) else []
    entries, label_of = protection_legend(records)
    figures = {ds: figure_png_base64(privacy_utility_figure(table, ds)) for ds in dict.fromkeys(table["dataset"])}
    metrics, tags = parent_run_summary(records)
    header = ran_lines(records) + scaling_lines(records) + list(notes or []) + rr_guidance(records)
    return {
        "table": table,
        "clustered_fl": cfl,
        "statements": privacy_statements(records),
        "legend": entries,
        "figures": figures,
        "metrics": metrics,
        "tags": tags,
        "html": to_html(table, entries, label_of, title=title, figures=figures, notes=header, extra=extra),
        "markdown": to_markdown(
            table,
            entries,
            label_of,
            title=title,
            notes=header,
            extra=extra,
            plots={ds: plot_name for ds in figures},
        ),
        "terminal": terminal_lines(table, label_of=label_of),
    }
