"""The benchmark's tables and figures, from its records (:mod:`fedclust.grids.benchmark`).

Matplotlib (and scikit-learn's PCA for the embedding) load when a figure is drawn. A data set
without labels (its records carry ``objective_ratio`` instead of ACC,
:func:`fedclust.metrics.objective_scores`) has no chance line, no confusion matrix and no
label-by-client heatmap: the figures leave it out of what needs labels and say so, and draw its
objective ratio where they draw a score and no data set has labels.
"""

from __future__ import annotations

import math

import pandas as pd

from fedclust.experiments import records_frame, summarize
from fedclust.grids.benchmark import METRICS, OBJECTIVE_METRICS, _partition_label, dataset_specs, load_by_label
from fedclust.grids.benchmark_cfl import CFL_METRICS
from fedclust.grids.report import unlabelled_datasets
from fedclust.metrics import data_chance_line, is_at_chance, is_collapsed
from fedclust.partition import make_partition
from fedclust.partition.report import label_matrix

#: the summary columns that need labels (left out where no data set of the records has them)
LABEL_METRICS = ("ACC", "NMI", "ARI", "rounds_to_90pct_ACC", "time_to_90pct_ACC_s")


def tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    data_recs = [r for r in records if r["tags"].get("family", "data_clustering") == "data_clustering"]
    cfl_recs = [r for r in records if r["tags"].get("family") == "clustered_fl"]
    out = _data_tables(data_recs) if data_recs else {}
    if cfl_recs:
        frame = records_frame(cfl_recs)
        frame["status"] = frame["status"].fillna("ok")
        summ = summarize(frame, ["dataset", "epsilon", "method"], CFL_METRICS)
        summ["status"] = [
            "not applicable"
            if (
                frame[(frame["dataset"] == d) & (frame["epsilon"] == e) & (frame["method"] == m)]["status"]
                == "not applicable"
            ).all()
            else "ok"
            for d, e, m in zip(summ["dataset"], summ["epsilon"], summ["method"])
        ]
        out["clustered_fl"] = summ
    return out


def _data_tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    """The summary per (dataset, partition, epsilon, method): mean ± std over seeds of :data:`METRICS`,
    ``status``, and the chance line where the records carry it (``ACC_chance``, ``ACC_chance_hi``,
    ``NMI_chance`` of each run, :func:`fedclust.metrics.chance_scores`): ``ACC_chance_mean``,
    ``ACC_chance_hi_mean``, ``NMI_chance_mean`` and ``at_chance``, True where the group's mean ACC
    does not exceed its mean ``ACC_chance_hi`` (within noise of a random split of the same sizes).
    ``at_chance`` is False for not-applicable groups and for groups whose records have no chance line.
    Likewise ``NMI_chance_hi_mean``, ``ACC_majority_mean`` (the largest class share) and
    ``collapsed``: :func:`fedclust.metrics.is_collapsed` of the group's means. Where some record
    is of a data set without labels, also :data:`~fedclust.grids.benchmark.OBJECTIVE_METRICS`; where
    no data set has labels, the summary has none of the columns that need them
    (:data:`LABEL_METRICS`, the chance lines and flags)."""
    frame = records_frame(records)
    frame["status"] = frame["status"].fillna("ok")
    if "trust_model" not in frame.columns:  # records stored before trust models were recorded
        frame["trust_model"] = "n/a"
    frame["trust_model"] = frame["trust_model"].fillna("n/a")
    by = ["dataset", "partition", "epsilon", "method", "trust_model"]
    lines = ("ACC_chance", "ACC_chance_hi", "NMI_chance", "NMI_chance_hi", "ACC_majority")
    chance_keys = [m for m in lines if m in frame.columns]
    objective = [m for m in OBJECTIVE_METRICS if m in frame.columns]  # no column at all without them
    metrics = METRICS
    if objective and "ACC" not in frame.columns:  # no data set with labels: no column that needs them
        metrics = [m for m in METRICS if m not in LABEL_METRICS]
    summary = summarize(frame, by, metrics + objective + chance_keys)
    summary = summary.drop(columns=chance_keys)  # the chance line as numbers only (``<m>_mean``/``<m>_std``)
    na = frame["status"] == "not applicable"
    summary["status"] = [
        "not applicable"
        if na[
            (frame["dataset"] == d) & (frame["partition"] == p) & (frame["epsilon"] == e) & (frame["method"] == m)
        ].all()
        else "ok"
        for d, p, e, m in zip(summary["dataset"], summary["partition"], summary["epsilon"], summary["method"])
    ]
    if metrics is not METRICS:
        return {"summary": summary}
    for m in lines:
        if f"{m}_mean" not in summary.columns:
            summary[f"{m}_mean"] = math.nan
    acc = summary["ACC_mean"] if "ACC_mean" in summary.columns else pd.Series(math.nan, index=summary.index)
    summary["at_chance"] = [
        status == "ok" and is_at_chance({"ACC": a}, {"ACC_chance_hi": hi})
        for status, a, hi in zip(summary["status"], acc, summary["ACC_chance_hi_mean"])
    ]
    nmi = summary["NMI_mean"] if "NMI_mean" in summary.columns else pd.Series(math.nan, index=summary.index)
    summary["collapsed"] = [
        status == "ok"
        and is_collapsed({"ACC": a, "NMI": n}, {"ACC_chance_hi": hi, "NMI_chance_hi": nhi, "ACC_majority": maj})
        for status, a, n, hi, nhi, maj in zip(
            summary["status"],
            acc,
            nmi,
            summary["ACC_chance_hi_mean"],
            summary["NMI_chance_hi_mean"],
            summary["ACC_majority_mean"],
        )
    ]
    return {"summary": summary}


