"""The MLflow UI, used like a person uses it, on the store of a small benchmark run.

``mlflow server`` is started on a free loopback port against the project copy's SQLite store; the
REST API must find the experiment, the tagged runs, their metrics and their artifacts; headless
Chromium (the system's ``chromium``, driven by Playwright: :mod:`browser`) opens the compare page of
two runs, the filtered runs table and the benchmark's report in the artifact viewer; screenshots are
saved under ``data/08_reporting/`` (of the copy, and of the checkout, git-ignored outputs for people
to look at).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from browser import free_port as _free_port
from browser import open_page, wait_for_text

pytestmark = [
    pytest.mark.slow,
    pytest.mark.allow_skip("needs chromium, installed with apt-get when missing and possible"),
]

SERVER_START_TIMEOUT_S = 60


def _get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _api(base: str, endpoint: str, **query) -> dict:
    return json.loads(_get(f"{base}/api/2.0/mlflow/{endpoint}?{urllib.parse.urlencode(query)}"))


def _post(base: str, endpoint: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{base}/api/2.0/mlflow/{endpoint}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def mlflow_server(benchmark_project, tmp_path_factory):
    """Base URL of ``mlflow server`` on the copy's store; the server is always stopped afterwards."""
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    cmd = [str(mlflow_cli) if mlflow_cli.exists() else "mlflow"]
    port = _free_port()
    cmd += [
        "server",
        "--backend-store-uri",
        f"sqlite:///{benchmark_project / 'mlflow.db'}",
        "--default-artifact-root",
        str(benchmark_project / "mlruns"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    log = tmp_path_factory.mktemp("mlflow_server") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=benchmark_project, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if _get(f"{base}/health", timeout=2).strip() == b"OK":
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"mlflow server did not answer /health in {SERVER_START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)  # the server and its worker(s): its own process group
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=5)


@pytest.fixture(scope="module")
def found(mlflow_server) -> dict:
    """What a user finds through the REST API: the experiment, the parent run and the fkm cells."""
    exp = _api(mlflow_server, "experiments/get-by-name", experiment_name="fedclust")["experiment"]
    fkm = _post(
        mlflow_server,
        "runs/search",
        {
            "experiment_ids": [exp["experiment_id"]],
            "filter": "tags.method = 'fkm' and tags.kind = 'cell'",
            "max_results": 100,
        },
    )
    return {"experiment": exp, "fkm_runs": fkm.get("runs", [])}


def test_rest_api_finds_tagged_runs_metrics_and_artifacts(mlflow_server, found):
    exp = found["experiment"]
    assert exp["name"] == "fedclust" and exp["lifecycle_stage"] == "active"

    runs = found["fkm_runs"]
    cells = {}
    for run in runs:
        tags = {t["key"]: t["value"] for t in run["data"].get("tags", [])}
        metrics = {m["key"]: m["value"] for m in run["data"].get("metrics", [])}
        assert tags["method"] == "fkm" and tags["dataset"] == "iris" and tags["partition"] == "iid"
        cells[tags["epsilon"]] = (metrics, tags["mlflow.parentRunId"])
    # One seed, eps in {inf, 4}: two nested cells, each with its metrics, under one parent run.
    assert sorted(cells) == ["4", "inf"]
    for metrics, _ in cells.values():
        assert {"ACC", "NMI", "ARI"} <= metrics.keys()
        assert 0.0 <= metrics["ACC"] <= 1.0
    # With no privacy, FKM on iris clusters far better than chance (1/3); at eps = 4 it cannot.
    assert cells["inf"][0]["ACC"] > 0.6
    assert cells["4"][0]["ACC"] < cells["inf"][0]["ACC"]
    parents = {p for _, p in cells.values()}
    assert len(parents) == 1

    # Not-applicable cells are runs too, tagged so, without metrics.
    na = _post(
        mlflow_server,
        "runs/search",
        {"experiment_ids": [exp["experiment_id"]], "filter": "tags.status = 'not applicable'"},
    )["runs"]
    na_cells = sorted({t["key"]: t["value"] for t in r["data"]["tags"]}["method"] for r in na)
    assert na_cells == ["fedavg", "fedc_gds", "kmeans"]
    assert all(not r["data"].get("metrics") for r in na)

    # The parent (the `kedro run`) holds the summary table and the plots as artifacts.
    parent = parents.pop()
    listed = _api(mlflow_server, "artifacts/list", run_id=parent, path="benchmark")
    files = {f["path"]: f for f in listed.get("files", [])}
    assert "benchmark/summary.csv" in files and int(files["benchmark/summary.csv"]["file_size"]) > 100
    assert "benchmark/privacy_utility.png" in files
    csv = _get(
        f"{mlflow_server}/get-artifact?" + urllib.parse.urlencode({"path": "benchmark/summary.csv", "run_uuid": parent})
    ).decode()
    assert csv.splitlines()[0].startswith("dataset,partition,epsilon,method")
    assert sum(",fkm," in line for line in csv.splitlines()) == 2
    # its params hold lists: kedro_command re-runs it from the run's config file, saved as an artifact
    tags = {t["key"]: t["value"] for t in _api(mlflow_server, "runs/get", run_id=parent)["run"]["data"]["tags"]}
    assert tags["kedro_command"] == "kedro run --config=kedro_run_config.yml"
    saved = yaml.safe_load(
        _get(
            f"{mlflow_server}/get-artifact?"
            + urllib.parse.urlencode({"path": "kedro_run_config.yml", "run_uuid": parent})
        ).decode()
    )
    assert saved["run"]["pipelines"] == "benchmark"
    assert saved["run"]["params"]["benchmark"]["config"]["methods"] == ["fkm", "fedc_gds", "kmeans"]
    # one name pattern for the cells of both halves
    cells = _post(mlflow_server, "runs/search", {"experiment_ids": [exp["experiment_id"]], "max_results": 500})
    names = [r["info"]["run_name"] for r in cells["runs"] if r["info"]["run_name"].startswith("benchmark/")]
    assert names and all(re.fullmatch(r"benchmark/[^/]+/[^/]+/eps=[^/]+/[^/]+/seed=\d+", n) for n in names)


def _readme_filters(project_root: Path) -> list[str]:
    """The filter examples of the docs (the code block after "Filter the runs table" in the reference
    page on results and MLflow)."""
    text = (project_root / "docs" / "reference" / "results.md").read_text()
    block = text[text.index("Filter the runs table") :].split("```", 2)[1]
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_readme_filters_find_single_runs_and_cells_in_one_list(mlflow_server, found, project_root):
    filters = _readme_filters(project_root)
    assert len(filters) == 3, filters
    exp_id = found["experiment"]["experiment_id"]

    def search(flt: str) -> list[dict]:
        res = _post(mlflow_server, "runs/search", {"experiment_ids": [exp_id], "filter": flt, "max_results": 500})
        return [
            {
                "tags": {t["key"]: t["value"] for t in r["data"].get("tags", [])},
                "metrics": {m["key"]: m["value"] for m in r["data"].get("metrics", [])},
                "name": r["info"]["run_name"],
            }
            for r in res.get("runs", [])
        ]

    # 1. method and budget: the single run and the benchmark cell, one schema of metric columns
    runs = search(filters[0])
    kinds = sorted(r["tags"]["kind"] for r in runs)
    assert kinds == ["cell", "method"], [r["name"] for r in runs]
    for r in runs:
        assert {"ACC", "NMI", "ARI", "epsilon", "private", "wall_time_s"} <= r["metrics"].keys()
        assert r["metrics"]["private"] == 1.0 and 0 < r["metrics"]["epsilon"] < 100
        assert not any(k.startswith("fkm.") for k in r["metrics"])
    single = next(r for r in runs if r["tags"]["kind"] == "method")
    assert single["name"] == "fkm · iris/iid · ε=4 · seed 0"
    # 2. dataset and no privacy: the non-private clustered-FL cells on digits, epsilon sorted last
    runs = search(filters[1])
    assert runs and all(r["metrics"]["private"] == 0.0 and "epsilon" not in r["metrics"] for r in runs)
    assert all(r["tags"]["dataset"] == "digits" for r in runs)
    # 3. cells above an ACC threshold
    runs = search(filters[2])
    assert runs and all(r["tags"]["kind"] == "cell" and r["metrics"]["ACC"] > 0.5 for r in runs)


def _check_screenshot(shot: Path, size: tuple[int, int]) -> None:
    from matplotlib import image

    pixels = image.imread(shot)
    assert pixels.shape[:2] == size
    assert pixels[..., :3].std() > 0.02, "the screenshot is a uniform colour"
    assert len({tuple(p) for p in (pixels[::7, ::7, :3] * 255).astype(int).reshape(-1, 3)}) > 20


def _keep(shot: Path, project_root: Path) -> None:
    """A copy in the checkout, for a person to look at (data/ is git-ignored)."""
    out = project_root / "data" / "08_reporting" / "ui"
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, out / shot.name)


