"""The benchmark report's numbers: the confidence interval, the best marker, the order of the rows,
the parent run's metrics and the self-contained page."""

import html
import math

import pytest
from scipy import stats

from benchmark_records import data_record
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
    return data_record(
        method,
        seed,
        metrics,
        ds=ds,
        eps=eps,
        part=part,
        tm=tm,
        status=status,
        params={"delta": 1e-5},
        name=f"{method}/{eps}/{seed}",
    )


def test_the_interval_is_a_t_interval_on_the_logit_scale_mapped_back():
    x = [0.5, 0.7, 0.9]
    mean, lo, hi = report.logit_t_interval(x)
    z = [math.log(p / (1 - p)) for p in x]
    zm = sum(z) / 3
    sz = math.sqrt(sum((v - zm) ** 2 for v in z) / 2)  # sample std (ddof 1) of the logits
    half = stats.t.ppf(0.975, 2) * sz / math.sqrt(3)
    assert mean == pytest.approx(0.7)  # the shown ACC is the plain mean of the seeds
    assert lo == pytest.approx(1 / (1 + math.exp(-(zm - half))))
    assert hi == pytest.approx(1 / (1 + math.exp(-(zm + half))))
    # the plain t-interval here would be 0.7 ± 0.497, past 1; this one stays inside [0, 1]
    assert 0.0 < lo < mean < hi < 1.0
    assert math.isnan(report.logit_t_interval([0.4, 0.6])[1]) and math.isnan(report.logit_t_interval([0.4])[2])
    assert report.logit_t_interval([0.4, float("nan"), 0.6])[0] == pytest.approx(0.5)  # NaNs dropped
    assert report.logit_t_interval([1.0, 1.0, 1.0]) == (1.0, 1.0, 1.0)  # no spread: a point


@pytest.mark.parametrize(
    "values",
    [
        [0.02, 0.5, 0.98],  # the widest spread three seeds can have short of the ends
        [0.0, 0.0, 1.0],  # the ends themselves (clipped before the logit)
        [0.99, 1.0, 1.0],
        [0.01, 0.02, 0.0],
        [0.3, 0.31, 0.9, 0.05],
    ],
)
def test_every_interval_of_three_or_more_seeds_lies_in_0_1_and_holds_the_mean(values):
    mean, lo, hi = report.logit_t_interval(values)
    assert 0.0 <= lo <= mean <= hi <= 1.0


def three_seeds(method, eps, accs, **kw):
    return [rec(method, eps, a, seed, **kw) for seed, a in enumerate(accs)]


def test_three_seeds_a_single_best_only_when_no_other_interval_overlaps_its_own():
    clear = three_seeds("fkm", "4", [0.80, 0.82, 0.81]) + three_seeds("dp_fedc", "4", [0.50, 0.52, 0.51])
    table = report.method_table(clear)
    assert dict(zip(table["method"], table["mark"])) == {"fkm": "*", "dp_fedc": ""}
    for r in table.itertuples():
        assert 0.0 <= r.ACC_lo <= r.ACC <= r.ACC_hi <= 1.0
    # overlapping intervals: both tied for best, neither gets the single best mark
    close = three_seeds("fkm", "4", [0.70, 0.80, 0.75]) + three_seeds("dp_fedc", "4", [0.72, 0.74, 0.76])
    table = report.method_table(close)
    assert set(table["mark"]) == {"≈"} and not table["best"].any()
    fkm = table[table["method"] == "fkm"].iloc[0]
    dpf = table[table["method"] == "dp_fedc"].iloc[0]
    assert fkm["ACC_lo"] <= dpf["ACC_hi"] and dpf["ACC_lo"] <= fkm["ACC_hi"]  # what the tie means
    lines = report.terminal_lines(table)
    assert "≈ fkm" in "\n".join(lines) and "ACC [95% CI]" in lines[1]
    md = report.build(close, title="t")["markdown"]
    assert "Fewer than 3 seeds" not in md and "logit scale" in md
    assert "| ε | method | ACC [95% CI] |" in md and "0.750 [" in md


