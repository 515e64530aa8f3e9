"""The RR-Cluster grid's two regimes: the paper's few clients per cluster, and the many-client default."""

import pytest

from fedclust.grids import rr


def test_the_few_per_cluster_regime_is_the_papers_and_feasible():
    cells = rr.cells({"regime": "few_per_cluster", "seeds": 1})
    cfg = cells[0]["config"]
    M, q = cfg["n_clients"], cfg["participation"]
    per_round = round(q * M)
    assert (M, q, per_round) == (1000, 0.03, 30)  # about 7 clients per cluster and round for k = 4
    Bs = {c["B"] for c in cells if c["method"] == "rr_cluster"}
    assert Bs == {2, 4, 7} and max(Bs) * 4 <= per_round  # every B is feasible: B <= m / k
    assert {c["epsilon"] for c in cells} == {None, 4.0}


def test_the_default_regime_keeps_the_config_and_typos_are_refused():
    cells = rr.cells(
        {
            "participation": 0.25,
            "n_clients": 200,
            "seeds": 1,
            "Bs": [4],
            "settings": ["balanced"],
            "epsilons": [None],
            "methods": ["rr_cluster"],
        }
    )
    assert cells[0]["config"]["participation"] == 0.25 and cells[0]["config"]["regime"] == "many_per_cluster"
    with pytest.raises(ValueError, match="few_per_cluster"):
        rr.cells({"regime": "few"})


def test_rr_grid_records_carry_the_chance_line_of_their_client_clustering():
    cell = rr.cells(
        {
            "seeds": 1,
            "settings": ["balanced"],
            "epsilons": [None],
            "methods": ["dp_ifca"],
            "Bs": [0],
            "n_clients": 40,
            "samples_per_client": 8,
            "test_per_client": 2,
            "rounds": 3,
            "participation": 0.5,
            "local_steps": 2,
            "eval_every": 0,
        }
    )[0]
    m = rr.run_cell(cell)[0]["metrics"]
    # 4 groups of 10 clients: a random split with the run's cluster sizes scores well below 1
    assert 0.25 <= m["client_ACC_chance"] <= 0.6
    assert m["client_at_chance"] in (0.0, 1.0)
