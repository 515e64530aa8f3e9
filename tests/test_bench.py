"""The benchmark harness (fedclust.bench): table parsing for --json, interleaved timing, formatting."""

import json

import numpy as np

from fedclust import bench


def test_markdown_tables_keep_heading_headers_and_rows():
    text = (
        "# Run\nintro line\n## 1. Speed\n\n| engine | s |\n|---|---:|\n| loop | 2.0 |\n| vec | 0.1 |\n\n"
        "not a table | at all |\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    )
    tables = bench.markdown_tables(text)
    assert tables == [
        {"title": "1. Speed", "headers": ["engine", "s"], "rows": [["loop", "2.0"], ["vec", "0.1"]]},
        {"title": "1. Speed", "headers": ["a", "b"], "rows": [["1", "2"]]},
    ]


def test_table_output_parses_back(capsys):
    bench.table(["method", "ACC"], [("FKM", "0.91"), ("sklearn KMeans", 0.9)], title="ACC")
    out = capsys.readouterr().out
    assert bench.markdown_tables(out) == [
        {"title": "ACC", "headers": ["method", "ACC"], "rows": [["FKM", "0.91"], ["sklearn KMeans", "0.9"]]}
    ]
    widths = {len(line) for line in out.splitlines() if line.startswith("|")}
    assert len(widths) == 1  # aligned columns


def test_interleaved_runs_cases_in_turn_and_takes_the_median(monkeypatch):
    calls = []
    fake = iter([1.0, 10.0, 3.0, 30.0, 2.0, 20.0])

    def timed(fn):
        return fn(), next(fake)

    monkeypatch.setattr(bench, "timed", timed)
    res: dict = {}
    med = bench.interleaved(
        {"a": lambda: calls.append("a") or "A", "b": lambda: calls.append("b") or "B"}, 3, results=res
    )
    assert calls == ["a", "b", "a", "b", "a", "b"]
    assert med == {"a": 2.0, "b": 20.0}
    assert res == {"a": "A", "b": "B"}


def test_mean_std_and_fmt():
    assert bench.mean_std([0.5, 0.7], scale=100, nd=1) == "60.0 ± 10.0"
    assert bench.fmt(float("nan")) == "n/a"
    assert bench.fmt(12345.0) == "1.23e+04"
    assert bench.fmt(0.12345, 2) == "0.12"


def test_session_writes_args_and_printed_tables(tmp_path):
    path = tmp_path / "out" / "r.json"
    args = bench.parser("Demo benchmark.", quick="fast", seeds=3).parse_args(["--quick", "--json", str(path)])
    with bench.session(args) as report:
        bench.table(["k", "v"], [("x", 1)], title="T")
        report["results"] = {"speedup": np.float64(2.5), "bad": float("inf")}
    doc = json.loads(path.read_text())
    assert doc["args"] == {"quick": True, "seeds": 3, "json": str(path)}
    assert doc["tables"] == [{"title": "T", "headers": ["k", "v"], "rows": [["x", "1"]]}]
    assert doc["results"] == {"speedup": 2.5, "bad": "inf"}
    assert doc["peak_rss_mb"] > 0
