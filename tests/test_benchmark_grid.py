"""The cross-method benchmark: same budget for every private method, not-applicable cells kept."""

import math

import numpy as np
import pytest

from fedclust.clustering._common import default_init, initial_centroids
from fedclust.grids import benchmark
from fedclust.params_check import check_params
from fedclust.registry import REGISTRY


@pytest.fixture(scope="module")
def records():
    cfg = {
        "datasets": ["iris"],
        "partitions": [{"scheme": "iid"}],
        "n_clients": 5,
        "epsilons": [None, 4.0],
        "seeds": 1,
        "rounds": 4,
        "methods": ["fkm", "dk_pp", "dkm", "dp_fedc", "fedc_gds", "kmeans"],
        "clustered_fl": {
            "datasets": ["digits"],
            "methods": ["ifca", "dp_ifca"],
            "epsilons": [None, 8.0],
            "n_clients": 80,
            "rounds": 5,
            "B": 2,
        },
    }
    return benchmark.run_all(cfg)


def _find(records, method, eps):
    return [r for r in records if r["tags"]["method"] == method and r["tags"]["epsilon"] == eps]


def test_every_private_data_clustering_method_spends_the_same_accounted_budget(records):
    for method in ("fkm", "dk_pp", "dp_fedc"):  # DK++ in its DP variant (no k-means|| seeding)
        (rec,) = _find(records, method, "4")
        assert rec["metrics"]["epsilon_accountant"] == pytest.approx(4.0, rel=0.01), method
    (dkpp,) = _find(records, "dk_pp", "4")
    assert dkpp["params"]["seeding_rounds"] == 0
    (public,) = _find(records, "fkm", "inf")
    assert math.isinf(public["metrics"]["epsilon_accountant"])
    (dkpp_public,) = _find(records, "dk_pp", "inf")
    assert dkpp_public["params"]["seeding_rounds"] > 0


def test_dkm_has_no_dp_variant_and_is_not_applicable_under_a_budget(records):
    # Issue 13, point 5: the old benchmark gave DKM's coreset (private rows) a finite epsilon.
    (rec,) = _find(records, "dkm", "4")
    assert rec["tags"]["status"] == "not applicable" and "coreset" in rec["note"]
    (public,) = _find(records, "dkm", "inf")
    assert public["tags"]["status"] == "ok"


def test_private_cells_start_from_a_public_init_and_name_it(records):
    # Issue 13, point 1: the old benchmark passed k data rows as W^0 to every private method.
    for rec in records:
        if rec["tags"].get("family") != "data_clustering" or rec["tags"]["status"] != "ok":
            continue
        if "server_data" in rec["params"]:  # the k-means family starts from the server's public sample
            assert rec["params"]["init"] == "server_sample" and rec["params"]["server_data"].startswith("holdout")
            continue
        assert rec["params"]["init"] == ("data" if rec["tags"]["epsilon"] == "inf" else "uniform_box")
    X = benchmark.load("iris", None).X.astype(float)
    # the rule of the start the records name: uniform_box when private (no data read), data rows when not
    init = default_init(True)
    W_priv = initial_centroids(X, 3, 0, init=init, clip=8.0)
    W_priv2 = initial_centroids(X[::-1] * 0.5, 3, 0, init=init, clip=8.0)
    assert init == "uniform_box"
    np.testing.assert_array_equal(W_priv, W_priv2)  # does not read the data
    assert min(np.linalg.norm(X - w, axis=1).min() for w in W_priv) > 1e-6
    init_pub = default_init(False)
    W_pub = initial_centroids(X, 3, 0, init=init_pub, clip=8.0)
    assert init_pub == "data" and all(np.linalg.norm(X - w, axis=1).min() == 0 for w in W_pub)


def test_methods_without_a_private_variant_are_reported_not_applicable_never_skipped(records):
    for method in ("fedc_gds", "kmeans"):
        (rec,) = _find(records, method, "4")
        assert rec["tags"]["status"] == "not applicable" and rec["metrics"] == {}
    (ifca_private,) = _find(records, "ifca", "8")
    assert ifca_private["tags"]["status"] == "not applicable"
    summary = benchmark.tables(records)["summary"]
    row = summary[(summary["method"] == "kmeans") & (summary["epsilon"] == "4")].iloc[0]
    assert row["status"] == "not applicable" and row["ACC"] == "n/a"


def test_clustered_fl_half_reports_test_accuracy_and_client_clustering(records):
    cfl = benchmark.tables(records)["clustered_fl"]
    ok = cfl[cfl["status"] == "ok"]
    assert set(ok["method"]) == {"ifca", "dp_ifca"}
    assert (ok["test_accuracy_mean"] > 0.1).all()  # better than chance on 10 classes
    private = ok[ok["epsilon"] == "8"]
    assert (private["epsilon_accountant_mean"] < 8.0 * 1.01).all()


def test_unknown_method_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="valid"):
        benchmark.run({"methods": ["nope"]})


