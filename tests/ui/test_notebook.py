"""The example notebook runs, top to bottom, on the output of a real benchmark run.

The notebook is executed with nbclient in a Jupyter kernel, with ``FEDCLUST_PROJECT`` pointing at a
project copy in which a tiny ``benchmark`` run has just finished. A probe cell, appended to the
in-memory copy only, reports the notebook's own variables as JSON, which the test compares with the
table the pipeline wrote.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = pytest.mark.slow

NOTEBOOK = "notebooks/benchmark_privacy_utility.ipynb"

PROBE = """
import json
print("PROBE " + json.dumps({
    "project_root": str(project_root),
    "methods": sorted(summary["method"].unique().tolist()),
    "not_applicable": sorted(f"{m}@{e:g}" for m, e in zip(not_applicable["method"], not_applicable["epsilon"])),
    "plotted": {f"{t}/{m}@{e:g}": v for t, m, e, v in zip(
        ok["table"], ok["method"], ok["epsilon"], [r[METRIC[t] + "_mean"] for t, (_, r) in zip(ok["table"], ok.iterrows())])},
    "panels": [{"title": ax.get_title(), "ylabel": ax.get_ylabel(),
                "x_labels": [t.get_text() for t in ax.get_xticklabels()],
                "curves": sorted(c.get_label() for c in ax.containers)} for ax in fig.axes],
}))
"""


@pytest.fixture(scope="module")
def kernel_name() -> str:
    for module in ("nbclient", "nbformat", "ipykernel"):
        pytest.importorskip(module, reason=f"{module} is a test dependency: pip install -e '.[test]'")
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" not in KernelSpecManager().find_kernel_specs():
        # ipykernel's wheel ships the spec; install it into the venv when it is missing.
        subprocess.run(
            [sys.executable, "-m", "ipykernel", "install", "--sys-prefix"], check=True, capture_output=True, timeout=60
        )
    return "python3"


def _cell_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_notebook_loads_summary_through_catalog_and_plots(
    benchmark_project, benchmark_methods, project_root, kernel_name, tmp_path, monkeypatch
):
    import nbformat
    from matplotlib import image
    from nbclient import NotebookClient

    nb = nbformat.read(project_root / NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        "the committed notebook must have its outputs cleared"
    )
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))

    figure = benchmark_project / "data" / "08_reporting" / "benchmark" / "notebook_privacy_utility.png"
    assert not figure.exists()
    monkeypatch.setenv("FEDCLUST_PROJECT", str(benchmark_project))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own (inline) backend, as in Jupyter
    # The kernel starts in a folder without pyproject.toml above it: only the env var can find the project.
    NotebookClient(nb, kernel_name=kernel_name, timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()

    probe = json.loads(_cell_text(nb.cells[-1]).split("PROBE ", 1)[1])
    assert probe["project_root"] == str(benchmark_project.resolve())

    # The table the notebook loaded through the catalog is the one the pipeline wrote.
    written = pd.read_csv(benchmark_project / "data" / "08_reporting" / "benchmark" / "summary.csv")
    assert probe["methods"] == sorted(benchmark_methods) == sorted(written["method"].unique())
    # Without a private variant: fedc_gds and the centralized k-means at eps = 4, FedAvg at eps = 8.
    assert probe["not_applicable"] == ["fedavg@8", "fedc_gds@4", "kmeans@4"]
    ok = written[written["status"] == "ok"]
    expected = {
        f"{t}/{m}@{e:g}": r
        for t, m, e, r in zip(ok["table"], ok["method"], ok["epsilon"], ok["ACC_mean"].fillna(ok["test_accuracy_mean"]))
    }
    assert len(expected) == 7 and probe["plotted"].keys() == expected.keys()
    for key, value in expected.items():
        assert probe["plotted"][key] == pytest.approx(value), key
        assert 0.0 <= value <= 1.0

    # Privacy-utility curves, one panel per half: finite budget on the left, "inf" (no DP) at the
    # right end, one curve per method that ran, the half's own metric on the y-axis.
    assert probe["panels"] == [
        {
            "title": "iris, iid",
            "ylabel": "ACC",
            "x_labels": ["4", "∞ (no DP)"],
            "curves": ["fedc_gds", "fkm", "kmeans"],
        },
        {
            "title": "digits, rotated clients",
            "ylabel": "test_accuracy",
            "x_labels": ["8", "∞ (no DP)"],
            "curves": ["fedavg", "rr_cluster"],
        },
    ]
    assert "3 of 10 cells are not applicable" in "".join(_cell_text(c) for c in nb.cells)

    assert figure.is_file(), "the notebook did not save its figure next to the summary"
    pixels = image.imread(figure)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 300
    assert pixels[..., :3].std() > 0.05, "the saved figure is a blank image"
