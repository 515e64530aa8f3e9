"""The clustered-FL options classes are the home of every default: the library's defaults (the
method's ``run`` keywords, then its own tables, then the engine's frozen config) equal them, and a
difference is named."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from fedclust.clustered_fl import cfl_mgd, fedavg, ifca, rr_cluster
from fedclust.clustered_fl.engine import ProcessChunkRunner, RayChunkRunner
from fedclust.clustered_fl.engine.config import EngineConfig
from fedclust.clustered_fl.options import (
    CHUNK_RUNNERS,
    CFLMGDOptions,
    FedAvgOptions,
    IFCAOptions,
    ProcessRunnerOptions,
    RayRunnerOptions,
    RRClusterOptions,
)
from fedclust.registry import REGISTRY

CASES = {
    "cfl_mgd": (CFLMGDOptions, (cfl_mgd.run, EngineConfig)),
    "ifca": (IFCAOptions, (ifca.run, cfl_mgd.run, EngineConfig)),
    "fedavg": (FedAvgOptions, (fedavg.run, EngineConfig)),
    "rr_cluster": (
        RRClusterOptions,
        (rr_cluster.run, rr_cluster.ReleaseSettings, rr_cluster.TRAINING_DEFAULTS, EngineConfig),
    ),
}
_NONE = object()


def _default(source, name: str):
    """The default ``source`` gives ``name``: a function's keyword default, a dataclass field's
    default, a table's entry; ``_NONE`` when it gives none."""
    if isinstance(source, dict):
        return source.get(name, _NONE)
    if dataclasses.is_dataclass(source):
        field = {f.name: f for f in dataclasses.fields(source)}.get(name)
        if field is None or field.default is dataclasses.MISSING:
            return _NONE if field is None or field.default_factory is dataclasses.MISSING else field.default_factory()
        return field.default
    param = inspect.signature(source).parameters.get(name)
    return _NONE if param is None or param.default is inspect.Parameter.empty else param.default


def _name(source) -> str:
    return "a table" if isinstance(source, dict) else source.__qualname__


def differences(options, sources) -> list[str]:
    """Every field of ``options`` whose default differs from the default of the first of ``sources``
    that gives one (or that none of them gives)."""
    out = []
    defaults = options.defaults()
    for name in options.fields():
        found = next((d for d in (_default(src, name) for src in sources) if d is not _NONE), _NONE)
        if found is _NONE:
            out.append(f"{options.__name__}.{name}: no keyword of {[_name(src) for src in sources]}")
        elif found != defaults[name]:
            out.append(f"{options.__name__}.{name}: {defaults[name]!r}, the library's keyword {found!r}")
    return out


@pytest.mark.parametrize("method", list(CASES))
def test_the_library_keyword_defaults_equal_the_options(method):
    options, functions = CASES[method]
    assert differences(options, functions) == []
    assert REGISTRY[method].config.OPTIONS is options  # and the registry config is generated from it


def test_a_drifted_default_is_named():
    def run(*, rounds=301, lr=0.1):
        return rounds, lr

    found = differences(FedAvgOptions, (run,))
    assert "FedAvgOptions.rounds: 300, the library's keyword 301" in found
    assert "FedAvgOptions.eval_every: no keyword of ['test_a_drifted_default_is_named.<locals>.run']" in found


def test_the_chunk_runner_options_have_the_runners_defaults():
    """``<method>.train.chunk_runner``'s options per kind default to what the runner class takes."""
    assert CHUNK_RUNNERS == {
        "serial": None,
        "processes": (ProcessRunnerOptions, ProcessChunkRunner),
        "ray": (RayRunnerOptions, RayChunkRunner),
    }
    assert differences(ProcessRunnerOptions, (ProcessChunkRunner,)) == []
    assert differences(RayRunnerOptions, (RayChunkRunner,)) == []
    # and every option is a keyword of the runner (a renamed keyword would otherwise fail at run time)
    for options, runner in (entry for entry in CHUNK_RUNNERS.values() if entry is not None):
        assert set(options.fields()) <= set(inspect.signature(runner).parameters), runner.__name__