def test_two_seeds_give_no_interval_a_line_that_says_so_and_no_single_best_within_noise(records):
    table = report.method_table(records)
    assert table["ACC_lo"].isna().all() and table["ACC_hi"].isna().all()  # no CI from 2 seeds
    marks = {(e, m): k for e, m, k in zip(table["epsilon"], table["method"], table["mark"])}
    # at 4: fed_dp_kmeans 0.72/0.74 lies inside fkm's seeds 0.60..0.80: within noise, a tie
    assert marks[("4", "fed_dp_kmeans")] == "≈" and marks[("4", "fkm")] == "≈"
    # at 1: fkm's seeds 0.30/0.40 are clear of dp_fedc's 0.12/0.13: one best
    assert marks[("1", "fkm")] == "*" and marks[("1", "dp_fedc")] == ""
    # means closer than the noise floor are a tie even where the seeds' ranges do not overlap
    near = [rec("fkm", "4", 0.700, 0), rec("fkm", "4", 0.702, 1), rec("dk_pp", "4", 0.690, 0)]
    near += [rec("dk_pp", "4", 0.695, 1)]
    assert set(report.method_table(near)["mark"]) == {"≈"}
    out = report.build(records, title="t")
    assert "Fewer than 3 seeds: no confidence interval" in out["markdown"]
    assert "Fewer than 3 seeds: no confidence interval" in out["html"]
    assert "ACC (mean)" in out["markdown"] and "±" not in out["markdown"] and "[95% CI]" not in out["markdown"]
    assert "logit scale" not in out["markdown"]  # no interval rule where no row has an interval
    assert any("Fewer than 3 seeds" in line for line in out["terminal"])
    assert out["tags"]["best_method_eps_4"] == "tie: fed_dp_kmeans, fkm"
    assert out["tags"]["best_method_eps_1"] == "fkm" and "no interval" in out["tags"]["best_rule"]


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


def test_rows_are_sorted_by_epsilon_then_acc(records):
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
    row = table[(table["method"] == "dp_fedc")].iloc[0]
    assert row["at_chance"] and row["trust_model"] == "local" and row["n"] == 2
    fkm4 = table[(table["method"] == "fkm") & (table["epsilon"] == "4")].iloc[0]
    assert fkm4["ACC"] == pytest.approx(0.70)
    assert fkm4["bytes_up_per_client"] == 2400.0 and not fkm4["at_chance"]
    assert fkm4["compute_time_s"] == 0.5 and "cell_wall_time_s" not in table.columns  # the method's own cost
    na = table[(table["method"] == "kmeans") & (table["epsilon"] == "4")].iloc[0]
    assert na["status"] == "not applicable" and na["mark"] == "" and na["n"] == 0


def test_parent_run_metrics_name_the_best_per_epsilon_and_count_the_runs(records):
    metrics, tags = report.parent_run_summary(records)
    assert metrics["best_ACC_eps_4"] == pytest.approx(0.73) and tags["best_method_eps_4"] == "tie: fed_dp_kmeans, fkm"
    assert tags["best_method_eps_inf"] == "fkm" and tags["best_method_eps_1"] == "fkm"
    assert metrics["runs_done"] == 12 and metrics["runs_not_applicable"] == 1 and metrics["runs_failed"] == 0
    assert metrics["runs_at_chance"] == 2
    assert all(math.isfinite(v) and abs(v) < 1e300 for v in metrics.values())


