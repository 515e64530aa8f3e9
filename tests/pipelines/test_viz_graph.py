"""Kedro-Viz: `kedro viz build` exports a graph with every registered pipeline, the Kedro layers
on the datasets, one namespace (modular pipeline) per method and tags per stage."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def viz_export(tmp_path_factory, project_root):
    import shutil

    proj = tmp_path_factory.mktemp("vizproj")
    shutil.copy(project_root / "pyproject.toml", proj / "pyproject.toml")
    shutil.copy(project_root / ".telemetry", proj / ".telemetry")
    shutil.copytree(project_root / "conf", proj / "conf", ignore=shutil.ignore_patterns("local"))
    (proj / "conf" / "local").mkdir()
    (proj / "src").mkdir()
    kedro = Path(sys.executable).with_name("kedro")
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1", "MPLBACKEND": "Agg"}
    out = subprocess.run([str(kedro), "viz", "build"], cwd=proj, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads((proj / "build" / "api" / "main").read_text())


def test_graph_holds_every_registered_pipeline(viz_export):
    from kedro.framework.project import configure_project, pipelines

    configure_project("fedclust")
    exported = {p["id"] for p in viz_export["pipelines"]}
    assert set(pipelines.keys()) <= exported


def test_layers_namespaces_and_stage_tags(viz_export):
    assert viz_export["layers"] == ["primary", "model_input", "model_output", "reporting"]
    data_nodes = {n["name"]: n for n in viz_export["nodes"] if n["type"] == "data"}
    assert data_nodes["dataset"]["layer"] == "primary"
    assert data_nodes["fkm.metrics"]["layer"] == "reporting"
    assert data_nodes["fkm.result"]["layer"] == "model_output"
    modular = set(viz_export["modular_pipelines"])
    assert {"fkm", "data_processing", "partitioning"} <= modular
    tags = {t["id"] for t in viz_export["tags"]}
    assert {"data", "partition", "calibration", "training", "evaluation", "privacy", "reporting"} <= tags
