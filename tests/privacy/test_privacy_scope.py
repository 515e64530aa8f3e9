"""Amendment A-1 in the reports: a non-DP step gives epsilon = inf and is named; a private report
says which outputs its epsilon covers and which are experimenter-side evaluation."""

from fedclust.privacy.events import GaussianRelease, non_dp_release
from fedclust.privacy.report import OUTSIDE, privacy_report


def test_non_dp_step_makes_epsilon_infinite_and_is_named():
    dp = GaussianRelease((2.0,), count=10, label="sums")
    rep = privacy_report(
        [dp, non_dp_release("initial centroids are private rows")], 1e-5, method="m", mechanism="gaussian"
    )
    assert rep["epsilon"] == "inf" and rep["private"] is False
    assert any("initial centroids are private rows" in n for n in rep["notes"])
    assert rep["covered_by_guarantee"] == []


def test_private_report_separates_covered_outputs_from_evaluation():
    rep = privacy_report(
        [GaussianRelease((2.0,), count=10)], 1e-5, method="m", mechanism="gaussian", outside=("eta diagnostics",)
    )
    assert rep["private"] is True and rep["covered_by_guarantee"]
    assert rep["outside_guarantee"][: len(OUTSIDE)] == list(OUTSIDE)
    assert rep["outside_guarantee"][-1] == "eta diagnostics"
    assert any("metrics" in o for o in rep["outside_guarantee"])
