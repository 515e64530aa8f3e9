"""Kedro-Viz: `kedro viz build` exports a graph with every registered pipeline, the Kedro layers
on the datasets, one namespace (modular pipeline) per method and tags per stage."""

import json
import os
import shutil
import subprocess
import sys
import time
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
    export = json.loads((proj / "build" / "api" / "main").read_text())
    export["_site"] = proj / "build"
    return export


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


def _method_namespaces() -> list[str]:
    from fedclust.pipelines.methods import CLUSTERED_FL_PIPELINES, METHOD_PIPELINES

    return sorted(name for name, (_, in_tour) in {**METHOD_PIPELINES, **CLUSTERED_FL_PIPELINES}.items() if in_tour)


def test_reporting_datasets_stay_inside_their_method(viz_export):
    """The default graph opens with every method collapsed: a method's reporting outputs (metrics,
    privacy, MLflow datasets, plots) are children of its modular pipeline, never free outputs that
    hang off it (on the old template each tour method had 4, 40 loose nodes in one row)."""
    modular = viz_export["modular_pipelines"]
    names = {n["id"]: n["name"] for n in viz_export["nodes"]}
    for method in _method_namespaces():
        assert method in modular, method
        assert modular[method]["outputs"] == [], (method, [names.get(i) for i in modular[method]["outputs"]])
        children = {names.get(c["id"]) for c in modular[method]["children"]}
        assert {
            f"{method}.metrics",
            f"{method}.privacy",
            f"{method}.history_plot",
            f"{method}.mlflow_metrics",
        } <= children, (method, sorted(c for c in children if c))
    root = {names.get(c["id"]) for c in modular["__root__"]["children"]}
    loose = sorted(n for n in root if n and "." in n and n.split(".")[0] in _method_namespaces())
    assert loose == [], loose


def test_viz_site_opens_on_a_readable_graph(viz_export, tmp_path, project_root):
    """The built site in headless Chromium (first-visit hints off, as after a user closes them):
    the collapsed methods and the data stages are on screen, no tour covers them; the screenshot is
    the docs' docs/kedro_viz.png (copied to data/08_reporting/kedro_viz.png)."""
    import functools
    import http.server
    import threading

    sys.path.insert(0, str(project_root / "tests" / "ui"))
    from browser import open_page, wait_for_text

    site = viz_export["_site"]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with open_page(1600, 1000) as page:
            page.add_init_script(
                "localStorage.setItem('KedroViz', JSON.stringify({showFeatureHints: false, theme: 'light'}))"
            )
            page.goto(f"{base}/")
            text = wait_for_text(page, ["data_processing", "partitioning", *_method_namespaces()], timeout_s=60)
            time.sleep(3)  # the layout animation
            shot = tmp_path / "kedro_viz.png"
            page.screenshot(path=str(shot))
    finally:
        server.shutdown()
    assert "Workflow run status" not in text  # the first-visit tour is not over the graph
    from matplotlib import image

    pixels = image.imread(shot)
    assert pixels.shape[:2] == (1000, 1600)
    assert pixels[..., :3].std() > 0.02
    out = project_root / "data" / "08_reporting"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, out / "kedro_viz.png")


BENCHMARK_STAGES = ["benchmark.data", "benchmark.run", "benchmark.tables", "benchmark.plots", "benchmark.report"]


def test_the_benchmark_is_one_box_of_stages_joined_by_cells_records_and_tables(viz_export):
    """The benchmark's graph: one modular pipeline with no loose output (its 16 reporting outputs
    used to fan out of one box), made of five stages; between them run only the cells, the records
    and the tables, each stage's own outputs (figures, report, summary tables) stay inside it."""
    graph = json.loads((viz_export["_site"] / "api" / "pipelines" / "benchmark").read_text())
    modular = graph["modular_pipelines"]
    names = {n["id"]: n["name"] for n in graph["nodes"]}
    assert modular["benchmark"]["outputs"] == []
    assert set(BENCHMARK_STAGES) <= set(modular)
    between = {names[i] for stage in BENCHMARK_STAGES for i in modular[stage]["outputs"]}
    assert between == {"benchmark.cells", "benchmark.records", "benchmark.tables"}
    plots = {names.get(c["id"]) for c in modular["benchmark.plots"]["children"]}
    assert {"benchmark.privacy_utility_plot", "benchmark.confusion_plot"} <= plots
    report = {names.get(c["id"]) for c in modular["benchmark.report"]["children"]}
    assert {"benchmark.report_html", "benchmark.report_md", "benchmark.run_summary"} <= report


def test_the_benchmark_graph_opens_on_its_stages_in_the_browser(viz_export, tmp_path, project_root):
    """The benchmark's page of the built site in headless Chromium: one box; a click on it shows the
    five stages, on screen at the zoom the site picks; screenshot data/08_reporting/ui/kedro_viz_benchmark.png."""
    import functools
    import http.server
    import threading

    sys.path.insert(0, str(project_root / "tests" / "ui"))
    from browser import open_page, wait_for_text

    site = viz_export["_site"]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    shot = tmp_path / "kedro_viz_benchmark.png"
    try:
        with open_page(1600, 1000) as page:
            page.add_init_script(
                "localStorage.setItem('KedroViz', JSON.stringify({showFeatureHints: false, theme: 'light'}))"
            )
            page.goto(f"{base}/?pid=benchmark")
            wait_for_text(page, ["benchmark.cell_store"], timeout_s=60)
            boxes = page.locator("g.pipeline-node--modularPipeline")
            boxes.first.wait_for(state="visible", timeout=60_000)
            assert boxes.count() == 1  # collapsed: the benchmark is one box
            time.sleep(3)  # the layout animation: a click while the box moves lands elsewhere
            boxes.first.click()
            page.wait_for_function(
                f"document.querySelectorAll('g.pipeline-node--modularPipeline').length >= {len(BENCHMARK_STAGES)}",
                timeout=60_000,
            )
            time.sleep(3)  # the layout animation
            shown = page.evaluate(
                "Array.from(document.querySelectorAll('g.pipeline-node--modularPipeline'))"
                ".filter(g => { const r = g.getBoundingClientRect();"
                " return r.width > 0 && r.top >= 0 && r.bottom <= innerHeight && r.right <= innerWidth; })"
                ".map(g => g.textContent.trim())"
            )
            page.screenshot(path=str(shot))
    finally:
        server.shutdown()
    assert sorted(shown) == sorted(BENCHMARK_STAGES), shown  # every stage on screen, nothing else boxed
    from matplotlib import image

    pixels = image.imread(shot)
    assert pixels.shape[:2] == (1000, 1600) and pixels[..., :3].std() > 0.02
    out = project_root / "data" / "08_reporting" / "ui"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, out / "kedro_viz_benchmark.png")
