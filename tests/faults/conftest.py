"""Fixtures of the fault suite: one throw-away project copy per module, under a folder with a
non-ASCII name (so every case also runs on a unicode path), holding a finished run's results and a
grid's cell file, which no failed run may change (:func:`unchanged`)."""

from __future__ import annotations

import pytest
from faultkit import TINY, Project


@pytest.fixture(scope="module")
def project(tmp_path_factory, project_copy) -> Project:
    """A project copy (on a unicode path) holding one finished fkm run's results and a grid cell file."""
    root = project_copy(tmp_path_factory.mktemp("faults") / "projet_é_数据")
    proj = Project(root)
    first = proj.run("--pipelines=fkm", f"--params={TINY}")
    assert first.code == 0, first.err[-3000:]
    assert [status for _, status in first.new_runs] == ["FINISHED"]
    cells = root / "data" / "08_reporting" / "fedsc_grid" / "cells.jsonl"
    cells.parent.mkdir(parents=True, exist_ok=True)
    cells.write_text('{"key": "a stored cell", "record": {"ACC": 0.5}}\n')
    return proj


@pytest.fixture
def unchanged(project):
    """Asserts, after the test, that no stored result changed or disappeared."""
    before = project.fingerprint()
    yield
    after = project.fingerprint()
    assert {k: after.get(k) for k in before} == before
