"""Trust models: where the noise of a federated sum is added, and how much the sum carries."""

import numpy as np
import pytest

from fedclust.privacy.release import TRUST_MODELS, check_trust_model, release_sum, sum_noise_std

K, STD, N = 25, 2.0, 40000


@pytest.mark.parametrize(
    "trust_model,distributed,expected",
    [
        ("local", False, STD * 5.0),  # K independent client draws: sqrt(K) x std on the sum
        ("secure_aggregation", False, STD),  # one draw on the aggregated sum
        ("secure_aggregation", True, STD),  # K shares of std / sqrt(K): the same total
        ("central", False, STD),
    ],
)
def test_the_released_sum_carries_the_noise_of_its_trust_model(trust_model, distributed, expected):
    total = np.full(N, 3.0)
    out = release_sum(total, STD, K, trust_model, np.random.default_rng(0), distributed=distributed)
    assert (out - total).mean() == pytest.approx(0.0, abs=4 * expected / np.sqrt(N))
    assert (out - total).std() == pytest.approx(expected, rel=0.02)
    assert sum_noise_std(STD, K, trust_model) == pytest.approx(expected)


def test_no_noise_without_a_std_or_a_generator():
    total = np.arange(5.0)
    np.testing.assert_array_equal(release_sum(total, 0.0, K, "local", np.random.default_rng(0)), total)
    np.testing.assert_array_equal(release_sum(total, 1.0, K, "local", None), total)


def test_unknown_or_unsupported_models_are_refused():
    with pytest.raises(ValueError, match="one of"):
        check_trust_model("trusted_server")
    with pytest.raises(ValueError, match="dp_fedc supports"):
        check_trust_model("secure_aggregation", ("local",), method="dp_fedc")
    assert set(TRUST_MODELS) == {"local", "secure_aggregation", "central"}
