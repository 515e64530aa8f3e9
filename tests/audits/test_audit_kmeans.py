"""Canary audits and noise-scale tests of the k-means family.

* every DP configuration (FKM; FZKM with local_iters = 1; DK++ with seeding_rounds = 0;
  FedDP-KMeans) passes its
  audit (the empirical lower bound stays at or below the accountant's epsilon), and the same audit
  with the noise off exceeds it (the audit has power);
* the released noise has the std the method claims under each trust model: z sqrt(clip^2 + 1) per
  release, at every client (``local``: sqrt(K) times that on the aggregate) or once on the sum
  (``secure_aggregation``, ``central``); the wrong model's aggregate or a wrong sensitivity fails;
* the paper's data-row initialisation leaks: with it, a released centroid *is* the canary row in
  some private runs, so an audit exceeds the Gaussian release's epsilon; that is why such a run
  reports epsilon = inf.
"""

import math

import numpy as np
import pytest

from fedclust.audits import cases, get
from fedclust.audits.kmeans import K_CLUSTERS, with_canary
from fedclust.clustering import dk_pp, fed_dp_kmeans, fkm, fzkm
from fedclust.clustering.defaults import clip_release, dp_clip, norm_bins, norm_grid
from fedclust.privacy.accountants import calibrate_noise_multiplier
from fedclust.privacy.accountants import epsilon as accounted
from fedclust.privacy.audit import audit_case, epsilon_lower_bound_from_scores, seeded_scores
from fedclust.privacy.observe import observe

# the Flower backend's cases run its server, release and client code in one process (fedclust.audits.flower)
DP_CASES = ("fkm", "fzkm", "dk_pp", "fed_dp_kmeans", "fkm_flower", "fed_dp_kmeans_flower")
N_RUNS = 300  # per side; 150 evaluation runs reach bounds up to ~3.7


@pytest.fixture(scope="module", params=DP_CASES)
def report(request):
    return audit_case(get(request.param), n_runs=N_RUNS, seed=1)


def test_every_dp_kmeans_method_has_a_registered_case():
    assert set(DP_CASES) <= set(cases())


def test_audit_is_sound(report):
    assert math.isfinite(report.case.epsilon) and 0.9 < report.case.epsilon <= 1.0
    assert report.sound, report.to_dict()


def test_audit_has_power_with_the_noise_off(report):
    assert report.powerful, report.to_dict()
    assert report.noise_off.epsilon_lower > 2.0 * report.case.epsilon


def test_audit_epsilon_is_the_accountants_for_the_method_s_own_releases(report):
    if report.case.method == "fed_dp_kmeans":  # its releases compose back to the target budget
        assert report.case.epsilon == pytest.approx(1.0, rel=2e-3)
        return
    z = report.case.info["noise_multiplier"]
    if report.case.method == "dk_pp":  # counts round + Lloyd round, one unit Gaussian each; PLD claim
        probe = dk_pp.run(
            *with_canary(True)[:2],
            K_CLUSTERS,
            rounds=2,
            clients_per_round=4,
            seeding_rounds=0,
            noise_multiplier=z,
            clip=1.0,
            init="uniform_box",
        )
        assert report.case.epsilon == pytest.approx(accounted(probe.dp_events, report.case.delta, "pld"))
        return
    mod = fkm if report.case.method == "fkm" else fzkm
    probe = mod.run(*with_canary(True)[:2], K_CLUSTERS, rounds=1, clients_per_round=4, noise_multiplier=z, clip=1.0)
    assert report.case.epsilon == pytest.approx(accounted(probe.dp_events, report.case.delta))


# ---- the noise the methods add is the noise they claim ---------------------------------------------
N0 = 1000  # zero rows per client: the zero cluster's released centre is (noise sum) / (N0 K + noise)
K_CL = 4
CLIP = 1.0
Z = 10.0


def _zero_cluster_data():
    """4 clients, each with N0 zero rows and N0 rows at q = (0.6, 0.8) (norm 1 = CLIP: clipping
    changes nothing). W^0 = {0, q} (public): the zero rows' per-cluster sum is exactly 0, so the
    released centre of that cluster is pure noise over a known count."""
    q = np.array([0.6, 0.8])
    X = np.vstack([np.zeros((N0, 2)), np.tile(q, (N0, 1))] * K_CL)
    client = np.repeat(np.arange(K_CL), 2 * N0)
    return X, client, np.vstack([np.zeros(2), q])


def _run(mod, X, client, W0, seed, trust_model):
    kw = dict(
        rounds=1,
        clients_per_round=K_CL,
        seed=seed,
        noise_multiplier=Z,
        clip=CLIP,
        init_centroids=W0,
        trust_model=trust_model,
    )
    if mod is dk_pp:
        kw.update(rounds=2, seeding_rounds=0, blas_threads=None)
    elif mod is fzkm:
        kw.update(blas_threads=None)
    return mod.run(X, client, 2, **kw)