def test_a_config_listing_only_data_clustering_methods_runs_no_clustered_fl_cell():
    import copy

    base = _yaml("parameters_benchmark.yml")["benchmark"]["config"]
    # what a run config with `methods: [fkm, kmeans]` gives: Kedro merges it over conf/base, so the
    # clustered_fl settings of conf/base are still there
    cfg = copy.deepcopy(base) | {"methods": ["fkm", "kmeans"], "epsilons": [1.0, 4.0], "seeds": 1}
    assert cfg["clustered_fl"]  # its settings are present ...
    assert benchmark.clustered_fl_methods(cfg) == [] and benchmark.clustered_fl_cells(cfg) == []  # ... unused
    cells = benchmark.all_cells(cfg)
    assert cells and {c["kind"] for c in cells} == {"data"}
    assert {c["epsilon"] for c in cells} == {1.0, 4.0}
    # the default lists both halves' methods; clustered-FL methods alone run no data-clustering cell
    assert benchmark.clustered_fl_methods(base) == ["cfl_mgd", "ifca", "fedavg", "rr_cluster", "dp_ifca", "dp_fedavg"]
    only_cfl = copy.deepcopy(base) | {"methods": ["ifca", "rr_cluster"], "seeds": 1}
    kinds = [c["kind"] for c in benchmark.all_cells(only_cfl)]
    assert "data" not in kinds and {"cfl", "cfl_na", "rr"} == set(kinds)
    # clustered_fl.methods, where set, picks that half's methods; the run's parameter check takes it
    chosen = copy.deepcopy(cfg)
    chosen["clustered_fl"]["methods"] = ["fedavg"]
    assert benchmark.clustered_fl_methods(chosen) == ["fedavg"]
    reference = {"benchmark": {"config": base}}
    assert check_params({"benchmark": {"config": chosen}}, reference) == []
    with pytest.raises(ValueError, match="valid"):
        benchmark.clustered_fl_methods({"methods": ["fkm", "nope"]})


def test_every_cell_run_has_one_name_pattern_and_a_trust_model(records):
    for rec in records:
        t = rec["tags"]
        expected = f"{t['dataset']}/{t['partition']}/eps={t['epsilon']}/{t['method']}/seed={rec['params']['seed']}"
        assert rec["name"] == expected
        assert t["trust_model"] in ("none", "central", "local", "secure_aggregation"), rec["name"]
    cfl_ok = [r for r in records if r["tags"]["family"] == "clustered_fl" and r["tags"]["status"] == "ok"]
    assert {r["tags"]["trust_model"] for r in cfl_ok if r["tags"]["epsilon"] == "8"} == {"central"}
    for rec in cfl_ok:  # digits: 10 classes; the method's own run time and rounds
        assert rec["metrics"]["test_accuracy_chance"] == pytest.approx(0.1)
        assert rec["metrics"]["compute_time_s"] == rec["metrics"]["wall_time_s"] and rec["metrics"]["rounds"] == 5


def _yaml(name):
    import pathlib

    import yaml

    return yaml.safe_load((pathlib.Path(__file__).parents[1] / "conf" / "base" / name).read_text())


@pytest.mark.parametrize(
    "method, eps, conf",
    [
        ("fkm", 4.0, "parameters_fkm.yml"),
        ("dp_fedc", 2.0, "parameters_dp_fedc.yml"),
        ("fed_dp_kmeans", 1.0, "parameters_fed_dp_kmeans.yml"),
        ("fedc_gds", None, "parameters_fedc_mf.yml"),
    ],
)
def test_a_single_run_and_a_benchmark_cell_with_the_same_settings_give_the_same_result(method, eps, conf):
    # the benchmark used to keep its own dispatch table with other defaults (FKM's clip, FedSC's d_max)
    from fedclust.pipelines.data_processing.nodes import load_dataset
    from fedclust.pipelines.methods import node_functions
    from fedclust.pipelines.partitioning.nodes import split_clients

    train = _yaml(conf)[method]["train"]  # the single run's defaults, as conf/base gives them
    seed, privacy = 1, {"epsilon": eps, "delta": 1e-5, "accountant": "rdp"}
    dataset = load_dataset({"name": "iris", "scale": "minmax"}, {}, seed)
    partition = split_clients(dataset, {"scheme": "iid", "n_clients": 5, "options": {}}, seed)
    calibrate, run = node_functions(method)
    single = run(dataset, partition, calibrate(privacy, train, dataset, partition), train, seed)

    cfg = {
        "datasets": ["iris"],
        "partitions": [{"scheme": "iid"}],
        "n_clients": 5,
        "epsilons": [eps],
        "seeds": 2,
        "methods": [method],
        "clip": None,
        "trust_model": None,
    }
    cell = next(c for c in benchmark.cells(cfg) if c["seed"] == seed)
    (rec,) = benchmark.run_cell(cell)
    assert rec["tags"]["status"] == "ok"
    scores = benchmark.scores_with_chance(dataset.y, single.labels, seed=seed)
    for key in ("ACC", "NMI", "ARI"):
        assert rec["metrics"][key] == scores[key], key
    assert rec["metrics"]["uploaded_reals"] == float(single.uploaded_reals)
    assert rec["history"].get("objective") == single.history.get("objective")
    if eps is not None:
        assert rec["metrics"]["epsilon_accountant"] == pytest.approx(eps, rel=0.01)


def test_benchmark_settings_override_the_registry_defaults_only_where_set():
    cfg = {"clip": 8.0, "rounds": None, "method_settings": {"fedsc": {"d_max": 100}}}
    assert benchmark.method_settings("fkm", 4.0, cfg)["clip"] == 8.0
    assert "rounds" not in benchmark.method_settings("fkm", 4.0, cfg)  # null: the method's own default
    assert benchmark.method_settings("fedsc", None, cfg) == {"d_max": 100}  # FedSC has clip_tau, not clip
    dk_pp = REGISTRY["dk_pp"].config_from(benchmark.method_settings("dk_pp", 4.0, cfg))
    assert dk_pp.seeding_for(True) == 0  # the registry resolves its DP variant
    assert benchmark.method_rounds("fkm", 4.0, cfg) == 5 and benchmark.method_rounds("fkm", None, cfg) == 20