def chance_levels(records: list[dict], data_paths: dict | None = None, config: dict | None = None) -> dict[str, float]:
    """The chance ACC of every data set of ``records`` that has labels: the mean ACC of a random
    assignment with the true class sizes (:func:`fedclust.metrics.data_chance_line`), the dashed line
    of the plots (none for a data set without labels). ``config``: the benchmark's, where its data
    sets are specs (records name them by label)."""
    out = {}
    for ds in dict.fromkeys(
        r["tags"]["dataset"] for r in records if r["tags"].get("family", "data_clustering") == "data_clustering"
    ):
        data = load_by_label(ds, data_paths, config)
        if data.labelled:
            out[ds] = data_chance_line(data.y)["ACC_chance"]
    return out


def _left_out(datasets: list[str], what: str) -> str:
    """The note of a figure that leaves the data sets without labels out."""
    return f"; {', '.join(datasets)}: no labels, {what}" if datasets else ""


def privacy_utility_figure(records: list[dict], chance: dict | float | None = None):
    """ACC (mean ± std over seeds) against the accounted epsilon per method, one panel per
    (dataset, partition); non-private results at the right end; ``chance`` as a dashed line."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from fedclust.plots import privacy_utility_figure as figure

    recs = [r for r in records if r["tags"].get("family", "data_clustering") == "data_clustering"]
    unlabelled = unlabelled_datasets(recs)
    if unlabelled and all(r["tags"]["dataset"] in unlabelled for r in recs):  # no data set with labels
        return figure(
            recs,
            metric="objective_ratio",
            series="method",
            facets=("dataset", "partition"),
            title="privacy-utility (data clustering, no labels): objective ratio to centralized k-means against "
            "the accounted ε (lower is better)",
        )
    return figure(
        recs,
        metric="ACC",
        series="method",
        facets=("dataset", "partition"),
        chance=chance,
        title="privacy-utility (data clustering): ACC against the accounted ε; methods without a DP variant only at ∞"
        + _left_out(unlabelled, "see the report's objective ratio"),
    )


def clustered_fl_privacy_utility_figure(records: list[dict], chance: dict | float | None = None):
    """The clustered-FL half: test accuracy against the accounted epsilon per method."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from fedclust.plots import privacy_utility_figure as figure

    recs = [r for r in records if r["tags"].get("family") == "clustered_fl"]
    return figure(
        recs,
        metric="test_accuracy",
        series="method",
        facets=("dataset",),
        chance=chance,
        title="privacy-utility (clustered FL): test accuracy against the accounted ε (client-level)",
    )


