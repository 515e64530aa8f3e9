"""The benchmark report's numbers: the confidence interval, the best marker, the order of the rows,
the parent run's metrics and the self-contained page."""

import math

import pytest
from scipy import stats

from fedclust.grids import report


def rec(
    method, eps, acc, seed, *, ds="digits", part="iid", tm="secure_aggregation", status="ok", chance_hi=0.14, **extra
):
    metrics = (
        {}
        if status != "ok"
        else {
            "ACC": acc,
            "ACC_chance": 0.12,
            "ACC_chance_hi": chance_hi,
            "at_chance": float(acc <= chance_hi),
            "rounds": 5.0,
            "bytes_up_per_client": 2400.0,
            "compute_time_s": 0.5,
            **extra,
        }
    )
    return {
        "name": f"{method}/{eps}/{seed}",
        "tags": {
            "family": "data_clustering",
            "status": status,
            "dataset": ds,
            "partition": part,
            "epsilon": eps,
            "method": method,
            "trust_model": tm,
        },
        "params": {"seed": seed, "delta": 1e-5},
        "metrics": metrics,
    }


def test_the_interval_is_the_student_t_interval_of_the_mean():
    mean, half = report.t_interval([0.5, 0.7, 0.9])
    s = math.sqrt(((0.5 - 0.7) ** 2 + 0 + (0.9 - 0.7) ** 2) / 2)  # sample std (ddof 1) = 0.2
    assert mean == pytest.approx(0.7)
    assert half == pytest.approx(stats.t.ppf(0.975, 2) * s / math.sqrt(3))  # 4.303 x 0.2 / sqrt 3 = 0.4968
    assert half == pytest.approx(0.4968, abs=1e-4)
    assert math.isnan(report.t_interval([0.4])[1])  # one seed: no interval
    assert report.t_interval([0.4, float("nan"), 0.6])[0] == pytest.approx(0.5)  # NaNs dropped


@pytest.fixture
def records():
    return [
        rec("fkm", "4", 0.60, 0),
        rec("fkm", "4", 0.80, 1),
        rec("fed_dp_kmeans", "4", 0.72, 0),
        rec("fed_dp_kmeans", "4", 0.74, 1),
        rec("dp_fedc", "1", 0.13, 0, tm="local"),
        rec("dp_fedc", "1", 0.12, 1, tm="local"),
        rec("fkm", "1", 0.30, 0),
        rec("fkm", "1", 0.40, 1),
        rec("kmeans", "inf", 0.79, 0, tm="none"),
        rec("kmeans", "inf", 0.81, 1, tm="none"),
        rec("kmeans", "4", None, 0, tm="none", status="not applicable"),
        rec("fkm", "inf", 0.85, 0, tm="none"),
        rec("fkm", "inf", 0.83, 1, tm="none"),
    ]


def test_rows_are_sorted_by_epsilon_then_acc_and_the_best_per_epsilon_is_marked(records):
    table = report.method_table(records)
    assert list(zip(table["epsilon"], table["method"])) == [
        ("1", "fkm"),
        ("1", "dp_fedc"),
        ("4", "fed_dp_kmeans"),
        ("4", "fkm"),
        ("4", "kmeans"),
        ("inf", "fkm"),
        ("inf", "kmeans"),
    ]  # 4 < inf; not applicable last within its epsilon
    best = table[table["best"]]
    assert list(zip(best["epsilon"], best["method"])) == [("1", "fkm"), ("4", "fed_dp_kmeans"), ("inf", "fkm")]
    row = table[(table["method"] == "dp_fedc")].iloc[0]
    assert row["at_chance"] and row["trust_model"] == "local" and row["n"] == 2
    fkm4 = table[(table["method"] == "fkm") & (table["epsilon"] == "4")].iloc[0]
    assert fkm4["ACC"] == pytest.approx(0.70)
    assert fkm4["ACC_ci"] == pytest.approx(stats.t.ppf(0.975, 1) * math.sqrt(0.02) / math.sqrt(2))
    assert fkm4["bytes_up_per_client"] == 2400.0 and not fkm4["at_chance"]
    na = table[(table["method"] == "kmeans") & (table["epsilon"] == "4")].iloc[0]
    assert na["status"] == "not applicable" and not na["best"] and na["n"] == 0


def test_parent_run_metrics_name_the_best_per_epsilon_and_count_the_runs(records):
    metrics, tags = report.parent_run_summary(records)
    assert metrics["best_ACC_eps_4"] == pytest.approx(0.73) and tags["best_method_eps_4"] == "fed_dp_kmeans"
    assert tags["best_method_eps_inf"] == "fkm" and tags["best_method_eps_1"] == "fkm"
    assert metrics["runs_done"] == 12 and metrics["runs_not_applicable"] == 1 and metrics["runs_failed"] == 0
    assert metrics["runs_at_chance"] == 2
    assert all(math.isfinite(v) and abs(v) < 1e300 for v in metrics.values())


