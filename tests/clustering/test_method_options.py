"""The library methods take one options object (or its fields as keywords), validated when built."""

import numpy as np
import pytest

from fedclust.clustering import dk_pp, dkm, fed_dp_kmeans, fkm, fzkm
from fedclust.options import ParameterError

METHODS = {
    "fkm": (fkm.run, fkm.FKMOptions),
    "fzkm": (fzkm.run, fzkm.FZKMOptions),
    "dk_pp": (dk_pp.run, dk_pp.DKPPOptions),
    "dkm": (dkm.run, dkm.DKMOptions),
}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 4, (3, 2))
    X = np.vstack([c + rng.normal(0, 0.5, (40, 2)) for c in centres])
    client = np.arange(X.shape[0]) % 6
    return X, client


@pytest.mark.parametrize("name", sorted(METHODS))
def test_options_object_and_keywords_give_the_same_run(data, name):
    run, Options = METHODS[name]
    X, client = data
    settings = {"rounds": 4, "clients_per_round": 4, "seed": 3, "noise_multiplier": 0.5, "clip": 10.0}
    if name == "dk_pp":
        settings["seeding_rounds"] = 1
    by_keywords = run(X, client, 3, **settings)
    by_object = run(X, client, 3, Options(**settings))
    # keywords laid over an object win over its fields
    overridden = run(X, client, 3, Options(**{**settings, "seed": 99}), seed=3)
    np.testing.assert_array_equal(by_keywords.centroids, by_object.centroids)
    np.testing.assert_array_equal(by_keywords.centroids, overridden.centroids)
    assert not np.array_equal(by_keywords.centroids, run(X, client, 3, **{**settings, "seed": 4}).centroids)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_an_unknown_option_names_the_nearest_valid_one(data, name):
    run, _ = METHODS[name]
    X, client = data
    with pytest.raises(ParameterError, match="unknown option 'roundz'.*did you mean 'rounds'"):
        run(X, client, 3, roundz=3)


def test_options_validate_when_built():
    with pytest.raises(ParameterError, match=r"fkm\.rounds"):
        fkm.FKMOptions(rounds=0)
    with pytest.raises(ParameterError, match=r"fzkm\.fuzzifier must be > 1"):
        fzkm.FZKMOptions(fuzzifier=1.0)
    with pytest.raises(ParameterError, match=r"trust_model must be one of.*did you mean 'central'"):
        dk_pp.DKPPOptions(trust_model="centrl")
    # checks between fields
    with pytest.raises(ParameterError, match=r"fkm\.clip must be > 0 when noise_multiplier > 0"):
        fkm.FKMOptions(noise_multiplier=1.0)
    with pytest.raises(ParameterError, match=r"dk_pp\.rounds must be >= seeding_rounds \+ 1 = 6"):
        dk_pp.DKPPOptions(rounds=5, seeding_rounds=5)
    with pytest.raises(ParameterError, match="give server_rows or server_data, not both"):
        fed_dp_kmeans.FedDPKMeansOptions(server_rows=[0], server_data=np.zeros((1, 2)))


def test_an_explicit_none_keeps_the_documented_rule(data):
    """``clients_per_round=None`` means every client (not the options' default of 30)."""
    X, client = data
    result = dkm.run(X, client, 3, rounds=2, clients_per_round=None)
    assert result.info["clients_per_round"] == 6
    assert dkm.DKMOptions().clients_per_round == 30
