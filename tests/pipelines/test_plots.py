"""The report figures (issue 14, Plots): what a person sees, checked on the figure objects.

Figures are built from small synthetic records and histories (no pipeline run) except the last
test, which runs the fkm pipeline once to check that every run keeps its own versioned plots and
logs them to MLflow.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fedclust import plots  # noqa: E402
from fedclust.clustering.base import ClusteringResult  # noqa: E402
from fedclust.privacy.accountants import epsilon as accounted  # noqa: E402
from fedclust.privacy.events import GaussianRelease  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _data_axes(fig):
    """Axes that are panels (not colorbars)."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def _has_data(ax) -> bool:
    return any(len(line.get_xdata()) for line in ax.get_lines()) or bool(ax.collections) or bool(ax.images)


def _overlaps(boxes) -> bool:
    boxes = [b for b in boxes if b.width > 0]
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def _legend_outside_axes(fig, legend) -> bool:
    renderer = _drawn(fig)
    lb = legend.get_window_extent(renderer)
    return all(not lb.overlaps(ax.get_window_extent(renderer)) for ax in _data_axes(fig))


# ------------------------------------------------------------------------------ one run


def test_history_figure_is_a_titled_grid_without_empty_or_constant_panels():
    history = {
        "objective": [5.0, 3.0, 2.5, 2.4, 2.3],
        "ACC": [0.3, 0.5, 0.6, 0.62, 0.63],
        "NMI": [0.2, 0.4, 0.5, 0.5, 0.52],
        "train_loss": [2.0, 1.5, 1.2, 1.1, 1.0],
        "client_ACC": [0.5, 0.6, 0.7, 0.7, 0.75],
        "n_moved": [0.0, 0.0, 0.0, 0.0, 0.0],  # constant: no panel
        "sizes": [],  # empty: no panel
        "lr": [0.1, 0.05, 0.03, 0.02, 0.01],  # a schedule, not a metric
    }
    fig = plots.history_figure(
        history,
        method="fkm",
        dataset="digits",
        partition="iid(10 clients)",
        epsilon=4.0,
        eps_rounds=[(1, 1.0), (3, 2.5), (5, 4.0)],
    )
    axes = _data_axes(fig)
    titles = [ax.get_title() for ax in axes]
    assert titles == ["objective", "ACC", "NMI", "train_loss", "client_ACC", "ε spent (accountant)"]
    assert all(_has_data(ax) for ax in axes)
    # a grid, not one row: panels on at least two rows
    rows = {round(ax.get_position().y0, 3) for ax in axes}
    assert len(rows) >= 2
    title = fig._suptitle.get_text()
    assert "fkm" in title and "digits" in title and "iid(10 clients)" in title and "ε = 4" in title
    assert any("outside the DP guarantee" in t.get_text() for t in fig.texts)
    renderer = _drawn(fig)
    assert not _overlaps([ax.get_tightbbox(renderer) for ax in axes])


def test_history_figure_of_a_non_private_run_says_infinity_and_has_no_epsilon_panel():
    fig = plots.history_figure(
        {"objective": [3.0, 2.0, 1.5]}, method="ifca", dataset="digits", partition="rotation(4 groups)", epsilon="inf"
    )
    assert [ax.get_title() for ax in _data_axes(fig)] == ["objective"]
    assert "∞" in fig._suptitle.get_text()


def test_epsilon_by_round_grows_to_the_accounted_epsilon_of_the_run():
    releases = [
        GaussianRelease(noise_multipliers=(3.0,), count=20, label="sums"),
        GaussianRelease(noise_multipliers=(5.0,), count=1, label="once"),
    ]
    curve = plots.epsilon_by_round(releases, 1e-5)
    ts, eps = zip(*curve)
    assert ts[0] == 1 and ts[-1] == 20
    assert all(b > a for a, b in zip(eps, eps[1:]))
    assert eps[-1] == pytest.approx(accounted(releases, 1e-5))
    assert plots.epsilon_by_round([GaussianRelease(noise_multipliers=(0.0,), count=5)], 1e-5) == []


