"""Benchmark records as the grid writes them, for the report's tests (one shape for all of them)."""

from __future__ import annotations


def data_record(
    method: str,
    seed: int,
    metrics: dict,
    *,
    ds: str,
    eps: str = "inf",
    part: str = "iid",
    tm: str = "none",
    status: str = "ok",
    params: dict | None = None,
    name: str | None = None,
) -> dict:
    """A data-clustering record: ``name`` (default ``ds/part/eps/method/seed``), its tags, ``params``
    (the seed and any others given) and ``metrics``."""
    return {
        "name": name or f"{ds}/{part}/{eps}/{method}/{seed}",
        "tags": {
            "family": "data_clustering",
            "status": status,
            "dataset": ds,
            "partition": part,
            "epsilon": eps,
            "method": method,
            "trust_model": tm,
        },
        "params": {"seed": seed, **(params or {})},
        "metrics": metrics,
    }
