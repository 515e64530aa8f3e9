"""The method registry's typed configs: one source of defaults (equal to conf/base), unknown keys,
wrong types, zero counts and absurd sizes are errors naming the parameter."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from fedclust.options import _SAME
from fedclust.params_check import ParameterError
from fedclust.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[2]


def _base_train_groups() -> dict[str, dict]:
    """``<method>: <train dict>`` of every conf/base/parameters_*.yml."""
    out = {}
    for path in sorted((ROOT / "conf" / "base").glob("parameters*.yml")):
        for name, group in (yaml.safe_load(path.read_text()) or {}).items():
            if isinstance(group, dict) and isinstance(group.get("train"), dict):
                out[name] = group["train"]
    return out


def test_every_method_pipeline_group_is_registered():
    assert set(_base_train_groups()) == set(REGISTRY)


def _differences(method: str, yaml_train: dict) -> list[str]:
    """Every difference between ``<method>.train`` in conf/base and the defaults of the method's
    config (for a clustering method: those of its library options class, the one home of each)."""
    config = REGISTRY[method].config
    defaults = config.defaults()
    home = f"{config.OPTIONS.__module__}.{config.OPTIONS.__name__}" if config.OPTIONS else config.__name__
    out = [f"{method}.train.{key}: in conf/base, not a key of {home}" for key in yaml_train.keys() - defaults.keys()]
    out += [
        f"{method}.train.{key}: a key of {home}, missing in conf/base" for key in defaults.keys() - yaml_train.keys()
    ]
    for key in yaml_train.keys() & defaults.keys():
        value, default = yaml_train[key], defaults[key]
        if value != default or type(value) is not type(default):
            out.append(f"{method}.train.{key}: conf/base says {value!r}, {home} {default!r}")
    return out


@pytest.mark.parametrize("method", list(REGISTRY))
def test_config_defaults_equal_the_yaml_defaults(method):
    yaml_train = _base_train_groups()[method]
    assert _differences(method, yaml_train) == []
    # and the YAML group itself is valid (null means default: it builds the default config)
    assert REGISTRY[method].config_from(yaml_train) == REGISTRY[method].config()


def test_the_yaml_check_names_every_difference():
    yaml_train = {**_base_train_groups()["fkm"], "rounds": 21, "roundz": 5}
    del yaml_train["project"]
    assert sorted(_differences("fkm", yaml_train)) == [
        "fkm.train.project: a key of fedclust.clustering.fkm.FKMOptions, missing in conf/base",
        "fkm.train.rounds: conf/base says 21, fedclust.clustering.fkm.FKMOptions 20",
        "fkm.train.roundz: in conf/base, not a key of fedclust.clustering.fkm.FKMOptions",
    ]


@pytest.mark.parametrize("method", list(REGISTRY))
def test_a_config_is_generated_from_its_library_options(method):
    """Every key of the library options class that a pipeline run sets (``param(conf=True)``) is a key
    of the config with the same default (or the declared ``conf_default``), bounds and doc: adding an
    option to the options class adds it to ``<method>.train``, and a run passes it to the library."""
    config = REGISTRY[method].config
    options = config.OPTIONS
    assert options is not None
    if REGISTRY[method].family == "clustering":  # in the method's module (clustered FL: clustered_fl.options)
        assert REGISTRY[method].library_run.__module__ == options.__module__
    mine = config.fields()
    for name, field in options.fields().items():
        meta = dict(field.metadata)
        if not meta["conf"] or name not in mine or mine[name].metadata != field.metadata:
            continue  # a value the run supplies, dropped, or a key the registry declares itself
        want = meta["conf_default"] if meta["conf_default"] is not _SAME else options.defaults()[name]
        assert config.defaults()[name] == want, name
    run_keys = [n for n, f in options.fields().items() if f.metadata["conf"]]
    assert set(run_keys) - set(mine) <= {"project"}  # fed_dp_kmeans always projects
    cfg = config()
    lib = cfg.options()
    for name in run_keys:
        if name in mine and mine[name].metadata == options.fields()[name].metadata and getattr(cfg, name) is not None:
            assert getattr(lib, name) == getattr(cfg, name), name


def test_a_run_value_overrides_the_config_and_excluded_keys_keep_the_library_default():
    cfg = REGISTRY["fedsc"].config_from({"rounds": 3})
    lib = cfg.options(exclude=("data_domain",), seed=4)
    assert (lib.rounds, lib.seed, lib.d_max, lib.data_domain) == (3, 4, 500, None)


def test_resolved_disagreements_take_the_documented_values():
    """RR-Cluster's B and participation were 4 / 0.5 in YAML and 8 / 0.1 in code."""
    cfg = REGISTRY["rr_cluster"].config()
    assert (cfg.B, cfg.participation) == (4, 0.5)
    assert REGISTRY["fedsc"].config().mechanism == "accountant"