def test_plot_history_node_titles_the_run_and_draws_epsilon_against_rounds():
    from fedclust.pipelines.reporting.nodes import plot_history

    releases = [GaussianRelease(noise_multipliers=(2.0,), count=8)]
    result = ClusteringResult(
        labels=np.zeros(4, int),
        history={"objective": list(np.linspace(4, 1, 8)), "ACC": list(np.linspace(0.2, 0.7, 8))},
        dp_events=releases,
    )
    eps = accounted(releases, 1e-5)
    privacy = {"epsilon_accountant": eps, "delta": 1e-5, "accountant": "rdp"}
    fig = plot_history(
        result,
        privacy,
        {"name": "digits"},
        {"scheme": "dirichlet", "n_clients": 10, "options": {"alpha": 0.5}},
        method="fkm",
    )
    title = fig._suptitle.get_text()
    assert "fkm" in title and "digits" in title and "dirichlet(alpha=0.5, 10 clients)" in title
    assert f"ε = {eps:.3g}" in title
    eps_ax = [ax for ax in fig.axes if ax.get_title().startswith("ε spent")]
    assert len(eps_ax) == 1
    ys = eps_ax[0].get_lines()[0].get_ydata()
    assert ys[-1] == pytest.approx(eps) and len(ys) == 8


def test_centroids_are_drawn_as_images_for_image_data_and_as_a_heatmap_otherwise():
    from fedclust.data import Dataset
    from fedclust.pipelines.reporting.nodes import plot_centroids

    rng = np.random.default_rng(0)
    C = rng.random((10, 64))
    images = Dataset(
        X=np.zeros((3, 64), np.float32), y=np.zeros(3, np.int64), name="digits", images=np.zeros((3, 8, 8), np.float32)
    )
    fig = plot_centroids(
        ClusteringResult(labels=np.zeros(3, int), centroids=C),
        images,
        {"epsilon_accountant": "inf"},
        {"scheme": "iid", "n_clients": 5},
        method="fkm",
    )
    tiles = [ax for ax in fig.axes if ax.images]
    assert len(tiles) == 10 and all(ax.images[0].get_array().shape == (8, 8) for ax in tiles)
    assert np.allclose(tiles[3].images[0].get_array(), C[3].reshape(8, 8))
    assert "fkm" in fig._suptitle.get_text() and "digits" in fig._suptitle.get_text()

    table = Dataset(X=np.zeros((3, 4), np.float32), y=np.zeros(3, np.int64), name="iris")
    fig = plot_centroids(
        ClusteringResult(labels=np.zeros(3, int), centroids=rng.random((3, 4))),
        table,
        {"epsilon_accountant": 2.0},
        {"scheme": "iid"},
        method="fkm",
    )
    heat = [ax for ax in _data_axes(fig) if ax.images]
    assert len(heat) == 1 and heat[0].images[0].get_array().shape == (3, 4)
    with pytest.raises(ValueError, match="shape"):
        plots.centroid_images_figure(C, (7, 7))


def test_confusion_matrix_orders_clusters_by_the_acc_matching():
    y = np.repeat([0, 1, 2], 10)
    pred = np.choose(y, [2, 0, 1])  # a perfect clustering with permuted names
    pred[0] = 0  # one mistake
    fig = plots.confusion_figure(y, pred, title="best run: fkm")
    table = np.asarray(_data_axes(fig)[0].images[0].get_array())
    assert table.shape == (3, 3) and np.trace(table) == 29 and table.sum() == 30
    assert _data_axes(fig)[0].get_title() == "best run: fkm"


# ------------------------------------------------------------------------------ grid figures


def _summary_table():
    """A benchmark-like summary: 2 partitions x 3 budgets x 2 methods (kmeans only at inf)."""
    rows = []
    for part in ("iid", "dirichlet(alpha=0.5)"):
        for eps in ("4", "16", "inf"):
            for method in ("fkm", "kmeans"):
                if method == "kmeans" and eps != "inf":
                    continue
                acc = 0.2 + 0.1 * ("4", "16", "inf").index(eps) + (0.05 if method == "kmeans" else 0.0)
                rows.append(
                    {
                        "dataset": "digits",
                        "partition": part,
                        "epsilon": eps,
                        "method": method,
                        "n": 2,
                        "ACC_mean": acc,
                        "ACC_std": 0.01,
                        "ACC": f"{acc:.3f}",
                        "status": "ok",
                    }
                )
    return pd.DataFrame(rows)