def _quiet_ui(page, base: str) -> None:
    """Local storage as after a user closed MLflow's assistant panel (set on a page of the same
    origin where the app does not run, so the app cannot overwrite it)."""
    page.goto(f"{base}/health")
    page.evaluate(
        "localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');"
        "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true'); true"
    )


def test_chromium_shows_compare_page_of_two_runs(mlflow_server, found, benchmark_project, project_root):
    runs = sorted(found["fkm_runs"], key=lambda r: r["info"]["run_name"])
    assert len(runs) == 2
    ids = [r["info"]["run_id"] for r in runs]
    names = [r["info"]["run_name"] for r in runs]
    # The MLflow 3 UI routes with a hash router: #/compare-runs?runs=[ids]&experiments=[ids] (the
    # URL the experiment page's "Compare" button opens).
    query = (
        f"runs={urllib.parse.quote(json.dumps(ids))}"
        f"&experiments={urllib.parse.quote(json.dumps([found['experiment']['experiment_id']]))}"
    )
    shot = benchmark_project / "data" / "08_reporting" / "ui" / "mlflow_compare.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    with open_page(1400, 900) as page:
        _quiet_ui(page, mlflow_server)
        page.goto(f"{mlflow_server}/#/compare-runs?{query}")
        # what the page shows, as text, once the app has fetched the runs; the metrics section lists ACC
        wait_for_text(page, ["Comparing 2 Runs from 1 Experiment", *names, "ACC"], timeout_s=90)
        page.screenshot(path=str(shot))
    _check_screenshot(shot, (900, 1400))
    _keep(shot, project_root)