@pytest.mark.parametrize(
    "method, given, message",
    [
        ("fkm", {"roundz": 5}, "unknown parameter 'fkm.train.roundz'; did you mean 'fkm.train.rounds'?"),
        ("rr_cluster", {"participaton": 0.5}, "did you mean 'rr_cluster.train.participation'?"),
        ("fkm", {"rounds": "abc"}, "fkm.train.rounds must be null (the default) or an integer >= 1, got 'abc'"),
        ("fkm", {"rounds": 0}, "fkm.train.rounds must be null (the default) or an integer >= 1, got 0"),
        ("dkm", {"k": 0}, "dkm.train.k must be null (the default) or an integer >= 1, got 0"),
        ("fkm", {"clip": True}, "fkm.train.clip must be a number, got true"),
        ("fkm", {"clip": -1.0}, "fkm.train.clip must be > 0, got -1.0"),
        (
            "dp_fedc",
            {"budget": "papr"},
            "dp_fedc.train.budget must be one of ['accountant', 'paper'], got 'papr'; did you mean 'paper'?",
        ),
        ("dp_fedc", {"q2": 0}, "dp_fedc.train.q2 must be 'diminishing' or an integer >= 1, got 0"),
        ("fedsc", {"mechanism": "laplace"}, "fedsc.train.mechanism must be one of"),
        ("fedsc", {"factor_budget_z": 1.0}, "fedsc.train.factor_budget_z must be < 1, got 1.0"),
        ("ifca", {"model": 3}, "ifca.train.model must be a group of parameters, got 3"),
        ("cfl_mgd", {"model": {"type": "rnn"}}, "cfl_mgd.train.model.type must be one of"),
        (
            "fedc_gds",
            {"clients_per_round": 2.5},
            "fedc_gds.train.clients_per_round must be null (the default) or an integer >= 1, got 2.5",
        ),
    ],
)
def test_bad_values_are_errors_naming_the_parameter(method, given, message):
    with pytest.raises(ParameterError) as err:
        REGISTRY[method].config_from(given)
    assert message in str(err.value)


def test_all_problems_are_reported_at_once_and_null_means_default():
    with pytest.raises(ParameterError, match="2 invalid parameters") as err:
        REGISTRY["fkm"].config_from({"roundz": 5, "clip": "x"})
    assert "fkm.train.roundz" in str(err.value) and "fkm.train.clip" in str(err.value)
    cfg = REGISTRY["fkm"].config_from({"rounds": None, "clip": None, "k": 3})
    assert (cfg.rounds, cfg.clip, cfg.k) == (20, None, 3)
    assert REGISTRY["fkm"].config_from({"rounds": 7.0}).rounds == 7  # an integral float is an int


def test_configs_are_frozen():
    cfg = REGISTRY["fkm"].config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.rounds = 3


def test_rr_threshold_feasibility_names_B():
    cfg = REGISTRY["rr_cluster"].config_from({"B": 6, "participation": 0.5})
    msg = cfg.feasibility(n_clients=40, k=4)
    assert len(msg) == 1 and "rr_cluster.train.B=6 is infeasible" in msg[0] and "B <= m/k = 5" in msg[0]
    assert cfg.replace(B=5).feasibility(n_clients=40, k=4) == []
    assert cfg.replace(method="dp_ifca").feasibility(n_clients=40, k=4) == []  # no rebalancing: B unused


# ---- absurd sizes ---------------------------------------------------------------------------------


