"""The start-up collector policy (fedclust.gc_pause, fedclust.hooks.StartupGCHook): paused inside a
block, frozen after it only in a ``kedro`` command, restored in every case."""

from __future__ import annotations

import gc
import sys
import types
import weakref

import pytest
from kedro.framework.hooks import hook_impl
from kedro.framework.hooks.manager import _create_hook_manager

from fedclust import gc_pause
from fedclust.gc_pause import is_kedro_command, long_lived
from fedclust.hooks import StartupGCHook


class Node:
    """A weak-referenceable object to build reference cycles with."""

    def __init__(self):
        self.other = None


def cycle() -> weakref.ref:
    """A two-object cycle that is garbage at once; a weak reference to one of its objects."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def collector_restored():
    """Every test leaves the collector as it found it (enabled, nothing frozen by the test)."""
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    yield
    gc.unfreeze()
    gc.enable()
    if frozen:  # what was frozen before the test (by nothing in a test session, normally)
        gc.freeze()


def test_the_collector_is_paused_inside_and_enabled_after():
    with long_lived(freeze=False):
        assert not gc.isenabled()
    assert gc.isenabled()


def test_without_freezing_nothing_is_frozen_and_garbage_is_still_collected():
    with long_lived(freeze=False):
        ref = cycle()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None


def test_freezing_moves_what_is_alive_out_of_the_collectors_reach():
    with long_lived(freeze=True):
        kept = [[i] for i in range(5000)]  # 5001 tracked containers made in the block
    assert gc.get_freeze_count() >= len(kept) + 1
    assert all(gc.is_tracked(x) for x in kept[:3])  # still tracked, only ignored by passes


def test_garbage_from_before_the_block_is_freed_not_frozen():
    ref = cycle()  # garbage already, not yet collected
    assert ref() is not None
    with long_lived(freeze=True):
        pass
    assert ref() is None


def test_garbage_made_inside_a_frozen_block_is_kept():
    # the documented cost of freezing: cyclic garbage made in the block survives later passes
    with long_lived(freeze=True):
        ref = cycle()
    gc.collect()
    assert ref() is not None
    gc.unfreeze()
    gc.collect()
    assert ref() is None


def test_the_collector_is_restored_when_the_block_raises():
    with pytest.raises(RuntimeError), long_lived(freeze=False):
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_nested_blocks_leave_the_collector_paused_for_the_outer_one():
    with long_lived(freeze=False):
        with long_lived(freeze=False):
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_switched_off_before_stays_off():
    gc.disable()
    with long_lived(freeze=False):
        pass
    assert not gc.isenabled()


@pytest.mark.parametrize(
    ("argv0", "main_spec", "expected"),
    [
        ("/home/me/project/.venv/bin/kedro", None, True),
        ("kedro.exe", None, True),
        ("-m", "kedro.__main__", True),  # python -m kedro run
        ("/usr/lib/python3/site-packages/pytest/__main__.py", "pytest.__main__", False),
        ("/usr/lib/python3/site-packages/ipykernel_launcher.py", None, False),
        ("", None, False),
    ],
)
def test_a_kedro_command_is_told_from_other_hosts(monkeypatch, argv0, main_spec, expected):
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name=main_spec) if main_spec else None
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", [argv0, "run"])
    assert is_kedro_command() is expected


@pytest.mark.parametrize("command", [True, False])
def test_by_default_only_a_kedro_command_freezes(monkeypatch, command):
    monkeypatch.setattr(gc_pause, "is_kedro_command", lambda: command)
    with long_lived():
        kept = [[i] for i in range(1000)]
    assert (gc.get_freeze_count() >= len(kept)) is command


class Probe:
    """Records whether the collector ran while the other plugins' set-up hooks ran."""

    def __init__(self):
        self.enabled = {}

    @hook_impl
    def after_context_created(self, context):
        self.enabled["after_context_created"] = gc.isenabled()

    @hook_impl
    def before_pipeline_run(self, run_params, pipeline, catalog):
        self.enabled["before_pipeline_run"] = gc.isenabled()
        if run_params.get("fail"):
            raise RuntimeError("a plugin failed")


@pytest.mark.parametrize("command", [True, False])
def test_the_startup_hook_pauses_the_collector_around_every_plugins_set_up(monkeypatch, command):
    monkeypatch.setattr(gc_pause, "is_kedro_command", lambda: command)
    manager = _create_hook_manager()
    probe = Probe()
    manager.register(StartupGCHook())
    manager.register(probe)
    manager.hook.after_context_created(context=None)
    assert gc.isenabled()
    manager.hook.before_pipeline_run(run_params={}, pipeline=None, catalog=None)
    assert gc.isenabled()
    assert probe.enabled == {"after_context_created": False, "before_pipeline_run": False}
    assert (gc.get_freeze_count() > 0) is command
    with pytest.raises(RuntimeError, match="a plugin failed"):
        manager.hook.before_pipeline_run(run_params={"fail": True}, pipeline=None, catalog=None)
    assert gc.isenabled()