def test_the_benchmark_report_opens_in_the_artifact_viewer_with_its_table_and_plot(
    mlflow_server, found, benchmark_project, project_root
):
    """The parent run's report.html, opened as a person opens it (run page, Artifacts tab, the
    file): the page renders in MLflow's viewer with the methods x epsilon table, the best marker and
    the privacy-utility plot visible (the image decoded, on screen)."""
    exp_id = found["experiment"]["experiment_id"]
    parent = found["fkm_runs"][0]["data"]["tags"]
    parent_id = next(t["value"] for t in parent if t["key"] == "mlflow.parentRunId")
    metrics = {
        m["key"]: m["value"] for m in _api(mlflow_server, "runs/get", run_id=parent_id)["run"]["data"]["metrics"]
    }
    assert "best_ACC_eps_4" in metrics and "best_ACC_eps_inf" in metrics  # the parent run's best per budget
    assert all(abs(v) <= 1e300 for v in metrics.values())
    shot = benchmark_project / "data" / "08_reporting" / "ui" / "mlflow_report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    with open_page(1600, 1000) as page:
        _quiet_ui(page, mlflow_server)
        page.goto(f"{mlflow_server}/#/experiments/{exp_id}/runs/{parent_id}/artifacts/benchmark/report.html")
        wait_for_text(page, ["benchmark/report.html"], timeout_s=90)
        iframe = page.locator("iframe").last  # the viewer renders the page in an iframe of its own
        iframe.wait_for(state="visible", timeout=60_000)
        report = iframe.element_handle().content_frame()
        assert report is not None, "the artifact viewer's iframe holds no page"
        text = wait_for_text(
            report,
            ["fedclust benchmark", "ACC (mean)", "iris / iid", "fkm", "What each method protects", "Fewer than 3"],
            timeout_s=60,
        )
        table = report.locator("table.methods").first
        assert table.is_visible() and table.locator("tbody tr").count() >= 4
        # one seed: no interval; at ∞ three methods ran (one best or a tie), at 4 only fkm (no mark)
        assert report.locator("tr.best, tr.tie").count() >= 1
        plot = report.locator("img.privacy-utility").first
        plot.scroll_into_view_if_needed()
        assert plot.is_visible()
        natural, shown = report.evaluate(
            "(() => { const i = document.querySelector('img.privacy-utility');"
            " return [i.naturalWidth, i.getBoundingClientRect().width]; })()"
        )
        assert natural > 300 and shown > 300, (natural, shown)  # decoded and drawn, not a broken image
        assert iframe.is_visible() and iframe.bounding_box()["height"] > 300
        page.screenshot(path=str(shot))
    assert "± " not in text and "[95% CI]" not in text and "secure_aggregation" in text
    # the header lists what ran, both halves; a row names its protection entry, listed once
    assert "data clustering: data sets iris; partitions iid; ε in {4, ∞ (no DP)}" in text
    assert "clustered FL: data sets digits" in text and "methods fedavg, rr_cluster" in text
    # the latest report is a file at a stable path; this run's copy is kept next to it
    latest = benchmark_project / "data" / "08_reporting" / "benchmark" / "report.html"
    assert latest.is_file() and (latest.parent / "report.md").is_file()
    (copy,) = (latest.parent / "versions" / "report.html").glob("*/report.html")
    assert copy.read_text() == latest.read_text()
    _check_screenshot(shot, (1000, 1600))
    _keep(shot, project_root)