def test_the_report_is_one_self_contained_page_with_table_plot_and_statements(records):
    out = report.build(records, title="t")
    page = out["html"]
    assert page.count("<img") == 1 and "data:image/png;base64," in page
    assert "src='http" not in page and "<script" not in page and "<link" not in page  # nothing to fetch
    assert "<tr class='best'>" in page and "AT CHANCE" in page
    assert "fed_dp_kmeans: protects any one sample" in out["statements"]["fed_dp_kmeans"]
    assert "ε in {4} and δ = 1e-05" in out["statements"]["fed_dp_kmeans"]
    assert "Trust model local" in out["statements"]["dp_fedc"] and "ε in {1}" in out["statements"]["dp_fedc"]
    assert "not private" in out["statements"]["kmeans"]
    assert "| ε | method | ACC (95% CI) |" in out["markdown"] and "* fed_dp_kmeans" in out["markdown"]
    assert "1.79769" not in page and "e+308" not in out["markdown"]


def test_the_terminal_table_fits_100_columns_and_keeps_the_order(records):
    lines = report.terminal_lines(report.method_table(records))
    assert lines and max(len(line) for line in lines) <= 100
    body = [line for line in lines if line.startswith(("1 ", "4 ", "inf "))]
    assert "AT CHANCE" in body[1] and "sec-agg" in body[0]  # dp_fedc at 1: at chance
    assert [line.split()[0] for line in body] == ["1", "1", "4", "4", "inf", "inf"]
    assert body[0].split()[1:3] == ["*", "fkm"]


def test_the_run_labels_say_what_ran():
    from fedclust.hooks.summary import add_setup_time
    from fedclust.pipelines.mlflow_io import kedro_command, run_address

    cmd = kedro_command(
        {
            "pipeline_names": ["benchmark"],
            "env": None,
            "tags": [],
            "node_names": [],
            "runtime_params": {"benchmark": {"config": {"seeds": 1, "epsilons": [4.0]}}},
        }
    )
    assert cmd == "kedro run --pipelines=benchmark '--params=benchmark.config.seeds=1,benchmark.config.epsilons=[4.0]'"
    assert kedro_command({"pipeline_names": ["__default__"]}) == "kedro run"
    metrics = {"wall_time_s": 2.0}
    add_setup_time(metrics, 0.5)  # the data and partition steps count
    assert metrics == {"wall_time_s": 2.5, "train_time_s": 2.0}
    assert run_address("http://h:5000/", "1", "ab") == "http://h:5000/#/experiments/1/runs (run ab)"
    local = run_address("sqlite:///mlflow.db", "1", "ab")  # the UI to start, then the experiment's runs view
    assert local == "make mlflow-ui, then open http://127.0.0.1:5000/#/experiments/1/runs (run ab)"


def test_rounds_and_time_to_90_percent_of_the_final_acc():
    from fedclust.metrics import rounds_to_fraction, time_to_90pct

    assert rounds_to_fraction([0.1, 0.5, 0.85, 0.9, 0.92]) == 3  # 0.9 x 0.92 = 0.828: round 3 reaches it
    assert rounds_to_fraction([0.1, 0.5, 0.82, 0.9, 0.92]) == 4
    assert rounds_to_fraction([]) is None and rounds_to_fraction([0.0]) is None
    assert time_to_90pct({"ACC": [0.2, 0.9, 1.0, 1.0]}, 8.0) == {"rounds_to_90pct_ACC": 2.0, "time_to_90pct_ACC_s": 4.0}
    assert time_to_90pct({"objective": [1.0]}, 8.0) == {}


def test_the_tour_ends_with_a_private_slice_at_epsilon_1_and_4_with_fed_dp_kmeans():
    import pathlib

    import yaml

    from fedclust.pipelines.grids import tour_benchmark

    conf = yaml.safe_load((pathlib.Path(__file__).parents[1] / "conf/base/parameters_tour.yml").read_text())
    cfg = conf["tour_benchmark"]["config"]
    assert cfg["epsilons"] == [1.0, 4.0] and "fed_dp_kmeans" in cfg["methods"]
    names = {n.name for n in tour_benchmark().nodes}
    assert {"tour_benchmark.run_cells", "tour_benchmark.report"} <= names


def test_the_clustered_fl_half_gets_its_own_test_accuracy_tables(records):
    def cfl(method, eps, acc, seed):
        return {
            "name": f"{method}/{eps}/{seed}",
            "tags": {
                "family": "clustered_fl",
                "status": "ok",
                "dataset": "digits",
                "partition": "rotation(4 groups)",
                "epsilon": eps,
                "method": method,
                "trust_model": "central",
            },
            "params": {"seed": seed},
            "metrics": {"test_accuracy": acc, "client_ACC": 1.0},
        }

    recs = records + [
        cfl("rr_cluster", "8", 0.70, 0),
        cfl("rr_cluster", "8", 0.74, 1),
        cfl("dp_ifca", "8", 0.6, 0),
        cfl("dp_ifca", "8", 0.62, 1),
    ]
    table = report.method_table(recs, family="clustered_fl", metric="test_accuracy")
    assert list(table["method"]) == ["rr_cluster", "dp_ifca"] and list(table["best"]) == [True, False]
    assert table["ACC"].iloc[0] == pytest.approx(0.72)
    out = report.build(recs)
    assert "clustered FL, test accuracy" in out["markdown"] and "| ε | method | test acc (95% CI) |" in out["markdown"]
    assert "test acc (95% CI)" in out["html"] and len(report.method_table(recs)) == 7  # data half unchanged
    assert "rr_cluster: protects any one client" in out["statements"]["rr_cluster"]
    assert "dp_ifca: protects any one client" in out["statements"]["dp_ifca"]  # no registry entry of its own
