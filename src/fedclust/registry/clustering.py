"""Adapters of the federated data clustering methods: ``calibrate(privacy, config, dataset, partition)``
turns the privacy budget into the run's noise, ``run(dataset, partition, noise, config, seed)`` calls
the library ``run`` with the config's values. Plain Python (no Kedro); the pipelines and the grids
call them through :data:`fedclust.registry.REGISTRY`.
"""

from __future__ import annotations

import logging

import numpy as np

from fedclust.clustering.defaults import DP_CLIP_RULE, SERVER_CLIP_RULE, dp_clip, resolve_clip
from fedclust.clustering.lloyd import pair_sensitivity
from fedclust.data.registry import dataset_label, prepare_dataset
from fedclust.errors import DataError
from fedclust.privacy.accountants import calibrate_noise_multiplier
from fedclust.privacy.events import non_dp_release
from fedclust.registry import configs as C
from fedclust.registry.helpers import (
    n_clients_of,
    n_clusters,
    refuse_absurd,
    require_all_assigned,
    run_timed,
    true_labels,
)
from fedclust.registry.privacy import check_privacy_params, flag_non_dp, non_private_calibration, per_round_noise
from fedclust.rng import stream

logger = logging.getLogger(__name__)


def server_notes(cfg) -> list[str]:
    """The calibration's note on the server's sample (none without one)."""
    sd = getattr(cfg, "server_data", "none")
    if sd == "none":
        return []
    if sd == "holdout":
        return [
            f"the server's sample ({cfg.server_fraction:.0%} of the data set, held out) is public: it is not "
            "client data, and the clients' samples are protected by epsilon; a holdout of the same data is the "
            "most favourable server sample"
        ]
    return [f"the server's sample is {describe_server_data(cfg)}, public by declaration"]


def with_notes(noise: dict, notes: list[str]) -> dict:
    if notes and noise.get("private"):
        noise["notes"] = list(noise.get("notes") or []) + notes
    return noise


def check_sizes(method: str, cfg, dataset, partition, **extra) -> None:
    """Refuse counts larger than what they count (``k > n``, ``clients_per_round > clients``, ...)."""
    n = int(dataset.X.shape[0])
    checks = [("k", getattr(cfg, "k", None), n, "the number of samples n")]
    if partition is not None and getattr(cfg, "clients_per_round", None) is not None:
        checks.append(("clients_per_round", cfg.clients_per_round, n_clients_of(partition), "the number of clients"))
    checks += [(key, value, limit, what) for key, (value, limit, what) in extra.items()]
    refuse_absurd(method, checks)


def _is_private(privacy: dict) -> bool:
    return check_privacy_params(privacy)[0] is not None


# ---- FKM -------------------------------------------------------------------------------------------


def non_dp_steps(method: str, cfg) -> list[str]:
    """The steps of a *private* run of ``method`` with ``cfg`` that are not DP mechanisms (empty when
    the run is DP). Mirrors the ``non_dp_release`` events of the library."""
    steps = []
    if getattr(cfg, "init", None) == "data":
        steps.append(f"{method}: init=data makes the initial centroids k private data rows")
    if method == "fzkm" and cfg.local_iters > 1:
        steps.append(f"fzkm: local_iters={cfg.local_iters} > 1 has unbounded sensitivity (only local_iters=1 is DP)")
    if method == "dk_pp" and cfg.seeding_for(True) > 0:
        steps.append(
            f"dk_pp: the k-means|| seeding ({cfg.seeding_for(True)} rounds) uploads data-selected private "
            "samples (only seeding_rounds=0 is DP)"
        )
    if method == "dkm":
        steps.append("dkm: coreset points and local k-means centres are data-selected private values (no DP variant)")
    return steps


def fkm_calibrate(privacy: dict, cfg: C.FKMConfig, dataset, partition) -> dict:
    """Noise multiplier for the per-cluster sums and counts from the target (epsilon, delta).

    Sample-level DP, add/remove neighbours, no amplification claimed for client sampling (a
    sample's client may upload in every round), composed over ``rounds`` releases. The upload
    ``(sums, counts)`` has L2 sensitivity sqrt(clip^2 + 1). A private run with ``init: data``
    (private rows as W^0) is flagged: a warning now, epsilon = inf in its report.
    """
    noise = per_round_noise(
        privacy, cfg.rounds_for(_is_private(privacy)), clip_of_config(cfg), extra_releases=clip_releases(cfg)
    )
    noise.update(rounds=cfg.rounds_for(noise["private"]), trust_model=cfg.trust_model)
    if noise["private"]:
        if cfg.clip is not None:
            noise["sensitivity"] = pair_sensitivity(noise["clip"])
            noise["noise_std"] = noise["noise_multiplier"] * noise["sensitivity"]
        logger.info(
            "fkm: epsilon=%s -> noise multiplier %.4g (clip: %s)",
            noise["epsilon_target"],
            noise["noise_multiplier"],
            noise["clip"],
        )
    return with_notes(flag_non_dp(noise, "fkm", non_dp_steps("fkm", cfg)), server_notes(cfg))


