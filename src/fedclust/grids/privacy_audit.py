"""The privacy audit of every DP method (pipeline ``privacy_audit``): one record per method and budget.

Each method's canary audit (:mod:`fedclust.audits`) is run at every budget of ``epsilons``
(default 1 and 4) with the noise on and off, and on its halved-noise mutant
(:func:`fedclust.privacy.audit.audit_case`); a record holds the accounted ε, the audited lower
bounds (distribution-free; tight where the case has a Gaussian statistic; measured-noise where its
noise is measured), ``tightness``, the noise-off bounds (the audit's power: the distribution-free
bound with its ceiling at the noise-off run count, which the audit raises where the ceiling would
stay below the claim, and the tight bound), the mutant's audited ε
and the verdicts ``sound`` (every audited bound <= accounted), ``powerful`` (noise-off > accounted)
and ``mutant_caught`` (a mutant bound > accounted). :func:`verdict_errors` names the records that
fail (the pipeline stops on them). The
mutant's noise scale is fixed here (:data:`MUTANT_NOISE_SCALE`): no configuration reaches it. Cases run on ``executor`` (default: a process pool of
``workers`` processes, each with one BLAS/torch thread; :mod:`fedclust.executors`); every case is a
pure function of its options and the seed, so the records do not depend on the executor.

No Kedro imports here.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import sys
import time

import numpy as np
import pandas as pd

from fedclust.audits import cases
from fedclust.experiments import eps_label
from fedclust.privacy.audit import audit_case
from fedclust.threads import thread_limits

logger = logging.getLogger(__name__)

#: The mutant runs its method with this fraction of the calibrated noise (test-side only).
MUTANT_NOISE_SCALE = 0.5
#: Tightness below this is marked in the summary for a closer look.
LOW_TIGHTNESS = 0.5
#: Factory options that no configuration may set.
PRIVATE_OPTIONS = ("noise_scale",)

#: The keys of ``privacy_audit.config`` and their defaults.
DEFAULTS = {
    "methods": None,  # null = every registered DP method
    "epsilons": [1.0, 4.0],  # every case at each of these budgets (a case's own `epsilon` option wins)
    "mutant": True,
    "n_runs": None,  # null = each case's own default
    "seed": 0,
    "alpha": 0.05,
    "power_check": True,
    "workers": 2,
    "cases": {},  # per-method factory options, e.g. {fkm: {epsilon: 2.0}}
    "executor": None,  # null = processes with `workers` workers (serial for 1); or serial, processes, ray
    "executor_options": {},
    "resume": True,
}


def check_config(config: dict | None) -> dict:
    """``config`` merged over :data:`DEFAULTS`; unknown keys and methods are errors naming the nearest."""

    cfg = dict(DEFAULTS)
    for key, value in (config or {}).items():
        if key not in DEFAULTS:
            near = difflib.get_close_matches(key, DEFAULTS, n=1)
            raise ValueError(
                f"privacy_audit.config.{key} is not a setting"
                + (f"; did you mean {near[0]!r}?" if near else f" (known: {sorted(DEFAULTS)})")
            )
        if value is not None:
            cfg[key] = value
    known = cases()
    methods = list(known) if cfg["methods"] is None else list(cfg["methods"])
    for m in list(methods) + list(cfg["cases"] or {}):
        if m not in known:
            near = difflib.get_close_matches(m, known, n=1)
            raise ValueError(
                f"privacy_audit: no audit case for method {m!r}"
                + (f"; did you mean {near[0]!r}?" if near else f" (known: {sorted(known)})")
            )
    for m, opts in (cfg["cases"] or {}).items():
        params = inspect.signature(known[m]).parameters
        bad = [k for k in (opts or {}) if k not in params or k in PRIVATE_OPTIONS]
        if bad:
            raise ValueError(f"privacy_audit.config.cases.{m}: unknown option(s) {bad} (known: {sorted(params)})")
    if cfg["n_runs"] is not None and (isinstance(cfg["n_runs"], bool) or int(cfg["n_runs"]) < 8):
        raise ValueError(f"privacy_audit.config.n_runs must be an int >= 8 or null, got {cfg['n_runs']!r}")
    if isinstance(cfg["workers"], bool) or int(cfg["workers"]) < 1:
        raise ValueError(f"privacy_audit.config.workers must be an int >= 1, got {cfg['workers']!r}")
    if not 0 < float(cfg["alpha"]) < 1:
        raise ValueError(f"privacy_audit.config.alpha must be in (0, 1), got {cfg['alpha']!r}")
    eps = cfg["epsilons"]
    if not isinstance(eps, (list, tuple)) or not eps or any(isinstance(e, bool) or not float(e) > 0 for e in eps):
        raise ValueError(f"privacy_audit.config.epsilons must be a non-empty list of budgets > 0, got {eps!r}")
    cfg["epsilons"] = [float(e) for e in eps]
    cfg["methods"] = methods
    return cfg


def audit_one(
    method: str, options: dict, n_runs, seed: int, alpha: float, power_check: bool, mutant: bool = True
) -> dict:
    """Audit one method; returns its record (plain data, so it can come back from a worker process)."""

    factory = cases()[method]
    eps_param = inspect.signature(factory).parameters.get("epsilon")
    target = options.get("epsilon", None if eps_param is None else eps_param.default)
    t0 = time.perf_counter()
    # thousands of runs: the methods' per-run INFO lines would flood the log (and worker processes
    # do not get the project's logging configuration)
    quiet = [logging.getLogger(name) for name in ("fedclust.clustering", "fedclust.clustered_fl")]
    levels = [lg.level for lg in quiet]
    for lg in quiet:
        lg.setLevel(max(lg.getEffectiveLevel(), logging.WARNING))
    try:
        case = factory(**options)
        mut = factory(**options, noise_scale=MUTANT_NOISE_SCALE) if mutant else None
        rep = audit_case(case, n_runs=n_runs, seed=seed, alpha=alpha, power_check=power_check, mutant=mut)
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)
    d = rep.to_dict()
    d["epsilon_target"] = target
    metrics = {
        "epsilon": rep.case.epsilon,
        "epsilon_target": target,
        "epsilon_paper": case.info.get("epsilon_paper"),
        "epsilon_audited": rep.noisy.epsilon_lower,
        "epsilon_audited_tight": rep.noisy.epsilon_tight,
        "epsilon_audited_noise": rep.noisy.epsilon_noise,
        "noise_ratio_upper": None if rep.noisy.noise_measured is None else rep.noisy.noise_measured["ratio_upper"],
        "tightness": rep.tightness,
        "mutant_epsilon_audited": rep.mutant_epsilon,
        "mutant_epsilon_audited_noise": None if rep.mutant is None else rep.mutant.epsilon_noise,
        "mutant_caught": None if rep.mutant_caught is None else float(rep.mutant_caught),
        "tpr": rep.noisy.tpr,
        "fpr": rep.noisy.fpr,
        "sound": float(rep.sound),
        "audit_time_s": time.perf_counter() - t0,
    }
    if rep.noise_off is not None:
        power = rep.noise_off_power
        metrics["epsilon_audited_noise_off"] = rep.noise_off.epsilon_lower
        metrics["epsilon_audited_noise_off_ceiling"] = power["distribution_free_ceiling"]
        metrics["noise_off_powerful_distribution_free"] = float(power["distribution_free_powerful"])
        if rep.noise_off.epsilon_tight is not None:
            metrics["epsilon_audited_noise_off_tight"] = rep.noise_off.epsilon_tight
        metrics["noise_off_runs"] = float(rep.noise_off.n_runs)
        metrics["powerful"] = float(bool(rep.powerful))
    return {
        "name": f"{method}_eps{target:g}",
        "tags": {"method": method, "kind": "privacy_audit", "epsilon": eps_label(rep.case.epsilon)},
        "params": {
            "n_runs": rep.noisy.n_runs,
            "delta": rep.case.delta,
            "alpha": alpha,
            "seed": seed,
            "description": rep.case.description,
            **{f"case.{k}": v for k, v in options.items()},
        },
        "metrics": {k: float(v) for k, v in metrics.items() if v is not None},
        "history": {},
        "artifacts": {"audit.json": d},
        "audit": d,
    }


def execution_config(cfg: dict) -> dict:
    """The executor settings of a checked config: ``executor: null`` means a pool of ``workers``
    processes (serial for one worker), as before executors existed."""
    out = {
        "executor": cfg.get("executor"),
        "executor_options": dict(cfg.get("executor_options") or {}),
        "resume": cfg.get("resume", True),
    }
    if out["executor"] is None:
        workers = int(cfg["workers"])
        out["executor"] = "serial" if workers == 1 else "processes"
        if workers > 1:
            out["executor_options"].setdefault("max_workers", workers)
    return out


def cells(config: dict | None, data_paths: dict | None = None) -> list[dict]:
    """One cell per selected method and budget: its case options and the audit settings."""
    cfg = check_config(config)
    out = []
    for m in cfg["methods"]:
        opts = dict((cfg["cases"] or {}).get(m) or {})
        budgets = [opts["epsilon"]] if "epsilon" in opts else cfg["epsilons"]
        for e in budgets:
            out.append(
                {
                    "method": m,
                    "options": {**opts, "epsilon": float(e)},
                    "n_runs": cfg["n_runs"],
                    "seed": int(cfg["seed"]),
                    "alpha": float(cfg["alpha"]),
                    "power_check": bool(cfg["power_check"]),
                    "mutant": bool(cfg["mutant"]),
                }
            )
    return out


def run_cell(cell: dict) -> list[dict]:
    """One method's audit record (a pure function of ``cell``)."""

    with thread_limits(1):  # one thread per audit, restored afterwards (the run's compute.threads stays)
        return [
            audit_one(
                cell["method"],
                cell["options"],
                cell["n_runs"],
                cell["seed"],
                cell["alpha"],
                cell["power_check"],
                cell.get("mutant", True),
            )
        ]