def test_the_report_is_one_self_contained_page_with_table_plot_and_one_legend_per_protection(records):
    recs = records + [rec("fzkm", "4", 0.5, s) for s in (0, 1)] + [rec("fzkm", "1", 0.2, s) for s in (0, 1)]
    out = report.build(recs, title="t")
    page = out["html"]
    assert page.count("<img") == 1 and "data:image/png;base64," in page
    assert "src='http" not in page and "<script" not in page and "<link" not in page  # nothing to fetch
    assert "<tr class='tie'>" in page and "<tr class='best'>" in page and "AT CHANCE" in page
    assert "fed_dp_kmeans: protects any one sample" in out["statements"]["fed_dp_kmeans"]
    assert "Trust model local" in out["statements"]["dp_fedc"] and "not private" in out["statements"]["kmeans"]
    # one legend entry per distinct sentence, naming its methods; each sentence once in the page
    legend = {e["label"]: e["methods"] for e in out["legend"]}
    assert legend["P1"] == ["fkm", "fed_dp_kmeans", "fzkm"] and legend["P2"] == ["dp_fedc"]
    sentence = out["legend"][0]["text"]
    assert page.count(html.escape(sentence)) == 1 and out["markdown"].count(sentence) == 1
    assert "| ε | method | ACC (mean) |" in out["markdown"] and "| ≈ fed_dp_kmeans |" in out["markdown"]
    rows = [line for line in out["markdown"].splitlines() if line.startswith("| 4 | ")]
    assert all("| P1 |" in r for r in rows[:-1]) and "| none |" in rows[-1]  # kmeans: not applicable
    assert "| inf | * fkm |" in out["markdown"] and "cell s" not in out["markdown"]
    assert "1.79769" not in page and "e+308" not in out["markdown"]


def test_the_header_lists_what_ran_not_what_was_configured(records):
    lines = report.ran_lines(records)
    assert lines == [
        "data clustering: data sets digits; partitions iid; ε in {1, 4, ∞ (no DP)}; 2 seed(s); methods "
        "fkm, fed_dp_kmeans, dp_fedc, kmeans (12 runs done)"
    ]
    private_only = [r for r in records if r["tags"]["epsilon"] != "inf"]
    out = report.build(private_only, title="t")
    assert "ε in {1, 4};" in out["markdown"] and "clustered FL" not in out["markdown"]
    # no empty "no DP" slot when ε = ∞ did not run
    table = out["table"]
    fig = report.privacy_utility_figure(table, "digits")
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["1", "4"] and "★" not in fig.axes[0].get_xlabel()
    fig = report.privacy_utility_figure(report.method_table(records), "digits")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["1", "4", "no DP"]


def test_the_header_says_per_data_set_whether_its_scaling_read_the_data():
    def scaled(ds, scaling, reads):
        r = rec("fkm", "inf", 0.5, 0, ds=ds)
        r["params"].update(scaling=scaling, scaling_reads=reads)
        return r

    recs = [
        scaled("digits", "pixel", "public"),
        scaled("mine", "per_feature", "data"),
        rec("fkm", "inf", 0.5, 0, ds="old"),
    ]
    assert report.scaling_lines(recs) == [
        "scaling of digits: divided by its declared pixel range, public numbers (nothing read from the data)",
        "scaling of mine: min-max by each feature's own min and max, statistics of every client's data that no ε covers",
    ]  # a record from before the scaling was recorded says nothing


def test_the_terminal_table_lists_every_method_fits_100_columns_and_keeps_the_order(records):
    lines = report.terminal_lines(report.method_table(records))
    assert lines and max(len(line) for line in lines) <= 100
    body = [line for line in lines if line.startswith(("1 ", "4 ", "inf "))]
    assert "AT CHANCE" in body[1] and "sec-agg" in body[0]  # dp_fedc at 1: at chance
    assert [line.split()[0] for line in body] == ["1", "1", "4", "4", "4", "inf", "inf"]
    assert body[0].split()[1:3] == ["*", "fkm"]
    assert body[4].split()[1:3] == ["kmeans", "n/a"] and "not applicable" in body[4]  # listed, not left out


