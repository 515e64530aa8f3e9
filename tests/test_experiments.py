import pandas as pd
import pytest

from fedclust.experiments import records_frame, summarize, to_markdown
from fedclust.pipelines.privacy.nodes import condense_notes


def _records():
    recs = []
    for method, accs in (("a", [0.5, 0.7]), ("b", [0.9, 0.9])):
        for seed, acc in enumerate(accs):
            recs.append(
                {
                    "name": f"{method}/{seed}",
                    "tags": {"method": method},
                    "params": {"seed": seed},
                    "metrics": {"ACC": acc},
                }
            )
    return recs


def test_summary_is_mean_and_population_std_per_group():
    out = summarize(records_frame(_records()), ["method"], ["ACC", "NMI"])
    row = out.set_index("method").loc["a"]
    assert row["ACC_mean"] == pytest.approx(0.6) and row["ACC_std"] == pytest.approx(0.1)
    assert row["ACC"] == "0.600 ± 0.100" and row["n"] == 2
    assert row["NMI"] == "n/a"  # a metric nobody produced is reported as not applicable


def test_markdown_table_has_one_row_per_group():
    md = to_markdown(pd.DataFrame({"method": ["a", "b"], "ACC": [0.5, float("nan")]}), "t")
    lines = md.strip().splitlines()
    assert lines[0] == "### t" and lines[2] == "| method | ACC |" and lines[-1] == "| b | n/a |"


def test_condense_notes_merges_notes_that_differ_in_numbers():
    out = condense_notes(["q = 0.9 >= 1/2", "q = 0.55 >= 1/2", "other"])
    assert out == ["q = 0.9 >= 1/2 [and 1 more like it]", "other"]