def log_record(rec: dict) -> None:
    met = rec["metrics"]

    def f(key):
        return f"{met[key]:.3f}" if key in met else "-"

    logger.info(
        "audit %-18s eps accounted %.3f  audited %.3f  tight %s  noise %s  tightness %s  noise-off %s  "
        "mutant %s %s  %s  (%.1f s)",
        rec["name"],
        met["epsilon"],
        met["epsilon_audited"],
        f("epsilon_audited_tight"),
        f("epsilon_audited_noise"),
        f("tightness"),
        f("epsilon_audited_noise_off"),
        f("mutant_epsilon_audited"),
        {1.0: "caught", 0.0: "MISSED"}.get(met.get("mutant_caught"), "-"),
        "sound" if met["sound"] else "UNSOUND",
        met["audit_time_s"],
    )


def run(config: dict | None, data_paths: dict | None = None, store=None, on_done=None) -> list[dict]:
    """Audit every selected method (see :data:`DEFAULTS`); returns one record per method, in order."""

    # the grids package imports this module: run_grid is looked up when the audit runs
    from fedclust.grids import run_grid

    cfg = check_config(config)

    def done(i, recs, resumed):
        for r in recs:
            log_record(r)
        if on_done is not None:
            on_done(i, recs, resumed)

    return run_grid(
        sys.modules[__name__],
        {**cfg, **execution_config(cfg)},
        data_paths,
        label="privacy_audit",
        store=store,
        on_done=done,
    )