def test_the_run_labels_say_what_ran():
    from fedclust.hooks.summary import add_setup_time
    from fedclust.pipelines.mlflow_io import kedro_command, needs_config_file, run_address

    scalar = {
        "pipeline_names": ["benchmark"],
        "env": None,
        "tags": [],
        "node_names": [],
        "runtime_params": {"benchmark": {"config": {"seeds": 1, "resume": False}}},
    }
    assert not needs_config_file(scalar)
    assert kedro_command(scalar) == (
        "kedro run --pipelines=benchmark --params=benchmark.config.seeds=1,benchmark.config.resume=False"
    )
    assert kedro_command({"pipeline_names": ["__default__"]}) == "kedro run"
    metrics = {"wall_time_s": 2.0}
    add_setup_time(metrics, 0.5)  # the data and partition steps count
    assert metrics == {"wall_time_s": 2.5, "train_time_s": 2.0}
    assert run_address("http://h:5000/", "1", "ab") == "http://h:5000/#/experiments/1/runs (run ab)"
    local = run_address("sqlite:///mlflow.db", "1", "ab")  # the UI to start, then the experiment's runs view
    assert local == "make mlflow-ui, then open http://127.0.0.1:5000/#/experiments/1/runs (run ab)"
    other = run_address("sqlite:///elsewhere/other.db", "1", "ab")  # another store: start the UI on it
    assert other.startswith(".venv/bin/mlflow ui --backend-store-uri sqlite:///elsewhere/other.db, then open")


def test_a_command_with_lists_names_a_run_config_file_that_kedro_reads_back(tmp_path):
    import yaml
    from kedro.framework.cli.project import run as kedro_run
    from kedro.framework.cli.utils import _config_file_callback

    from fedclust.pipelines.mlflow_io import kedro_command, kedro_run_config, needs_config_file

    params = {"benchmark": {"config": {"methods": ["fkm", "kmeans"], "epsilons": [1.0, 4.0], "seeds": 2}}}
    run_params = {"pipeline_names": ["benchmark"], "tags": ["grid"], "runtime_params": params}
    assert needs_config_file(run_params)
    assert kedro_command(run_params, "kedro_run_config.yml") == "kedro run --config=kedro_run_config.yml"
    path = tmp_path / "kedro_run_config.yml"
    path.write_text(yaml.safe_dump(kedro_run_config(run_params)))
    # what Kedro's `kedro run --config=<file>` does with the file: the same pipelines, tags and params
    ctx = kedro_run.make_context("run", [], resilient_parsing=True)
    _config_file_callback(ctx, None, str(path))
    assert ctx.default_map == {"pipelines": "benchmark", "tags": "grid", "params": params}


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


def test_the_clustered_fl_half_gets_its_own_complete_test_accuracy_tables(records):
    def cfl(method, eps, acc, seed, tm="central", client_at_chance=0.0):
        return {
            "name": f"{method}/{eps}/{seed}",
            "tags": {
                "family": "clustered_fl",
                "status": "ok",
                "dataset": "digits",
                "partition": "rotation(4 groups)",
                "epsilon": eps,
                "method": method,
                "trust_model": tm,
            },
            "params": {"seed": seed},
            "metrics": {
                "test_accuracy": acc,
                "test_accuracy_chance": 0.1,
                "client_ACC": 1.0 if not client_at_chance else 0.25,
                "client_ACC_chance": 0.25,
                "client_at_chance": client_at_chance,
                "rounds": 30.0,
                "compute_time_s": 2.0 + seed,
            },
        }

    recs = records + [
        cfl("rr_cluster", "8", 0.70, 0),
        cfl("rr_cluster", "8", 0.74, 1),
        cfl("dp_ifca", "8", 0.6, 0),
        cfl("dp_ifca", "8", 0.62, 1),
        cfl("fedavg", "inf", 0.5, 0, "none", 1.0),
        cfl("fedavg", "inf", 0.52, 1, "none", 1.0),
    ]
    table = report.method_table(recs, family="clustered_fl", metric="test_accuracy")
    assert list(table["method"]) == ["rr_cluster", "dp_ifca", "fedavg"]
    assert list(table["mark"]) == ["*", "", ""]  # fedavg alone at inf: nothing to be best among
    assert table["ACC"].iloc[0] == pytest.approx(0.72) and table["ACC_chance"].iloc[0] == pytest.approx(0.1)
    assert table["compute_time_s"].iloc[0] == pytest.approx(2.5) and table["rounds"].iloc[0] == 30
    # one model for every client: its client clustering is not applicable, not "at chance"
    assert table["client_flag"].iloc[2] == "n/a (one model)" and table["client_flag"].iloc[0] == ""
    na = dict(recs[-1], tags={**recs[-1]["tags"], "epsilon": "8", "status": "not applicable"}, metrics={})
    flags = report.method_table([*recs, na], family="clustered_fl", metric="test_accuracy")["client_flag"]
    assert list(flags) == ["", "", "", "n/a (one model)"]  # the not-applicable row (last at 8) shows no flag
    out = report.build(recs)
    md = out["markdown"]
    assert "clustered FL, test accuracy" in md and "| ε | method | test acc (mean) | chance | client ACC |" in md
    assert "| 8 | * rr_cluster | 0.720 | 0.100 | 1.000 | 0.250 |  | central | P" in md
    assert "| inf | fedavg | 0.510 | 0.100 |  |  | n/a (one model) | none | none |" in md
    assert "test acc (mean)" in out["html"] and len(report.method_table(recs)) == 7  # data half unchanged
    assert "rr_cluster: protects any one client" in out["statements"]["rr_cluster"]
    assert "dp_ifca: protects any one client" in out["statements"]["dp_ifca"]  # no registry entry of its own
    assert "clustered FL: data sets digits; partitions rotation(4 groups); ε in {8, ∞ (no DP)}" in md


