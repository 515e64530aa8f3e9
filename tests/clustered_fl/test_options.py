"""The clustered-FL options classes are the home of every default: the library's keyword defaults
(the method's ``run``, then the engine's) equal them, and a difference is named."""

from __future__ import annotations

import inspect

import pytest

from fedclust.clustered_fl import cfl_mgd, fedavg, ifca, rr_cluster
from fedclust.clustered_fl.engine import ClusteredFLEngine
from fedclust.clustered_fl.options import CFLMGDOptions, FedAvgOptions, IFCAOptions, RRClusterOptions
from fedclust.registry import REGISTRY

ENGINE = ClusteredFLEngine.__init__
CASES = {
    "cfl_mgd": (CFLMGDOptions, (cfl_mgd.run, ENGINE)),
    "ifca": (IFCAOptions, (ifca.run, cfl_mgd.run, ENGINE)),
    "fedavg": (FedAvgOptions, (fedavg.run, ENGINE)),
    "rr_cluster": (RRClusterOptions, (rr_cluster.run, ENGINE)),
}


def differences(options, functions) -> list[str]:
    """Every field of ``options`` whose default differs from the keyword default of the first of
    ``functions`` that takes it (or that none of them takes)."""
    out = []
    defaults = options.defaults()
    for name in options.fields():
        found = [inspect.signature(f).parameters.get(name) for f in functions]
        param = next((p for p in found if p is not None and p.default is not inspect.Parameter.empty), None)
        if param is None:
            out.append(f"{options.__name__}.{name}: no keyword of {[f.__qualname__ for f in functions]}")
        elif param.default != defaults[name]:
            out.append(f"{options.__name__}.{name}: {defaults[name]!r}, the library's keyword {param.default!r}")
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