def test_sweep_panels_never_join_different_settings_and_keep_the_legend_off_the_data():
    from fedclust.pipelines.grids import plot_sweeps

    fig = plot_sweeps({"summary": _summary_table()})
    axes = _data_axes(fig)
    assert len(axes) == 2  # one panel per partition, epsilon on the x axis
    assert {ax.get_title() for ax in axes} == {"summary: partition=iid", "summary: partition=dirichlet(alpha=0.5)"}
    for ax in axes:
        assert ax.get_xlabel() == "epsilon"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["4", "16", "∞"]
        for line in ax.get_lines():
            xs = list(line.get_xdata())
            assert len(xs) == len(set(xs))  # one point per budget: no line across unrelated epsilons
        assert len([ln for ln in ax.get_lines() if len(ln.get_xdata())]) >= 2
    assert len(fig.legends) == 1 and _legend_outside_axes(fig, fig.legends[0])
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"fkm", "kmeans"}
    renderer = _drawn(fig)
    for ax in axes:
        assert not _overlaps([t.get_window_extent(renderer) for t in ax.get_xticklabels()])
    assert not _overlaps([ax.get_tightbbox(renderer) for ax in axes])


def test_sweep_with_long_categorical_settings_keeps_labels_apart():
    from fedclust.pipelines.grids import plot_sweeps

    parts = ["iid", "dirichlet(alpha=0.5)", "shards(labels_per_client=2)", "kmeans(n_init=1)"]
    tab = pd.DataFrame(
        [{"method": m, "partition": p, "ACC_mean": 0.5, "ACC_std": 0.0} for m in ("fkm", "dkm") for p in parts]
    )
    fig = plot_sweeps({"summary": tab})
    renderer = _drawn(fig)
    (ax,) = _data_axes(fig)
    assert [t.get_text() for t in ax.get_xticklabels()] == parts
    assert not _overlaps([t.get_window_extent(renderer) for t in ax.get_xticklabels()])


def _records():
    """Benchmark-like records: two data-clustering methods over 3 budgets and 2 seeds, a
    clustered-FL method with test accuracy, and a cell that is not applicable."""
    out = []
    for seed in (0, 1):
        for eps, acc_eps in (("inf", math.inf), ("4", 4.2), ("16", 15.8)):
            for method in ("fkm", "dp_fedc"):
                base = {"inf": 0.7, "16": 0.5, "4": 0.3}[eps] - (0.1 if method == "dp_fedc" else 0.0)
                out.append(
                    {
                        "name": f"digits/iid/eps={eps}/{method}/seed={seed}",
                        "tags": {
                            "method": method,
                            "dataset": "digits",
                            "partition": "iid",
                            "epsilon": eps,
                            "family": "data_clustering",
                            "status": "ok",
                        },
                        "params": {"seed": seed},
                        "metrics": {"ACC": base + 0.01 * seed, "epsilon_accountant": acc_eps},
                        "history": {
                            "objective": list(np.linspace(10, 5, 6) + seed),
                            "ACC": list(np.linspace(0.1, base, 6)),
                        },
                    }
                )
            out.append(
                {
                    "name": f"digits/iid/eps={eps}/kmeans/seed={seed}",
                    "tags": {
                        "method": "kmeans",
                        "dataset": "digits",
                        "partition": "iid",
                        "epsilon": eps,
                        "family": "data_clustering",
                        "status": "ok" if eps == "inf" else "not applicable",
                    },
                    "params": {"seed": seed},
                    "metrics": {"ACC": 0.8, "epsilon_accountant": math.inf} if eps == "inf" else {},
                    "history": {},
                }
            )
        out.append(
            {
                "name": f"digits/ifca/seed={seed}",
                "tags": {
                    "method": "ifca",
                    "dataset": "digits",
                    "epsilon": "inf",
                    "partition": "rotation(4 groups)",
                    "family": "clustered_fl",
                },
                "params": {"seed": seed},
                "metrics": {"test_accuracy": 0.6, "epsilon_accountant": math.inf},
                "history": {"test_accuracy": [0.3, 0.5, 0.6], "n_moved": [0.0, 1.0, 0.0]},
            }
        )
    return out


def test_curves_have_a_line_in_every_panel_and_one_legend_outside_them():
    from fedclust.pipelines.grids import plot_curves

    fig = plot_curves(_records(), ("dataset", "partition", "method", "epsilon"))
    axes = _data_axes(fig)
    assert [ax.get_ylabel() for ax in axes] == ["objective", "ACC", "test_accuracy", "n_moved"]
    for ax in axes:
        assert _has_data(ax), ax.get_ylabel()
    (legend,) = fig.legends  # one legend for every panel, at the right of all of them
    assert _legend_outside_axes(fig, legend)
    acc_labels = {line.get_label() for line in axes[1].get_lines()}
    assert acc_labels == {f"{m}, epsilon={e}" for m in ("fkm", "dp_fedc") for e in ("4", "16", "inf")}
    assert acc_labels <= {t.get_text() for t in legend.get_texts()}