def _small_data(n=60, m=4, seed=0):
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(c, 0.3, size=(n // 3, m)) for c in (0.0, 2.0, 4.0)])
    ds = SimpleNamespace(X=X, y=np.repeat(np.arange(3), n // 3), n_classes=3, images=None)
    return ds, SimpleNamespace(client=np.arange(n) % 5)


@pytest.mark.parametrize(
    "method, given, message",
    [
        ("fedsc", {"d": 500, "rounds": 2}, "fedsc.train.d=500 exceeds the number of samples n (60)"),
        ("fkm", {"k": 100}, "fkm.train.k=100 exceeds the number of samples n (60)"),
        ("fkm", {"clients_per_round": 9}, "fkm.train.clients_per_round=9 exceeds the number of clients (5)"),
        ("dp_fedc", {"clients_per_round": 12}, "dp_fedc.train.clients_per_round=12 exceeds the number of clients (5)"),
        ("fzkm", {"k": 61}, "fzkm.train.k=61 exceeds the number of samples n (60)"),
    ],
)
def test_absurd_sizes_are_refused_before_the_run(method, given, message):
    spec = REGISTRY[method]
    ds, part = _small_data()
    cfg = spec.config_from(given)
    noise = spec.calibrate({"epsilon": None}, cfg, ds, part)
    with pytest.raises(ParameterError) as err:
        spec.run(ds, part, noise, cfg, 0)
    assert message in str(err.value)


@pytest.mark.parametrize("method", list(REGISTRY))
def test_every_spec_names_its_library_run(method):
    spec = REGISTRY[method]
    fn = spec.library_run
    assert callable(fn) and spec.library == f"{fn.__module__}:{fn.__name__}"
    assert spec.family in ("clustering", "clustered_fl")


def test_the_benchmark_and_the_registry_share_one_gaussians_per_round_table():
    from fedclust.grids import benchmark

    assert benchmark.PRIVATE == {"fkm": 1, "fedsc": None, "dp_fedc": None, "fed_dp_kmeans": None, "fzkm": 1, "dk_pp": 1}
    assert all(REGISTRY[m].mechanisms_per_round == z for m, z in benchmark.PRIVATE.items())


def test_the_registry_is_library_code_without_kedro_or_torch_at_import():
    import subprocess
    import sys

    code = (
        "import sys, fedclust.registry, fedclust.registry.clustering, fedclust.registry.clustered_fl; "
        "print(sorted(m for m in ('kedro', 'torch', 'fedclust.pipelines') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_config_validates_itself_however_it_is_built():
    """The constructor and replace() check kinds, bounds and the checks between fields, exactly as
    from_params does; a whole number given as a float becomes an int."""
    from fedclust.params_check import ParameterError
    from fedclust.registry.configs import FedSCConfig, FKMConfig

    with pytest.raises(ParameterError, match=r"train\.rounds must be null \(the default\) or an integer >= 1"):
        FKMConfig(rounds=0)
    with pytest.raises(ParameterError, match=r"rounds"):
        FKMConfig().replace(rounds=-2)
    with pytest.raises(ParameterError, match=r"d=600 exceeds .*d_max=500"):
        FedSCConfig(d=600, d_max=500)
    cfg = FKMConfig(rounds=3.0)
    assert cfg.rounds == 3 and isinstance(cfg.rounds, int)
    with pytest.raises(ParameterError, match=r"fkm\.train\.rounds"):
        FKMConfig.from_params({"rounds": 0}, where="fkm.train")


def test_dk_pp_seeding_defaults_to_its_dp_variant_when_private():
    """seeding_rounds null: 0 in a private run (only that is DP), 5 capped at rounds - 2 otherwise; a
    private run with the defaults passes the rounds check and reports no non-DP step."""
    from fedclust.registry.checks import method_problems
    from fedclust.registry.clustering import non_dp_steps
    from fedclust.registry.configs import DKPPConfig

    cfg = DKPPConfig()
    assert cfg.seeding_for(True) == 0 and cfg.seeding_for(False) == 5
    assert DKPPConfig(rounds=4).seeding_for(False) == 2
    assert DKPPConfig(seeding_rounds=3).seeding_for(True) == 3
    assert non_dp_steps("dk_pp", cfg) == []
    assert "k-means|| seeding (3 rounds)" in non_dp_steps("dk_pp", DKPPConfig(seeding_rounds=3))[0]
    assert method_problems({"privacy": {"epsilon": 4.0}, "dk_pp": {"train": {}}}, ["params:dk_pp.train"]) == []