COLUMNS = [
    "method",
    "epsilon_target",
    "epsilon_paper",
    "epsilon",
    "epsilon_audited",
    "epsilon_audited_tight",
    "epsilon_audited_noise",
    "tightness",
    "look_closer",
    "epsilon_audited_noise_off",
    "epsilon_audited_noise_off_tight",
    "noise_off_runs",
    "sound",
    "powerful",
    "mutant_epsilon_audited",
    "mutant_caught",
    "n_runs",
    "audit_time_s",
]


def tables(records: list[dict]) -> dict[str, pd.DataFrame]:
    """One table: ε targeted (the budget asked for), ε the paper's formula claims (where a case
    reports one: ``case.info["epsilon_paper"]``), ε accounted, ε audited (distribution-free, tight,
    measured-noise, noise off), tightness (``look_closer`` when below :data:`LOW_TIGHTNESS`; blank where the case has
    no Gaussian statistic), the mutant's audited ε and the verdicts, per method and budget."""
    rows = []
    for r in records:
        met = r["metrics"]
        tight = met.get("tightness")
        rows.append(
            {
                "method": r["tags"]["method"],
                "epsilon_audited_tight": met.get("epsilon_audited_tight"),
                "epsilon_audited_noise": met.get("epsilon_audited_noise"),
                "tightness": tight,
                "look_closer": "no tight audit" if tight is None else ("LOW" if tight < LOW_TIGHTNESS else ""),
                "mutant_epsilon_audited": met.get("mutant_epsilon_audited"),
                "mutant_caught": None if met.get("mutant_caught") is None else bool(met["mutant_caught"]),
                "epsilon_target": met.get("epsilon_target"),
                "epsilon_paper": met.get("epsilon_paper"),
                "epsilon": met["epsilon"],
                "epsilon_audited": met["epsilon_audited"],
                "epsilon_audited_noise_off": met.get("epsilon_audited_noise_off"),
                "epsilon_audited_noise_off_tight": met.get("epsilon_audited_noise_off_tight"),
                "noise_off_runs": met.get("noise_off_runs"),
                "sound": bool(met["sound"]),
                "powerful": None if "powerful" not in met else bool(met["powerful"]),
                "n_runs": r["params"]["n_runs"],
                "audit_time_s": met["audit_time_s"],
            }
        )
    return {"privacy_audit": pd.DataFrame(rows, columns=COLUMNS)}


def verdict_errors(records: list[dict]) -> list[str]:
    """One message per failed verdict, naming the records: an audited ε above the accounted one (a
    leak), a noise-off bound not above it (no power), a halved-noise mutant not caught."""
    met = [(r["name"], r["metrics"]) for r in records]
    groups = {
        "audited epsilon above the accounted one (a leak)": [n for n, m in met if not m["sound"]],
        "no power (noise-off bound not above the accounted epsilon)": [n for n, m in met if m.get("powerful") == 0.0],
        "halved-noise mutant not caught (the audit cannot see a 2x noise cut)": [
            n for n, m in met if m.get("mutant_caught") == 0.0
        ],
    }
    return [f"{what} for {names}" for what, names in groups.items() if names]


def audit_figure(records: list[dict]):
    """Per method: accounted ε against the audited lower bounds with the noise on and off
    (:func:`fedclust.plots.audit_bars_figure`: log scale, every bar labelled)."""

    # plots (matplotlib) load only when the audit draws its figure
    from fedclust.plots import audit_bars_figure

    return audit_bars_figure(
        [r["name"] for r in records],
        [r["metrics"]["epsilon"] for r in records],
        [r["metrics"]["epsilon_audited"] for r in records],
        [r["metrics"].get("epsilon_audited_noise_off", np.nan) for r in records],
    )