def fkm_run(dataset, partition, noise: dict, cfg: C.FKMConfig, seed: int):
    """Federated Lloyd on the partitioned data; k defaults to the number of classes."""
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import fkm

    require_all_assigned(partition, "fkm")
    check_sizes("fkm", cfg, dataset, partition)
    rows, array = server_points(cfg, dataset, seed)  # read once: the start and the clip rule
    # on Flower a DP clip estimate is a release like the others: its server makes it through SecAgg+
    flower_clip = cfg.backend == "flower" and noise["private"] and cfg.clip is None and rows is None and array is None
    clip, clip_rule, clip_event = (
        run_clip(cfg, dataset, partition, noise, seed, (rows, array))
        if noise["private"] and not flower_clip
        else (None,) * 3
    )
    options = cfg.options(
        rounds=int(noise.get("rounds", cfg.rounds)),
        seed=int(seed),
        noise_multiplier=float(noise["noise_multiplier"]),
        # on Flower the server releases the DP clip estimate first and replaces this placeholder
        clip=1.0 if flower_clip else clip,
        server_rows=rows,
        server_data=array,
    )
    run = backend_run("fkm", fkm.run, cfg, clip_noise=float(noise["noise_multiplier"]) if flower_clip else None)
    result = run_timed(run, dataset.X, partition.client, n_clusters(cfg.k, dataset), options, y=true_labels(dataset))
    return with_clip(result, clip, clip_rule, clip_event)


def backend_run(method: str, simulation_run, cfg, clip_noise: float | None = None):
    """The library run of ``cfg.backend``: the method's own ``run`` (``simulation``), or the same stages
    on Flower with every sum through SecAgg+ (``flower``, :mod:`fedclust.deploy.flower`), with the
    method's keyword arguments either way; ``clip_noise``: FKM's DP clip estimate, made by the Flower
    server through SecAgg+ at this noise multiplier)."""
    if getattr(cfg, "backend", "simulation") != "flower":
        return simulation_run
    try:
        # Flower (and Ray under it) load only for a flower run: the registry loads at every kedro start
        from fedclust.deploy import flower
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] != "flwr":
            raise
        raise ImportError(f"{method}.train.backend=flower needs Flower: pip install -e '.[deploy]'") from err

    def run_flower(X, client, k, options=None, **kwargs):
        settings = {"threshold": cfg.secagg_threshold, "clip_noise": clip_noise}
        return flower.run(method, X, client, k, options, flower=settings, **kwargs)

    return run_flower


# ---- FZKM, DK++, DKM -------------------------------------------------------------------------------

#: Gaussians released per round by each baseline. DK++: one in its DP variant (seeding_rounds = 0:
#: a counts round, then Lloyd rounds); its seeding rounds release two, but they are not DP anyway.
KMEANS_MECHANISMS = {"fzkm": 1, "dk_pp": 1, "dkm": 4}


def kmeans_calibrate(method: str):
    def calibrate(privacy: dict, cfg, dataset, partition) -> dict:
        rounds = cfg.rounds_for(_is_private(privacy))
        noise = per_round_noise(
            privacy,
            rounds,
            clip_of_config(cfg),
            mechanisms_per_round=KMEANS_MECHANISMS[method],
            extra_releases=clip_releases(cfg),
        )
        noise.update(rounds=rounds, trust_model=getattr(cfg, "trust_model", "local"))
        return with_notes(flag_non_dp(noise, method, non_dp_steps(method, cfg)), server_notes(cfg))

    calibrate.__name__ = f"{method}_calibrate"
    return calibrate


