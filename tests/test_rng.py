import numpy as np
import pytest

from fedclust.rng import stream, streams


def test_same_seed_and_name_repeat_and_names_are_independent():
    a = stream(3, "noise").normal(size=5)
    b = stream(3, "noise").normal(size=5)
    c = stream(3, "sampling").normal(size=5)
    d = stream(4, "noise").normal(size=5)
    assert np.array_equal(a, b)
    assert not np.allclose(a, c)
    assert not np.allclose(a, d)


def test_streams_returns_every_standard_stream():
    s = streams(0)
    assert {"partition", "init", "sampling", "minibatch", "noise"} <= set(s)


@pytest.mark.parametrize("bad", [-1, 1.5, "0", True])
def test_bad_seed(bad):
    with pytest.raises((ValueError, TypeError)):
        stream(bad, "x")