def test_privacy_utility_puts_the_accounted_epsilon_on_the_axis_with_a_chance_line():
    from fedclust.grids import benchmark

    fig = benchmark.privacy_utility_figure(_records(), chance={"digits": 0.1})
    (ax,) = _data_axes(fig)
    assert "accounted" in ax.get_xlabel() and ax.get_ylabel() == "ACC"
    chance = [ln for ln in ax.get_lines() if ln.get_label() == "chance level"]
    assert len(chance) == 1 and set(chance[0].get_ydata()) == {0.1}
    legend = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"fkm", "dp_fedc", "kmeans", "chance level"} == legend
    fkm = next(c for c in ax.containers if c.get_label() == "fkm")
    xs = list(fkm.lines[0].get_xdata())
    assert xs[:2] == pytest.approx([4.2, 15.8])  # accounted, not the targets 4 and 16
    assert xs[2] > 15.8  # non-private at the right end
    kmeans = next(c for c in ax.containers if c.get_label() == "kmeans")
    assert list(kmeans.lines[0].get_xdata()) == [xs[2]]  # no DP variant: only at infinity
    assert any("∞" in t.get_text() for t in ax.get_xticklabels())
    # no ε = ∞ run: no empty "no DP" slot on the axis
    private = [r for r in _records() if r["tags"]["epsilon"] != "inf"]
    (ax,) = _data_axes(benchmark.privacy_utility_figure(private, chance={"digits": 0.1}))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4.2", "16"]


def test_rr_grid_privacy_utility_and_rounds_across_epsilon():
    from fedclust.grids import rr

    recs = []
    for seed in (0, 1):
        for eps, acc in (("inf", math.inf), ("2", 2.1), ("8", 8.3)):
            for label in ("dp_ifca", "rr_cluster(B=4)"):
                recs.append(
                    {
                        "name": f"balanced/eps={eps}/{label}/seed={seed}",
                        "tags": {
                            "method": label.split("(")[0],
                            "dataset": "digits",
                            "partition": "rotation-balanced",
                            "epsilon": eps,
                        },
                        "params": {"setting": "balanced", "label": label, "seed": seed},
                        "metrics": {"test_accuracy": 0.3 + 0.01 * seed, "epsilon_accountant": acc},
                        "history": {"test_accuracy": [0.2, 0.25, 0.3]},
                    }
                )
    fig = rr.privacy_utility_figure(recs, chance=0.1)
    (ax,) = _data_axes(fig)
    assert ax.get_title() == "balanced" and "accounted" in ax.get_xlabel()
    assert any(ln.get_label() == "chance level" for ln in ax.get_lines())
    fig = rr.rounds_figure(recs)
    axes = _data_axes(fig)
    assert [ax.get_title() for ax in axes] == ["dp_ifca", "rr_cluster(B=4)"]
    for ax in axes:
        assert len([ln for ln in ax.get_lines() if len(ln.get_xdata())]) == 3  # one line per budget
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"ε = 2", "ε = 8", "ε = ∞ (no DP)"}


def test_benchmark_rounds_figure_draws_acc_per_round_across_epsilon():
    from fedclust.grids import benchmark

    fig = benchmark.rounds_figure(_records())
    axes = _data_axes(fig)
    assert [ax.get_title() for ax in axes] == ["fkm", "dp_fedc"]
    assert all(ax.get_ylabel() == "ACC" and len(ax.get_lines()) == 3 for ax in axes)


def test_figures_without_data_say_so_instead_of_drawing_empty_axes():
    fig = plots.curves_figure([], ("method",))
    assert not any(_has_data(ax) for ax in fig.axes) and any(
        "no run" in t.get_text() for ax in fig.axes for t in ax.texts
    )
    fig = plots.privacy_utility_figure([], "ACC")
    assert any("no run" in t.get_text() for ax in fig.axes for t in ax.texts)


# ------------------------------------------------------------------------------ pipeline wiring


def test_grid_figures_are_catalogued_as_png_files(kedro_project):
    """Every figure output of the benchmark and rr_grid pipelines has a catalog entry that writes a PNG."""
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    from fedclust.pipelines.grids import GRID_PIPELINES

    bootstrap_project(kedro_project)
    with KedroSession.create(project_path=kedro_project) as session:
        catalog = session.load_context().catalog
    for name in ("benchmark", "rr_grid"):
        outputs = [o for o in GRID_PIPELINES[name]().all_outputs() if o.endswith("_plot")]
        assert f"{name}.privacy_utility_plot" in outputs and f"{name}.rounds_by_epsilon_plot" in outputs
        for out in outputs:
            ds = catalog.get(out)
            ds = getattr(ds, "_dataset", ds)  # the benchmark's stages cache their outputs (CachedDataset)
            assert "Matplotlib" in type(ds).__name__ or "Figure" in type(ds).__name__, out
            assert str(ds._filepath).endswith(".png"), out
    assert "benchmark.confusion_plot" in GRID_PIPELINES["benchmark"]().all_outputs()