def rounds_figure(records: list[dict]):
    """Per-round curves across budgets, first data set and partition: the data-clustering ACC
    (the cells pass the labels to the methods, which record ACC per round as experimenter-side
    evaluation); else the clustered-FL test accuracy; else the objective."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from fedclust.plots import rounds_by_epsilon_figure

    data = [r for r in records if r["tags"].get("family", "data_clustering") == "data_clustering"]
    acc = [r for r in data if (r.get("history") or {}).get("ACC")]
    if acc:
        return rounds_by_epsilon_figure(acc, "ACC", title="ACC per round across ε (mean over seeds)")
    cfl = [r for r in records if r["tags"].get("family") == "clustered_fl"]
    if any((r.get("history") or {}).get("test_accuracy") for r in cfl):
        return rounds_by_epsilon_figure(
            cfl,
            "test_accuracy",
            focus=("dataset",),
            title="clustered FL: test accuracy per evaluation round across ε (mean over seeds)",
        )
    return rounds_by_epsilon_figure(data, "objective", title="objective per round across ε (mean over seeds)")


def confusion_figure(records: list[dict], data_paths: dict | None = None, config: dict | None = None):
    """The confusion matrix of the best run (highest ACC among the non-private seed-0 runs that
    kept their labels), clusters matched to classes."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from fedclust.plots import best_run, message_figure
    from fedclust.plots import confusion_figure as figure

    best = best_run(records, "ACC")
    unlabelled = unlabelled_datasets(records)
    if best is None and unlabelled:
        return message_figure(
            f"no data set with labels ({', '.join(unlabelled)}: none), so there is no confusion matrix",
            "confusion matrix",
        )
    if best is None:
        return message_figure("no run kept its labels (seed 0, no DP)", "confusion matrix")
    t = best["tags"]
    y = load_by_label(t["dataset"], data_paths, config).y
    return figure(
        y,
        best["labels"],
        title=f"best run: {t['method']} · {t['dataset']} / {t['partition']} · "
        f"ε = {t['epsilon']} · ACC {best['metrics']['ACC']:.3f}" + _left_out(unlabelled, "left out"),
    )