def kmeans_run(method: str):
    def run(dataset, partition, noise: dict, cfg, seed: int):
        # a method's module loads when the method runs: the registry loads at every kedro start
        from fedclust.clustering import dk_pp, dkm, fzkm

        require_all_assigned(partition, method)
        check_sizes(method, cfg, dataset, partition)
        kw = {
            "rounds": int(noise.get("rounds", cfg.rounds)),
            "clients_per_round": cfg.clients_per_round or n_clients_of(partition),  # null = all
            "seed": int(seed),
        }
        rows, array = server_points(cfg, dataset, seed)  # read once: the start and the clip rule
        clip, clip_rule, clip_event = (
            run_clip(cfg, dataset, partition, noise, seed, (rows, array)) if noise["private"] else (None,) * 3
        )
        if noise["private"]:
            kw["noise_multiplier"] = noise["noise_multiplier"]
        if method == "dk_pp":
            kw["seeding_rounds"] = cfg.seeding_for(noise["private"])
        options = cfg.options(clip=clip, server_rows=rows, server_data=array, **kw)
        fn = {"fzkm": fzkm, "dk_pp": dk_pp, "dkm": dkm}[method].run
        result = run_timed(fn, dataset.X, partition.client, n_clusters(cfg.k, dataset), options, y=true_labels(dataset))
        return with_clip(result, clip, clip_rule, clip_event)

    run.__name__ = f"{method}_run"
    return run


# ---- DP-FedC ---------------------------------------------------------------------------------------


def dp_fedc_server_rows(cfg: C.DPFedCConfig, n: int):
    """The rows the server holds as its public sample (``server_data: holdout``), or None.

    A fixed slice of the data set (stream ``"server_data"`` of seed 0, the same for every run seed),
    so that the budget calibration knows the clients' sizes before a run starts."""
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import fed_dp_kmeans

    return fed_dp_kmeans.holdout_rows(n, cfg.server_fraction, 0) if cfg.server_data == "holdout" else None


def _dp_fedc_client_sizes(cfg: C.DPFedCConfig, dataset, partition) -> np.ndarray:
    """The clients' sizes in a run: the partition's, less the server's rows (clients left empty drop out)."""
    keep = np.asarray(partition.client) >= 0
    rows = dp_fedc_server_rows(cfg, int(dataset.X.shape[0]))
    if rows is not None:
        keep[rows] = False
    sizes = np.bincount(np.asarray(partition.client)[keep], minlength=n_clients_of(partition))
    return sizes[sizes > 0]


def dp_fedc_calibrate(privacy: dict, cfg: C.DPFedCConfig, dataset, partition) -> dict:
    """With ``budget: accountant`` ``privacy.epsilon`` is the accounted epsilon of the worst client and
    the paper's eps_bar (Theorem 3) is solved for; with ``paper`` ``privacy.epsilon`` *is* eps_bar."""
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import dp_fedc

    target, delta = check_privacy_params(privacy)
    base = {
        "mechanism": "gaussian",
        "unit": "sample",
        "delta": delta,
        "epsilon_target": target,
        "trust_model": cfg.trust_model,
    }
    if target is None:
        return {**base, "private": False}
    eps_bar = target
    if cfg.budget == "accountant":
        sizes = _dp_fedc_client_sizes(cfg, dataset, partition)
        sched = cfg.pick("rounds", "Qhat", "b", "c0", "q_cap", "q2")
        sched["clients_per_round"] = min(cfg.clients_per_round or sizes.size, sizes.size)
        eps_bar = dp_fedc.eps_bar_for_budget(target, delta, sizes, accountant=privacy.get("accountant", "rdp"), **sched)
    return {
        **base,
        "private": True,
        "budget": cfg.budget,
        "eps_bar": eps_bar,
        "G": float(cfg.G),
        "c0": float(cfg.c0),
        "paper_epsilon": eps_bar,
        "paper_formula": "DP-FedC Theorem 3, eq. (32): eps_bar = c0 q^2 eps sqrt(pR/(1-q)), per-round sigma eq. (29)",
        "notes": [
            "the paper's total-loss bound (32) has an unspecified constant c0 (here "
            f"{float(cfg.c0)}) and assumes eps <= 1 per round; the accountant's epsilon is the figure that holds",
            "the accountant's epsilon is the worst client's (clients differ in n_i, hence in q_i and sigma_i; "
            "sample-level DP composes in parallel over clients)",
        ]
        + server_notes(cfg)
        + (["W^0 and the public constants come from the server's sample"] if cfg.server_data != "none" else [])
        + (
            [
                "secure aggregation: the server sees only the sum of the K uploads, which carries one Gaussian "
                "of the largest sampled client's std (each client's own calibrated multiplier or more)"
            ]
            if cfg.trust_model == "secure_aggregation"
            else []
        ),
    }