def test_each_fkm_run_keeps_its_own_history_and_centroid_plots(run_pipeline, mlflow_runs, kedro_project):
    from matplotlib import image

    params = {
        "dataset": {"name": "digits", "n_per_class": 20},
        "partition": {"scheme": "iid", "n_clients": 4},
        "fkm": {"train": {"rounds": 4}},
        "privacy": {"epsilon": 4.0, "delta": 1e-5},
    }
    run_pipeline("fkm", params)
    run_pipeline("fkm", params)
    for plot in ("history.png", "centroids.png"):
        folder = kedro_project / "data/08_reporting/fkm" / plot
        versions = sorted(p for p in folder.iterdir() if p.is_dir())
        assert len(versions) == 2, plot  # versioned: the second run did not overwrite the first
        png = image.imread(versions[-1] / plot)
        assert png.shape[0] > 100 and png.shape[1] > 300 and png.std() > 0.01  # a picture, not a blank
    client, runs = mlflow_runs()
    arts = {a.path for a in client.list_artifacts(runs[0].info.run_id, "fkm")}
    assert arts == {"fkm/centroids.png", "fkm/history.png", "fkm/metrics.json", "fkm/privacy.json"}


def test_benchmark_and_rr_grid_pipelines_write_their_figures(run_pipeline, mlflow_runs, kedro_project):
    from matplotlib import image

    run_pipeline(
        "rr_grid",
        {
            "rr_grid": {
                "config": {
                    "dataset": "digits",
                    "settings": ["balanced"],
                    "epsilons": [None, 8.0],
                    "seeds": 1,
                    "methods": ["dp_ifca"],
                    "n_clients": 40,
                    "participation": 0.5,
                    "rounds": 4,
                    "eval_every": 2,
                    "samples_per_client": 6,
                    "test_per_client": 2,
                }
            }
        },
    )
    run_pipeline(
        "benchmark",
        {
            "benchmark": {
                "config": {
                    "datasets": ["iris"],
                    "partitions": [{"scheme": "iid"}],
                    "epsilons": [None, 4.0],
                    "seeds": 1,
                    "rounds": 3,
                    "n_clients": 4,
                    "methods": ["fkm", "kmeans"],
                    "clustered_fl": None,
                }
            }
        },
    )
    reporting = kedro_project / "data/08_reporting"
    for path in (
        "rr_grid/privacy_utility.png",
        "rr_grid/rounds_by_epsilon.png",
        "rr_grid/curves.png",
        "benchmark/privacy_utility.png",
        "benchmark/rounds_by_epsilon.png",
        "benchmark/confusion.png",
        "benchmark/curves.png",
        "benchmark/sweep.png",
    ):
        png = image.imread(reporting / path)
        assert png.shape[0] > 100 and png.std() > 0.01, path
    client, runs = mlflow_runs()
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    logged = {
        a.path
        for r in parents
        for folder in ("rr_grid", "benchmark")
        for a in client.list_artifacts(r.info.run_id, folder)
    }
    assert {"rr_grid/privacy_utility.png", "benchmark/confusion.png", "benchmark/rounds_by_epsilon.png"} <= logged


def test_epsilon_by_round_reads_consecutive_stretches_of_rounds_in_order():
    # DP-FedC: one release per stretch of rounds with the same schedule, counts adding up to the rounds
    releases = [
        GaussianRelease(noise_multipliers=(2.0,), count=2, label="Q2=6"),
        GaussianRelease(noise_multipliers=(4.0,), count=8, label="Q2=1"),
    ]
    curve = dict(plots.epsilon_by_round(releases, 1e-5, rounds=10))
    assert sorted(curve) == list(range(1, 11))
    assert curve[2] == pytest.approx(accounted([releases[0]], 1e-5))
    assert curve[10] == pytest.approx(accounted(releases, 1e-5))


def test_history_figure_leaves_out_round_counters():
    fig = plots.history_figure({"rr_round": [1, 2, 3, 4], "n_moved": [0, 2, 1, 3]}, method="rr_cluster")
    assert [ax.get_title() for ax in _data_axes(fig)] == ["n_moved"]