#: metric and tag columns shown in the runs table for the docs' filters (the one metric schema)
RUNS_TABLE_COLUMNS = [
    "metrics.`ACC`",
    "metrics.`NMI`",
    "metrics.`ARI`",
    "metrics.`epsilon`",
    "metrics.`wall_time_s`",
    "tags.`method`",
    "tags.`kind`",
]


def _runs_table_state(search_filter: str, expanded: list[str]) -> dict:
    """The MLflow 3 runs page's saved view (what a user sets with "Columns" and the row
    expanders): the filter, the schema's metric columns, the parents of matching cells expanded."""
    return {
        "searchFilter": search_filter,
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "datasetsFilter": [],
        "modelVersionFilter": "All Runs",
        "selectedColumns": RUNS_TABLE_COLUMNS,
        "columnOrder": [],
        "columnWidths": {},
        "runsExpanded": {run_id: True for run_id in expanded},
        "runsPinned": [],
        "runsHidden": [],
        "runsVisibilityMap": {},
        "runsHiddenMode": "FIRST_10_RUNS",
        "viewMaximized": False,
        "runListHidden": False,
        "isAccordionReordered": False,
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        "groupBy": None,
        "groupsExpanded": {},
        "autoRefreshEnabled": False,
    }


def test_browser_runs_table_shows_readme_filter_results_with_shared_columns(
    mlflow_server, found, benchmark_project, project_root
):
    """The docs' first filter typed into the runs table of a real browser lists the single FKM
    run and the matching benchmark cell together, under the same metric columns; screenshot saved."""
    exp_id = found["experiment"]["experiment_id"]
    flt = _readme_filters(project_root)[0]
    matches = _post(mlflow_server, "runs/search", {"experiment_ids": [exp_id], "filter": flt})["runs"]
    tags = [{t["key"]: t["value"] for t in r["data"]["tags"]} for r in matches]
    names = sorted(r["info"]["run_name"] for r in matches)
    assert sorted(t["kind"] for t in tags) == ["cell", "method"], names
    parents = sorted({t["mlflow.parentRunId"] for t in tags if "mlflow.parentRunId" in t})
    cell = next(r for r, t in zip(matches, tags) if t["kind"] == "cell")
    acc_cell = next(m["value"] for m in cell["data"]["metrics"] if m["key"] == "ACC")

    state_key = f'MLflowLocalStorage-1.1-ExperimentPage-["{exp_id}"]-ReactComponentState'
    shot = benchmark_project / "data" / "08_reporting" / "ui" / "mlflow_runs_filtered.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    with open_page(1600, 900) as page:
        # The saved view is written on a page of the same origin where the app does not run (the
        # app would overwrite it), then the runs page opens in the "Model training" workflow.
        _quiet_ui(page, mlflow_server)
        page.evaluate(
            f"localStorage.setItem({json.dumps(state_key)}, "
            f"{json.dumps(json.dumps(_runs_table_state(flt, parents)))}); true"
        )
        query = urllib.parse.urlencode(
            {"searchFilter": flt, "workflowType": "machine_learning"}, quote_via=urllib.parse.quote
        )
        page.goto(f"{mlflow_server}/#/experiments/{exp_id}/runs?{query}")
        text = wait_for_text(page, [*names, "ACC", "NMI", "epsilon"], timeout_s=90)
        page.screenshot(path=str(shot))
    # Both kinds of run in one list, with the metric columns of the one schema and the cell's value.
    assert "matching runs" in text
    assert f"{acc_cell:.4g}"[:4] in text, f"the cell's ACC {acc_cell} is not in the table"
    _check_screenshot(shot, (900, 1600))
    _keep(shot, project_root)