def communication_figure(records: list[dict]):
    """Final ACC against uploaded reals (log scale), one marker per method, non-private runs (the
    objective ratio instead where no data set has labels; data sets without labels are left out
    of an ACC plot, which says so)."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from fedclust.plots import subplots

    runs = [r for r in records if r["tags"]["epsilon"] == "inf" and r["metrics"].get("uploaded_reals")]
    unlabelled = unlabelled_datasets(records)
    labelled = [r for r in runs if r["tags"]["dataset"] not in unlabelled]
    score = "ACC" if labelled or not runs else "objective_ratio"
    frame = records_frame(labelled if score == "ACC" else runs)
    fig, ax = subplots(figsize=(5.5, 3.8))
    if frame.empty:
        ax.text(0.5, 0.5, "no non-private run with uploads", ha="center")
        return fig
    for method, g in frame.groupby("method", sort=False):
        ax.scatter(g["uploaded_reals"], g[score], label=method, alpha=0.7)
    ax.set_xscale("log")
    ax.set_xlabel("uploaded reals (whole run)")
    ax.set_ylabel("ACC" if score == "ACC" else "objective ratio (lower is better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    if score == "ACC":
        title = "communication: ACC vs uploaded reals (no DP)" + _left_out(unlabelled, "left out")
    else:
        title = "communication: objective ratio vs uploaded reals (no DP, no labels)"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def embedding_figure(records: list[dict], data_paths: dict | None = None, config: dict | None = None):
    """A 2-D PCA embedding of every data set, colored by each method's predicted clusters (seed 0,
    no DP, first partition), with the true classes in the first column (a data set without labels:
    its points uncoloured, and each method's objective ratio in place of its ACC)."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from sklearn.decomposition import PCA

    from fedclust.plots import subplots  # likewise: figures on canvases of their own

    with_labels = [r for r in records if "labels" in r]
    datasets = list(dict.fromkeys(r["tags"]["dataset"] for r in with_labels))
    if not datasets:
        fig, ax = subplots(figsize=(3, 2))
        ax.text(0.5, 0.5, "no non-private seed-0 run", ha="center")
        return fig
    first_part = {d: next(r["tags"]["partition"] for r in with_labels if r["tags"]["dataset"] == d) for d in datasets}
    methods = list(dict.fromkeys(r["tags"]["method"] for r in with_labels))
    fig, axes = subplots(
        len(datasets), len(methods) + 1, figsize=(2.4 * (len(methods) + 1), 2.4 * len(datasets)), squeeze=False
    )
    for i, d in enumerate(datasets):
        data = load_by_label(d, data_paths, config)
        Z = PCA(2, random_state=0).fit_transform(data.X)
        if data.labelled:
            axes[i][0].scatter(Z[:, 0], Z[:, 1], c=data.y, s=2, cmap="tab20")
            axes[i][0].set_title(f"{d}: true classes", fontsize=8)
        else:
            axes[i][0].scatter(Z[:, 0], Z[:, 1], color="0.5", s=2)
            axes[i][0].set_title(f"{d}: no labels", fontsize=8)
        for j, m in enumerate(methods, 1):
            rec = next(
                (
                    r
                    for r in with_labels
                    if r["tags"]["dataset"] == d
                    and r["tags"]["method"] == m
                    and r["tags"]["partition"] == first_part[d]
                ),
                None,
            )
            ax = axes[i][j]
            if rec is not None:
                ax.scatter(Z[:, 0], Z[:, 1], c=rec["labels"], s=2, cmap="tab20")
                met = rec["metrics"]
                score = f"ACC {met['ACC']:.2f}" if "ACC" in met else f"ratio {met.get('objective_ratio', math.nan):.2f}"
                ax.set_title(f"{m} ({score})", fontsize=8)
        for ax in axes[i]:
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle("PCA embedding colored by predicted cluster (seed 0, no DP)", fontsize=10)
    fig.tight_layout()
    return fig


def partition_heatmaps(config: dict, data_paths: dict | None = None):
    """The label-by-client heatmap of every partition scheme of the first data set with labels
    (seed 0); the data sets without labels before it are named in the title, and without any data
    set with labels the figure says there is nothing to draw."""
    # plots (matplotlib, scikit-learn's PCA) load only when the benchmark draws its figures
    from fedclust.plots import message_figure, subplots

    skipped, ds, data = [], None, None
    for label in dataset_specs(config, data_paths):
        data = load_by_label(label, data_paths, config)
        if data.labelled:
            ds = label
            break
        skipped.append(label)
    if ds is None:
        return message_figure(
            f"no data set with labels ({', '.join(skipped)}): a label-by-client heatmap needs labels",
            "samples per client and label",
        )
    parts = config.get("partitions", [{"scheme": "iid"}])
    fig, axes = subplots(1, len(parts), figsize=(3.6 * len(parts), 3.2), squeeze=False)
    for ax, part in zip(axes[0], parts):
        opts = {k: v for k, v in part.items() if k != "scheme"}
        p = make_partition(
            part["scheme"],
            X=data.X,
            y=data.y,
            images=data.images,
            n_clients=int(config.get("n_clients", 10)),
            seed=0,
            **opts,
        )
        im = ax.imshow(label_matrix(p, data.y), aspect="auto", cmap="viridis")
        ax.set_title(_partition_label(part), fontsize=8)
        ax.set_xlabel("label")
        ax.set_ylabel("client")
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(f"samples per client and label ({ds}){_left_out(skipped, 'left out')}", fontsize=10)
    fig.tight_layout()
    return fig
