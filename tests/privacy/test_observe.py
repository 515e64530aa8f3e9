"""Release observers: an audit reads what a run released through a context, never a patched module."""

from __future__ import annotations

import threading

import numpy as np

from fedclust.clustering import fkm
from fedclust.privacy.observe import observe, observing, report


def test_an_observer_gets_copies_of_its_kinds_only_and_only_inside_its_block():
    x = np.zeros(3)
    with observe("a") as seen, observe() as everything:
        assert observing("a") and observing("b")
        report("a", x)
        report("b", (x, x))
        x[:] = 1.0  # a later change of the released array does not reach the record
    report("a", x)
    assert len(seen) == 1 and np.all(seen[0] == 0.0)
    assert [type(v) for v in everything] == [np.ndarray, tuple] and not observing("a")


def test_another_thread_does_not_report_to_this_block():
    with observe("a") as seen:
        t = threading.Thread(target=report, args=("a", np.ones(1)))
        t.start()
        t.join()
    assert seen == []


def test_fkm_reports_every_rounds_released_totals_and_they_give_its_centres():
    rng = np.random.default_rng(0)
    X = rng.random((60, 3))
    client = np.arange(60) % 4
    with observe("lloyd_totals") as seen:
        res = fkm.run(
            X, client, 2, rounds=3, noise_multiplier=0.5, clip=2.0, seed=1, count_threshold=0.0, project=False
        )
    assert len(seen) == 3  # one (sums, counts) release per round
    sums, counts = seen[-1]
    ok = counts >= 1.0
    np.testing.assert_allclose(res.centroids[ok], sums[ok] / counts[ok, None])  # the last round's means