def dp_fedc_run(dataset, partition, noise: dict, cfg: C.DPFedCConfig, seed: int):
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import dp_fedc

    require_all_assigned(partition, "dp_fedc")
    check_sizes("dp_fedc", cfg, dataset, partition)
    kw = {"seed": int(seed), "server_rows": dp_fedc_server_rows(cfg, int(dataset.X.shape[0]))}
    if isinstance(cfg.server_data, dict):  # a public file: read with the data sets' loaders
        kw["server_data"] = server_points(cfg, dataset, seed)[1]
    n_clients = _dp_fedc_client_sizes(cfg, dataset, partition).size
    kw["clients_per_round"] = min(cfg.clients_per_round or n_clients, n_clients)  # null = all clients
    if noise["private"]:
        kw.update(eps_bar=noise["eps_bar"], delta=noise["delta"], G=noise["G"])
    # G clips the gradients of a private run only (its calibration gives it)
    options = cfg.options(exclude=("G",), **kw)
    result = run_timed(
        dp_fedc.run, dataset.X, partition.client, n_clusters(cfg.k, dataset), options, y=true_labels(dataset)
    )
    # keep the pickled result small: the soft assignments and the sampling log are large and derivable
    for big in ("H", "sampled_clients"):
        result.info.pop(big, None)
    result.info["metrics"] = {
        "eps_round": float(result.info["eps_round"]),
        "zero_columns": float(result.info["zero_columns"]),
    }
    return result


# ---- FedDP-KMeans ----------------------------------------------------------------------------------


def fed_dp_kmeans_calibrate(privacy: dict, cfg: C.FedDPKMeansConfig, dataset, partition) -> dict:
    """Noise multiplier of every release (:func:`fedclust.clustering.fed_dp_kmeans.noise_multipliers`):
    the stage shares of the run's Gaussian-DP budget, composed back to ``privacy.epsilon`` by the
    accountant (sample-level, add/remove, every client in every release). Without a clip and without
    server data the run's DP clip estimate is one of the releases (``noise_multipliers["clip"]``)."""
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import fed_dp_kmeans

    eps, delta = check_privacy_params(privacy)
    has_server = cfg.server_data != "none"
    base = {
        "mechanism": "gaussian",
        "unit": "sample",
        "delta": delta,
        "epsilon_target": eps,
        "trust_model": cfg.trust_model,
        "clip": clip_of_config(cfg),
        "server_data": describe_server_data(cfg),
    }
    if eps is None:
        return {**base, "private": False, "noise_multipliers": None}
    z = fed_dp_kmeans.noise_multipliers(
        eps,
        delta,
        projection=cfg.projection,
        steps=cfg.steps,
        has_server_data=has_server,
        shares=cfg.shares,
        count_share=cfg.count_share,
        accountant=privacy.get("accountant", "rdp"),
        clip_stage=fed_dp_kmeans.has_clip_stage(cfg.clip, has_server),
    )
    logger.info("fed_dp_kmeans: epsilon=%s -> noise multipliers %s", eps, {k: round(v, 4) for k, v in z.items()})
    notes = server_notes(cfg)
    if "clip" in z:
        notes.append(
            "no clip and no server data: the clip is a DP median of the clients' row norms, one more release "
            "of the budget split (noise_multipliers['clip']), composed with the others"
        )
    return {**base, "private": True, "noise_multipliers": z, "notes": notes}


def clip_of_config(cfg):
    """The clip of a k-means-family config for its calibration: the number when given, else the
    public rule that gives it when the run starts (:func:`run_clip`)."""
    if cfg.clip is not None:
        return float(cfg.clip)
    if getattr(cfg, "server_data", "none") != "none":
        return SERVER_CLIP_RULE
    return DP_CLIP_RULE


def clip_releases(cfg) -> int:
    """The releases a k-means-family run spends on its clip: 1 for the DP estimate, else 0."""
    return int(clip_of_config(cfg) == DP_CLIP_RULE)


def run_clip(cfg, dataset, partition, noise: dict, seed: int, server: tuple) -> tuple[float, str, object]:
    """``(clip, rule, event)`` of a private k-means-family run: ``cfg.clip`` when given; else the
    median row norm of the run's server sample (``server``: :func:`server_points` of the run; public,
    no release); else the DP estimate of :func:`fedclust.clustering.defaults.dp_clip` from the
    clients' rows (``event``: its release, which the calibration counted; None for the other rules)."""
    rows, array = server
    points = np.asarray(dataset.X)[rows] if rows is not None else array
    if cfg.clip is not None or points is not None:
        clip, rule = resolve_clip(cfg.clip, points)
        return clip, rule, None
    est = dp_clip(
        dataset.X,
        partition.client,
        float(noise["noise_multiplier"]),
        stream(seed, "clip"),
        trust_model=getattr(cfg, "trust_model", "local"),
    )
    return est.clip, DP_CLIP_RULE, est.event


def with_clip(result, clip, rule, event):
    """``result`` with the clip of its private run and its rule in its info, and the clip's release
    (if any) among its DP events."""
    if clip is not None:
        result.info["clip"] = float(clip)
        result.info["clip_rule"] = rule
    if event is not None:
        result.dp_events.insert(0, event)
    return result


