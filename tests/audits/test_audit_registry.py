"""The audit registry and the privacy_audit grid: every case is reachable by name, the config is
checked, and the verdicts that stop the pipeline name the records that fail."""

import pytest

from fedclust.privacy.audit import audit_case


def test_fkm_canary_audit_sound_and_powerful():
    from fedclust.audits import get

    rep = audit_case(get("fkm"), n_runs=600)
    assert rep.case.epsilon == pytest.approx(1.0, rel=1e-3)
    assert rep.sound, rep.to_dict()
    assert rep.powerful, rep.to_dict()


def test_audit_registry_names_the_nearest_case():
    from fedclust.audits import get

    with pytest.raises(KeyError, match="did you mean 'fkm'"):
        get("fkmm")


def test_privacy_audit_config_rejects_typos():
    from fedclust.grids.privacy_audit import check_config

    with pytest.raises(ValueError, match="did you mean 'n_runs'"):
        check_config({"n_run": 10})
    with pytest.raises(ValueError, match="did you mean 'fkm'"):
        check_config({"methods": ["fkn"]})
    with pytest.raises(ValueError, match="unknown option"):
        check_config({"cases": {"fkm": {"epsilonn": 2}}})


def _record(name, sound=True, powerful=1.0, caught=1.0):
    return {"name": name, "metrics": {"sound": float(sound), "powerful": powerful, "mutant_caught": caught}}


def test_privacy_audit_verdicts_name_a_leak_a_powerless_audit_and_a_missed_mutant():
    from fedclust.grids.privacy_audit import verdict_errors

    assert verdict_errors([_record("fkm_eps1"), _record("fkm_eps4")]) == []
    errors = verdict_errors(
        [
            _record("fkm_eps1", sound=False),
            _record("dp_fedc_eps4", caught=0.0),
            _record("rr_cluster_eps4", powerful=0.0),
            _record("fzkm_eps1"),
        ]
    )
    assert len(errors) == 3
    assert "fkm_eps1" in errors[0] and "leak" in errors[0]
    assert "rr_cluster_eps4" in errors[1] and "power" in errors[1]
    assert "dp_fedc_eps4" in errors[2] and "mutant not caught" in errors[2]
    assert not any("fzkm" in e for e in errors)
