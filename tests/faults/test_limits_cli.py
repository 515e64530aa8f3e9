"""The limits and privacy parameters through a real ``kedro run``, as a user types them: each ends
with one ``fedclust: error:`` line (<= 5 on stderr, no traceback, exit 1) before any work and before
an MLflow run is opened, or, for the allowed cases, runs and says what it accepted."""

from __future__ import annotations

import pytest
from faultkit import TINY
from test_cli_faults import assert_fault


@pytest.mark.usefixtures("unchanged")
def test_delta_null_gets_one_line(project):
    outcome = project.run("--pipelines=fkm", f"--params={TINY},privacy.delta=null")
    assert_fault(outcome, "privacy.delta must be a number in (0, 1), got null", [])


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("delta", ["0.5", "0.01"])
def test_delta_at_least_one_over_n_is_refused_naming_one_over_n(project, delta):
    # TINY: 30 samples per class of digits' 10 = 300 samples, 1/n = 0.00333
    outcome = project.run("--pipelines=fkm", f"--params={TINY},privacy.epsilon=4,privacy.delta={delta}")
    # refused before the run opens: the pre-run check knows n from the parameters
    assert_fault(outcome, f"privacy.delta = {float(delta):g} is >= 1/n = 1/300 = 0.00333", [])
    assert "privacy.allow_large_delta: true" in outcome.first_error


@pytest.mark.usefixtures("unchanged")
def test_a_generated_data_set_that_cannot_fit_is_refused_with_its_estimate(project):
    big = "dataset.name=gaussian_mixture,dataset.options.n_samples=1000000000,dataset.options.n_features=1000"
    outcome = project.run("--pipelines=fkm", f"--params={big}", timeout=90)
    assert_fault(outcome, "dataset 'gaussian_mixture' (1,000,000,000 samples x 1,000 features) would need about", [])


@pytest.mark.usefixtures("unchanged")
def test_dp_fedc_q1_of_1e11_is_refused_before_it_runs(project):
    outcome = project.run("--pipelines=dp_fedc", "--params=dp_fedc.train.Q1=99999999999", timeout=90)
    assert_fault(outcome, "dp_fedc: the work estimate", [])
    assert "lower dp_fedc.train.Q1 (= 99999999999)" in outcome.first_error


def test_allow_large_delta_runs_with_a_warning(project):
    outcome = project.run(
        "--pipelines=fkm", f"--params={TINY},privacy.epsilon=4,privacy.delta=0.01,privacy.allow_large_delta=true"
    )
    assert outcome.code == 0, outcome.err[-3000:]
    assert [status for _, status in outcome.new_runs] == ["FINISHED"]
    assert "allow_large_delta" in " ".join((outcome.out + outcome.err).split())


# ---- a slice of the parameter fuzzer (tests/faults/test_fuzz_params.py) through kedro run ---------


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(
    "pipeline, params, first",
    [
        # a TypeError traceback from the pre-run check before the fuzzer found it
        ("ifca", "clustered_fl.data.ratios=true", "clustered_fl.data.ratios must be null or a list"),
        ("fkm", f"{TINY},privacy.epsilon=1,privacy.delta=abc", "invalid parameter: privacy.delta must be a number"),
        ("fkm", f"{TINY},dataset.label=[1]", "dataset.label must be null or a name (text), got [1]"),
    ],
)
def test_fuzzed_values_end_in_one_clean_line_through_kedro_run(project, pipeline, params, first):
    outcome = project.run(f"--pipelines={pipeline}", f"--params={params}", timeout=90)
    assert_fault(outcome, first, [])