def describe_server_data(cfg) -> str:
    """Which server data a run uses, in words (privacy report, MLflow tag, benchmark report)."""
    sd = getattr(cfg, "server_data", "none")
    if sd == "holdout":
        return f"holdout: {cfg.server_fraction:.0%} of the same data set"
    if sd == "none":
        return "none: DP candidates"
    return f"public file: {dataset_label(sd)}"


def server_points(cfg, dataset, seed: int):
    """The server's public sample of a run: ``(rows held out of the data set, None)`` for
    ``holdout``, ``(None, array)`` for a public file (read with the data sets' loaders, its ``scale``
    defaulting to none: the file must be on the clients' scale, or to min-max by the bounds it declares,
    :func:`~fedclust.registry.configs.server_file_scale`), ``(None, None)`` for none."""
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering.fed_dp_kmeans import holdout_rows

    sd = cfg.server_data
    if sd == "holdout":
        return holdout_rows(int(dataset.X.shape[0]), cfg.server_fraction, int(seed)), None
    if sd == "none":
        return None, None
    ds = prepare_dataset(
        sd["name"], path=sd.get("path"), seed=int(seed), scale=C.server_file_scale(sd), options=sd.get("options")
    )
    if ds.n_features != dataset.n_features:
        raise DataError(
            f"the server's file {describe_server_data(cfg)} has {ds.n_features} features, the clients' data "
            f"{dataset.n_features}: a server sample must live in the clients' feature space"
        )
    return None, ds.X


def fed_dp_kmeans_run(dataset, partition, noise: dict, cfg: C.FedDPKMeansConfig, seed: int):
    """FedDP-KMeans on the partitioned data; the server's sample is a held-out slice of the data set
    (taken out of the clients' data), or none (DP candidates)."""
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import fed_dp_kmeans

    require_all_assigned(partition, "fed_dp_kmeans")
    check_sizes("fed_dp_kmeans", cfg, dataset, partition)
    rows, array = server_points(cfg, dataset, seed)
    options = cfg.options(
        server_rows=rows,
        server_data=array,
        noise=noise.get("noise_multipliers") if noise["private"] else None,
        seed=int(seed),
    )
    run = backend_run("fed_dp_kmeans", fed_dp_kmeans.run, cfg)
    result = run_timed(run, dataset.X, partition.client, n_clusters(cfg.k, dataset), options, y=true_labels(dataset))
    result.info["rounds"] = result.info["steps"] + 1 + (result.info["projection"] == "dp_pca")
    result.info["server_data"] = describe_server_data(cfg)
    return result


def dataset_scale(dataset) -> str | None:
    """The scaling the data set went through (``minmax``, ``standardize``, ``none``; None unknown)."""
    return ((getattr(dataset, "meta", None) or {}).get("preprocess") or {}).get("scale")


# ---- FedCAvg, FedCGds ------------------------------------------------------------------------------


def fedc_mf_calibrate(method: str):
    def calibrate(privacy: dict, cfg, dataset, partition) -> dict:
        return non_private_calibration(privacy, method, "sample")

    calibrate.__name__ = f"{method}_calibrate"
    return calibrate


def fedc_mf_options(cfg, seed: int):
    """The library options of a FedCAvg/FedCGds config (``q_hat: 0`` and ``continuation: none``
    are the library's ``None``: null means the default in a parameter file)."""
    kw = {"seed": int(seed), "continuation": None if cfg.continuation == "none" else cfg.continuation}
    if getattr(cfg, "q_hat", None) == 0:
        kw["q_hat"] = None
    return cfg.options(**kw)


def fedc_mf_run(method: str):
    def run(dataset, partition, noise: dict, cfg, seed: int):
        # a method's module loads when the method runs: the registry loads at every kedro start
        from fedclust.clustering import fedc_mf

        require_all_assigned(partition, method)
        check_sizes(method, cfg, dataset, partition)
        fn = {"fedc_avg": fedc_mf.run_fedcavg, "fedc_gds": fedc_mf.run_fedcgds}[method]
        options = fedc_mf_options(cfg, seed)
        result = run_timed(fn, dataset.X, partition.client, n_clusters(cfg.k, dataset), options, y=true_labels(dataset))
        result.info["metrics"] = (
            {"rho_final": float(result.info.get("rho_final", float("nan")))} if "rho_final" in result.info else {}
        )
        return result

    run.__name__ = f"{method}_run"
    return run


# ---- FedSC -----------------------------------------------------------------------------------------