@pytest.mark.parametrize("trust_model", ["local", "secure_aggregation", "central"])
@pytest.mark.parametrize("mod", [fkm, fzkm, dk_pp], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_released_noise_std_is_the_claimed_one(mod, trust_model):
    X, client, W0 = _zero_cluster_data()
    per_client = Z * math.sqrt(CLIP**2 + 1.0)  # add/remove of one sample moves (sums, counts) by sqrt(clip^2+1)
    # local: the server sums K independent uploads; secure aggregation / central: one draw on the sum
    claimed_aggregate = per_client * (math.sqrt(K_CL) if trust_model == "local" else 1.0)
    runs = [_run(mod, X, client, W0, seed, trust_model) for seed in range(300)]
    assert runs[0].info["noise_std"] == pytest.approx(per_client)
    # the centre that got the zero rows is the one nearer to 0 (the other one is ~1 away)
    zero_centre = np.array([r.centroids[np.argmin(np.linalg.norm(r.centroids, axis=1))] for r in runs])
    empirical = zero_centre.std(ddof=1) * N0 * K_CL  # noise sum / count; the count noise is ~1e-2 relative
    assert empirical == pytest.approx(claimed_aggregate, rel=0.1)
    # the mistakes this would catch: the wrong model's aggregate (sqrt(K) off), or sensitivity clip
    # instead of sqrt(clip^2 + 1)
    other = per_client * (1.0 if trust_model == "local" else math.sqrt(K_CL))
    assert abs(empirical - other) > 0.3 * claimed_aggregate
    assert abs(empirical - claimed_aggregate / math.sqrt(CLIP**2 + 1.0)) > 0.2 * claimed_aggregate


# ---- the paper's data-row initialisation is a leak -------------------------------------------------
def test_fkm_data_row_init_releases_the_canary_and_beats_the_gaussian_epsilon():
    # Old default of a private FKM run: W^0 = k data rows. With the canary among them and a noisy
    # count < 1 for its cluster, the released centroid is the raw canary row. Exact-match
    # distinguisher; the lower bound exceeds the epsilon of the Gaussian release alone, which is
    # what the old code reported. The run now records the step and reports epsilon = inf.
    delta = 1e-5
    z = calibrate_noise_multiplier(1.0, delta, steps=1)
    Xc, cc, canary = with_canary(True)
    X0, c0, _ = with_canary(False)

    def score(X, client, s):
        r = fkm.run(X, client, K_CLUSTERS, rounds=1, seed=s, noise_multiplier=z, clip=1.0, init="data")
        return float(np.any(np.all(r.centroids == canary, axis=1)))

    s_in = seeded_scores(lambda s: score(Xc, cc, s), 1500, 11)
    s_out = seeded_scores(lambda s: score(X0, c0, s), 1500, 12)
    assert s_out.sum() == 0 and s_in.mean() > 0.02  # the raw canary row is published in some runs
    bound = epsilon_lower_bound_from_scores(s_in, s_out, delta)["epsilon_lower"]
    gaussian_only = accounted(
        [
            e
            for e in fkm.run(Xc, cc, K_CLUSTERS, rounds=1, noise_multiplier=z, clip=1.0, init="data").dp_events
            if e.is_private
        ],
        delta,
    )
    assert bound > gaussian_only
    r = fkm.run(Xc, cc, K_CLUSTERS, rounds=1, noise_multiplier=z, clip=1.0, init="data")
    assert math.isinf(accounted(r.dp_events, delta))
    # ... and with the public default init the canary row is never published
    pub = [fkm.run(Xc, cc, K_CLUSTERS, rounds=1, seed=s, noise_multiplier=z, clip=1.0) for s in range(300)]
    assert not any(np.any(np.all(p.centroids == canary, axis=1)) for p in pub)


# ---- the tight statistics see the whole shift the accountant assumes ---------------------------------
@pytest.mark.parametrize("name", ["fkm", "fzkm", "dk_pp", "fed_dp_kmeans"])
def test_noise_off_gaussian_statistic_is_zero_without_the_canary_and_the_full_shift_with_it(name):
    # With the noise off the statistic is exactly its noise-free value in every run: 0 without the
    # canary (everything else is removed as known), and with it the shift whose ratio to the
    # statistic's claimed std is the mu the claim accounts (so a tightness near 1 is reachable).
    # A statistic that assigns the canary unlike the method (raw vs clipped), misses a release, or
    # leaves another sample's mass in would move one of these.
    case = get(name)
    s_in, s_out = case.scores(True, False, 6, 3)["gaussian"], case.scores(False, False, 6, 4)["gaussian"]
    assert np.allclose(s_out, 0.0, atol=1e-9)
    assert np.allclose(s_in, s_in[0], rtol=1e-9)
    z = case.info.get("noise_multiplier")
    if name == "fed_dp_kmeans":
        zs = case.info["noise_multipliers"]
        mu = math.sqrt(sum(zs[key] ** -2 for key in ("weighting", "step_sums", "step_counts")))
    else:
        mu = (math.sqrt(2.0) if name == "dk_pp" else 1.0) / z
    # FZKM's noise residual is every released entry; its statistic projects them on the canary's shift
    stat_std = case.noise_std * (case.info["sensitivity_used"] if name == "fzkm" else 1.0)
    assert s_in[0] / stat_std == pytest.approx(mu, rel=1e-6)


# ---- the DP clip estimate (no clip, no server data) ------------------------------------------------
def test_clip_estimate_audit_is_sound_and_has_power():
    rep = audit_case(get("fkm_clip"), n_runs=N_RUNS, seed=2)
    assert 0.9 < rep.case.epsilon <= 1.0 and rep.sound, rep.to_dict()
    assert rep.powerful and rep.noise_off.epsilon_lower > 2.0 * rep.case.epsilon, rep.to_dict()
    case = get("fkm_clip")  # noise off: the canary's bin holds exactly the canary
    assert np.all(case.scores(True, False, 4, 1)["gaussian"] == 1.0)
    assert np.all(case.scores(False, False, 4, 1)["gaussian"] == 0.0)


@pytest.mark.parametrize("trust_model, per_sum", [("secure_aggregation", 1.0), ("local", 2.0), ("central", 1.0)])
def test_clip_estimate_noise_std_is_the_multiplier_times_sensitivity_one(trust_model, per_sum):
    # 4 clients: local noise is 4 draws of std z on the sum (std 2 z); the other models one draw of z
    X, client = with_canary(False)[:2]
    counts = np.bincount(norm_bins(X), minlength=norm_grid().size)
    rng = np.random.default_rng(0)
    res = np.concatenate([dp_clip(X, client, Z, rng, trust_model=trust_model).histogram - counts for _ in range(40)])
    assert np.std(res) == pytest.approx(per_sum * Z, rel=0.05)  # 4,800 draws: 5 % is > 4 standard errors


# ---- FedDP-KMeans's clip stage (no clip, no server data) --------------------------------------------
def test_fed_dp_kmeans_clip_stage_audit_is_sound_and_has_power():
    rep = audit_case(get("fed_dp_kmeans_clip"), n_runs=N_RUNS, seed=2)
    assert next(iter(rep.case.info["noise_multipliers"])) == "clip"  # the run's releases, the clip stage first
    # the claim is the clip release's alone: z_clip at the weighting stage's share of the budget
    z = rep.case.info["noise_multipliers"]
    assert z["clip"] == pytest.approx(z["weighting"])
    assert rep.case.epsilon == pytest.approx(
        accounted([clip_release(z["clip"], "secure_aggregation")], rep.case.delta, "pld"), rel=1e-6
    )
    assert rep.sound and rep.powerful, rep.to_dict()
    assert rep.noise_off.epsilon_lower > 2.0 * rep.case.epsilon, rep.to_dict()
    case = get("fed_dp_kmeans_clip")  # noise off (not private): the canary's bin holds exactly the canary
    assert np.all(case.scores(True, False, 4, 1)["gaussian"] == 1.0)
    assert np.all(case.scores(False, False, 4, 1)["gaussian"] == 0.0)


@pytest.mark.parametrize("trust_model, per_sum", [("secure_aggregation", 1.0), ("local", 2.0), ("central", 1.0)])
def test_fed_dp_kmeans_clip_stage_noise_std_is_its_multiplier_times_sensitivity_one(trust_model, per_sum):
    # every release at multiplier Z, the clip stage's histogram (sensitivity 1) observed as released:
    # 4 clients, local noise is 4 draws of std Z on the sum (std 2 Z), the other models one draw of Z
    X, client = with_canary(False)[:2]
    counts = np.bincount(norm_bins(X), minlength=norm_grid().size)
    noise = dict.fromkeys(fed_dp_kmeans.release_names("dp_pca", 0, False, clip_stage=True), Z)
    res = []
    for seed in range(40):
        with observe("norm_counts") as seen:
            fed_dp_kmeans.run(
                X, client, K_CLUSTERS, steps=0, noise=noise, seed=seed, trust_model=trust_model, n_candidates=16
            )
        res.append(seen[0] - counts)
    assert np.std(np.concatenate(res)) == pytest.approx(per_sum * Z, rel=0.05)  # 4,840 draws: > 4 standard errors
    # the wrong model's aggregate (a factor 2 here) or the weighting stage's count noise would be far off
    assert abs(np.std(np.concatenate(res)) - (3.0 - per_sum) * Z) > 0.5 * Z
