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
    assert {c["epsilon"] for c in cells} == {None, 2.0, 4.0, 8.0}  # the paper's budgets


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
    # where the run sits on RR's regime map: m = round(0.5 * 40) = 20 sampled clients over k = 4 clusters
    assert m["expected_clients_per_cluster"] == 5.0 and m["rr_moves_updates"] == 0.0


def _few_per_cluster_runs():
    """Registry runs in a small few-per-cluster configuration: 160 digits clients in 4 rotation groups,
    q = 0.1, so m = 16 sampled clients and m / k = 4 per cluster and round, at client-level eps = 4
    (noise from the paper's bound: a closed form, where the accountant's bisection would take seconds;
    it is the larger noise of the two, so the identifiers are at least as noisy as the default's)."""
    from fedclust.data.registry import prepare_dataset
    from fedclust.partition import rotation
    from fedclust.registry.spec import REGISTRY

    ds = prepare_dataset("digits", seed=0)
    rot = rotation(
        ds.images, ds.y, n_clients=160, samples_per_client=6, test_per_client=2, seed=1, n_groups=4, reuse=False
    )
    spec = REGISTRY["rr_cluster"]
    out = {}
    for method, B in (("rr_cluster", 3), ("rr_cluster", 0), ("dp_ifca", 0)):
        cfg = spec.config_from(
            {
                "method": method,
                "B": B,
                "rounds": 4,
                "participation": 0.1,
                "eval_every": 0,
                "calibration_bound": "wang_general",
                "model": {"type": "mlp"},
            }
        )
        noise = spec.calibrate({"epsilon": 4.0, "delta": 1e-3}, cfg, rot)
        out[method, B] = spec.run(rot, noise, cfg, 3)
    return out


def test_few_per_cluster_rr_moves_updates_and_b_zero_is_dp_ifca_bit_for_bit():
    import torch

    runs = _few_per_cluster_runs()
    rr, b0, ifca = runs["rr_cluster", 3], runs["rr_cluster", 0], runs["dp_ifca", 0]
    # with 4 clients per cluster and round, the noisy identifiers leave some cluster below B = 3 in most
    # rounds: RR moves updates, and every cluster ends every round with at least B of them
    assert sum(rr.history["n_moved"]) / len(rr.history["n_moved"]) > 0
    assert min(min(z) for z in rr.history["sizes_after_rr"]) >= 3
    assert any(min(z) < 3 for z in rr.history["sizes_before_rr"])
    # B = 0 is DP-IFCA: same noise, same draws, so the same models to the last bit
    assert b0.history["n_moved"] == ifca.history["n_moved"] == [0, 0, 0, 0]
    assert b0.history["sizes_before_rr"] == ifca.history["sizes_before_rr"]
    for name in ifca.params:
        assert torch.equal(b0.params[name], ifca.params[name])
    assert [e.noise_multipliers for e in b0.dp_events] == [e.noise_multipliers for e in ifca.dp_events]
    # ... and the moves are what make RR differ from it (the rebalancing has its own stream)
    assert rr.history["sizes_before_rr"][0] == ifca.history["sizes_before_rr"][0]
    assert not torch.equal(rr.params["0.weight"], ifca.params["0.weight"])
    # the registry logs where each run sits on RR's regime map (these reach metrics.json and MLflow)
    for res, moves in ((rr, 1.0), (b0, 0.0), (ifca, 0.0)):
        assert res.info["final"]["expected_clients_per_cluster"] == 16 / 4
        assert res.info["final"]["rr_moves_updates"] == moves