_SWEEP_KEYS = ("data_noise_beta", "z_noise_alpha", "c_noise_alpha")
#: Factor-variant settings used when ``fedsc.train`` leaves them null.
FACTOR_DEFAULTS = {"tau_c": 1.0, "z_lr": 0.5}


def _kernel_rules(dataset, cfg: C.FedSCConfig, seed: int) -> tuple[float, int]:
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import spectral

    rng = stream(seed, "data")
    r = cfg.r or spectral.mean_pairwise_distance(dataset.X, rng=rng)
    d = cfg.d or spectral.eigen_rank(dataset.X, r, tol=cfg.d_tol, rng=rng)
    if cfg.d_max:
        d = min(int(d), int(cfg.d_max))
    return float(r), int(d)


def fedsc_clip(cfg: C.FedSCConfig, m: int) -> float:
    """The row clip of a private FedSC run: ``clip_tau``, or half the largest norm of the declared
    ``data_domain`` (public inputs only)."""
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import fedsc

    if cfg.clip_tau:
        return float(cfg.clip_tau)
    if cfg.data_domain is None:
        raise ValueError("fedsc.train: a private run needs clip_tau or data_domain (the clip's public rule)")
    return fedsc.public_clip(m, cfg.data_domain)


def fedsc_calibrate(privacy: dict, cfg: C.FedSCConfig, dataset, partition) -> dict:
    """FedSC's privacy variants (``privacy_variant``), used when ``privacy.epsilon`` is set:

    * ``data``: every client perturbs its data once with Gaussian noise (local trust), its rows
      projected onto the declared ``data_domain`` and clipped to ``clip_tau`` (null: the public rule of
      :func:`fedsc_clip`); sample-level, replace-one, sensitivity
      :func:`fedclust.clustering.fedsc.data_sensitivity` (``sqrt(2) clip_tau`` on a non-negative
      domain; ``data_sensitivity: paper``: no domain and ``2 clip_tau``, Prop. 3.7); sigma from the accountant
      (``mechanism: accountant``), Proposition 3.7 (``classical``, valid for epsilon < 1) or the
      analytic Gaussian mechanism (``analytic``). r, d and the rest come from the perturbed data.
    * ``factors``: noise on every uploaded Z_p (each round) and on C once, calibrated by the accountant
      (``factor_calibration: accountant``) on the per-sample sensitivities of
      :func:`fedclust.clustering.fedsc.factor_sensitivities`, or Theorem 3.9's stds (``paper``, needs
      ``tau_z``). r and d are public (``kernel_constants: public``) or the paper's rules on the raw data
      (``data``: not private, the run reports epsilon = inf and names the step).

    Without a budget the paper's sweeps ``data_noise_beta``, ``z_noise_alpha``, ``c_noise_alpha`` are
    available (not DP; the report says so).
    """
    eps, delta = check_privacy_params(privacy)
    sweep = {k: float(getattr(cfg, k)) for k in _SWEEP_KEYS}
    base = {
        "mechanism": "gaussian",
        "unit": "sample",
        "delta": delta,
        "epsilon_target": eps,
        "trust_model": "local",
        **sweep,
    }
    if eps is None:
        notes = []
        if any(sweep.values()):
            notes.append("noise set relative to the data's std (paper sweep): not calibrated, no DP guarantee")
        return {**base, "private": False, "variant": None, "notes": notes}
    if any(sweep.values()):
        raise ValueError(
            f"fedsc: set either privacy.epsilon (calibrated DP) or the sweep parameters {_SWEEP_KEYS}, not both"
        )
    m = int(dataset.X.shape[1])
    _check_fedsc_domain(cfg, dataset)
    tau_x = fedsc_clip(cfg, m)
    if cfg.privacy_variant == "data":
        return {**base, **_fedsc_data_calibration(privacy, eps, delta, cfg, m, tau_x)}
    return {**base, **_fedsc_factor_calibration(privacy, eps, delta, cfg, dataset, tau_x)}


def _check_fedsc_domain(cfg: C.FedSCConfig, dataset) -> None:
    """Refuse a declared domain [0, 1] (min-max scaled features) on data scaled otherwise."""
    scale = dataset_scale(dataset)
    if cfg.data_domain is not None and scale is not None and scale != "minmax" and list(cfg.data_domain) == [0.0, 1.0]:
        raise DataError(
            f"fedsc.train.data_domain=[0, 1] declares min-max scaled features, but the data are scaled with "
            f"{scale!r}: declare their bounds (fedsc.train.data_domain=[low, high]) or give clip_tau and data_domain=null"
        )