def test_the_latest_report_is_a_file_at_a_stable_path_and_each_run_keeps_its_copy(tmp_path, monkeypatch):
    from kedro.io.core import Version

    from fedclust.pipelines.reporting.datasets import SAVED, MlflowTextDataset

    monkeypatch.chdir(tmp_path)
    latest = tmp_path / "benchmark" / "report.html"
    # an earlier layout: report.html was Kedro's folder of versions
    (latest / "2020-01-01T00.00.00.000Z").mkdir(parents=True)
    (latest / "2020-01-01T00.00.00.000Z" / "report.html").write_text("old")
    for version, text in (("2026-01-01T00.00.00.000Z", "first"), ("2026-01-02T00.00.00.000Z", "second")):
        ds = MlflowTextDataset(
            filepath=str(tmp_path / "benchmark" / "versions" / "report.html"),
            latest=str(latest),
            version=Version(None, version),
        )
        ds.save(text)
    assert latest.is_file() and latest.read_text() == "second"  # the newest report, a plain file
    copies = sorted((tmp_path / "benchmark" / "versions" / "report.html").glob("*/report.html"))
    assert [c.read_text() for c in copies] == ["old", "first", "second"]  # every run's copy, the old one kept
    assert SAVED[str(latest)] == str(latest)


def test_a_report_with_rr_cluster_says_when_it_helps_and_where_its_rows_sit():
    rr = {"tags": {"method": "rr_cluster"}, "metrics": {"expected_clients_per_cluster": 7.5}}
    (line,) = report.rr_guidance([rr, {"tags": {"method": "dp_ifca"}, "metrics": {}}])
    assert f"up to about {report.RR_HELPS_UP_TO:g}" in line and line.endswith("Here: 7.5 per cluster and round.")
    assert report.rr_guidance([{"tags": {"method": "fkm"}, "metrics": {}}]) == []


def test_the_plain_t_interval_is_the_students_t_half_width_and_serves_the_logit_interval():
    mean, half = report.t_interval([1.0, 2.0, float("nan"), 3.0])  # NaN dropped: n = 3, sd = 1
    assert mean == 2.0 and half == pytest.approx(stats.t.ppf(0.975, 2) / math.sqrt(3))
    assert report.t_interval([-4.0, 2.0])[0] == -1.0  # no bounds: a paired difference may be negative
    assert math.isnan(report.t_interval([0.5])[1]) and all(math.isnan(v) for v in report.t_interval([]))