def _fedsc_data_calibration(privacy: dict, eps, delta, cfg: C.FedSCConfig, m: int, tau_x: float) -> dict:
    """The ``data`` variant of :func:`fedsc_calibrate`: the std of the perturbed data and its notes."""
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import fedsc
    from fedclust.privacy.paper import fedsc as fedsc_privacy

    mech = cfg.mechanism
    # the declared domain enters the release (projection, smaller sensitivity) unless the paper's
    # Prop. 3.7 is asked for (no domain, 2 tau_X)
    domain = cfg.data_domain if cfg.data_sensitivity == "domain" else None
    sens = fedsc.data_sensitivity(tau_x, m, domain)
    if mech == "accountant":
        # the accountant's smallest noise multiplier for one Gaussian release of that sensitivity
        sigma = calibrate_noise_multiplier(eps, delta, steps=1, accountant=privacy.get("accountant", "rdp")) * sens
    else:
        # the paper's formula is written for the sensitivity 2 tau_X: half the sensitivity in its place
        sigma = fedsc_privacy.perturbed_data_sigma(eps, delta, sens / 2.0, mechanism=mech)
    logger.info(
        "fedsc: perturbed data, epsilon=%s delta=%s tau_x=%s sensitivity %.4g -> sigma %.4g",
        eps,
        delta,
        tau_x,
        sens,
        sigma,
    )
    notes = [
        "r and d are estimated on the perturbed data (post-processing of the DP release)"
        if not (cfg.r and cfg.d)
        else "r and d were given (public)",
        f"rows clipped to {tau_x:.6g} ({'given' if cfg.clip_tau else 'sqrt(m) max|data_domain| / 2'})"
        + (f", coordinates projected onto the declared domain {list(domain)}" if domain else "")
        + f": L2 sensitivity {sens:.6g}",
    ]
    if eps >= 1 and mech == "classical":
        notes.append(
            f"Prop. 3.7 uses the classical Gaussian mechanism, proven only for epsilon < 1 (here {eps}); "
            "the accountant's epsilon below is the valid figure"
        )
    return {
        "private": True,
        "variant": "data",
        "data_noise_std": sigma,
        "clip_tau": tau_x,
        "data_domain": list(domain) if domain else None,
        "data_sensitivity": sens,
        "notes": notes,
        "data_mechanism": mech,
        "paper_epsilon": fedsc_privacy.perturbed_data_epsilon(sigma, delta, sens / 2.0),
        "paper_formula": "FedSC Proposition 3.7 at the release's sensitivity S (2 tau_X in the paper): "
        "epsilon = S sqrt(2 ln(1.25/delta)) / sigma",
    }


def _fedsc_kernel_constants(cfg: C.FedSCConfig, dataset, m: int, tau_x: float, notes: list) -> tuple[float, int]:
    """r and d of the ``factors`` variant: public (given, or the public defaults) or the paper's data rules."""
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import fedsc

    k = n_clusters(cfg.k, dataset)
    if cfg.kernel_constants != "public":
        # the paper's literal choice: rules on the raw data (stream "data" of seed 0), fixed here so the
        # sensitivities hold for the run; the run reports epsilon = inf for it (run() adds the release)
        return _kernel_rules(dataset, cfg, 0)
    r = float(cfg.r) if cfg.r else fedsc.public_kernel_width(m, tau_x)
    d = int(cfg.d) if cfg.d else fedsc.public_dictionary_size(m, k)
    notes.append(
        f"kernel width r={r:.6g} ({'given' if cfg.r else 'public default sqrt(m/6)'}) and "
        f"dictionary size d={d} ({'given' if cfg.d else 'public default 2m'}) read no data"
    )
    return r, d


def _fedsc_factor_calibration(privacy: dict, eps, delta, cfg: C.FedSCConfig, dataset, tau_x: float) -> dict:
    """The ``factors`` variant of :func:`fedsc_calibrate`: r, d, the Z and C noise stds and their notes."""
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import fedsc
    from fedclust.privacy.paper import fedsc as fedsc_privacy

    share = float(cfg.factor_budget_z)
    constants, how = cfg.kernel_constants, cfg.factor_calibration
    rounds = int(cfg.rounds)
    tau_c = float(cfg.tau_c or FACTOR_DEFAULTS["tau_c"])
    z_lr = float(cfg.z_lr or FACTOR_DEFAULTS["z_lr"])
    tau_z, lam = cfg.tau_z, float(cfg.lam)
    notes = []
    r, d = _fedsc_kernel_constants(cfg, dataset, int(dataset.X.shape[1]), tau_x, notes)
    sens = fedsc.factor_sensitivities(
        d=d, r=r, tau_c=tau_c, z_lr=z_lr, lam=lam, tau_x=tau_x, tau_z=float(tau_z) if tau_z else None
    )
    z_rounds = rounds - 1  # data-dependent Z uploads (round 1 uploads the random init)
    paper = None
    if tau_z:
        paper = {"ups": float(tau_z) + tau_x, "z": sens["z_paper"], "c": sens["c_paper"]}
    if how == "paper":
        if paper is None:
            raise ValueError("fedsc.train.tau_z must be > 0 for factor_calibration=paper (Theorem 3.9)")
        s = fedsc_privacy.perturbed_factors_sigmas(
            eps * share,
            delta * share,
            eps * (1 - share),
            delta * (1 - share),
            rounds=max(z_rounds, 1),
            bounds=fedsc_privacy.FactorBounds(
                tau_x=tau_x, tau_c=tau_c, tau_z=float(tau_z), upsilon=paper["ups"], r=r, d=d, lam=lam, eta=z_lr
            ),
        )
        sigma_z, sigma_c, paper_eps = s["sigma_z"], s["sigma_c"], s["epsilon"]
        notes.append(
            "noise stds from Theorem 3.9's formulas (paper calibration); the accountant's epsilon uses the "
            "per-sample sensitivities and is the valid figure"
        )
    else:
        cal = fedsc.factor_noise_stds(
            eps,
            delta,
            rounds=rounds,
            d=d,
            r=r,
            tau_c=tau_c,
            z_lr=z_lr,
            share_z=share,
            accountant=privacy.get("accountant", "rdp"),
        )
        sigma_z, sigma_c = cal["z_noise_std"], cal["c_noise_std"]
        paper_eps = None
        if paper is not None and z_rounds > 0:
            paper_eps = fedsc_privacy.factor_epsilon_z(
                sigma_z, delta * share, z_rounds, paper["z"]
            ) + fedsc_privacy.factor_epsilon_c(sigma_c, delta * (1 - share), paper["c"])
    logger.info(
        "fedsc: perturbed factors, epsilon=%s r=%.4g d=%d -> sigma_z %.4g, sigma_c %.4g", eps, r, d, sigma_z, sigma_c
    )
    return {
        "private": True,
        "variant": "factors",
        "clip_tau": tau_x,
        "r": r,
        "d": d,
        "kernel_constants": constants,
        "factor_calibration": how,
        "tau_c": tau_c,
        "z_lr": z_lr,
        "z_noise_std": sigma_z,
        "c_noise_std": sigma_c,
        "sensitivity_z": sens["z"],
        "sensitivity_c": sens["c"],
        "notes": notes,
        "paper_epsilon": paper_eps,
        "paper_formula": "FedSC Theorem 3.9 (Kairouz composition for Z, Gaussian for C), at the stds used",
    }


#: values of ``fedsc.train`` that reach the library through the calibration (its noise), not as set
_FEDSC_CALIBRATED = ("clip_tau", "data_domain", *_SWEEP_KEYS)


def fedsc_run(dataset, partition, noise: dict, cfg: C.FedSCConfig, seed: int):
    # a method's module loads when the method runs: the registry loads at every kedro start
    from fedclust.clustering import fedsc

    require_all_assigned(partition, "fedsc")
    n = int(dataset.X.shape[0])
    check_sizes("fedsc", cfg, dataset, None, d=(cfg.d, n, "the number of samples n"))
    kw = {"seed": int(seed)}
    if noise.get("private"):
        kw["clip_tau"] = noise["clip_tau"]
        if noise["variant"] == "data":
            kw.update(data_noise_std=noise["data_noise_std"], data_domain=noise.get("data_domain"))
        else:
            kw.update(z_noise_std=noise["z_noise_std"], c_noise_std=noise["c_noise_std"], r=noise["r"], d=noise["d"])
            kw.update(z_step="gradient", local_steps=1, tau_c=noise["tau_c"], z_lr=noise["z_lr"])
            kw["d_max"] = None  # d is the calibration's
    else:
        kw.update({k: noise[k] for k in _SWEEP_KEYS if noise.get(k)})
    options = cfg.options(exclude=_FEDSC_CALIBRATED, **kw)
    result = run_timed(
        fedsc.run, dataset.X, partition.client, n_clusters(cfg.k, dataset), options, y=true_labels(dataset)
    )
    if noise.get("private") and noise.get("kernel_constants") == "data":
        result.dp_events.append(
            non_dp_release(
                "fedsc kernel width r and dictionary size d computed from the private data (eq. 40/43, "
                "kernel_constants=data)",
                neighbouring="replace_one",
            )
        )
    result.info["metrics"] = {
        key: float(result.info[key])
        for key in ("NMI_paper", "reconstruction_error", "d", "r", "knn_k", "graph_components")
        if result.info.get(key) is not None
    }
    return result
