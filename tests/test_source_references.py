"""The repository points only at things a reader of it can open: the papers, ``docs/methods/<method>.md``
and other modules. Never at issue numbers, amendments, external spec files or their sections and
resolution labels: not in the library's docstrings and comments, nor in the benchmark scripts, the
config comments, the README, the docs or the notebooks."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
#: what a reader sees besides the library: folder -> glob of the files checked in it
OTHER_PLACES = {
    "benchmarks": "*.py",
    "conf": "**/*.yml",
    ".": "README.md",
    "docs": "**/*.md",
    "notebooks": "*.ipynb",
}

#: name -> pattern of a reference that a reader of the repository cannot follow
FORBIDDEN = {
    "issue number": r"\bissues?\s*#?\d+|\bissue[-_]?\d+",
    "amendment": r"\bamendments?\b",
    "spec file": r"\bspecs?/|\b\d{3}_[a-z_]+\.md\b",
    "spec section": r"\bspec[\s-]+(?:\d|A-?\d|§)|\bspec's\b|\bthe spec\b|§",
    "resolution label": r"\bRESOLUTIONS?\b|\bA-?\d{1,2}\b|\bambiguit(?:y|ies)\s+\d",
    "section number of a spec": r"\bsections?\s+\d+\.\d+|\bitem\s+\d+",
}
PATTERN = re.compile("|".join(f"(?:{p})" for p in FORBIDDEN.values()), re.IGNORECASE)


def notebook_texts(path: Path) -> list[tuple[str, str]]:
    """``(where, text)`` of every cell's source and text output of a notebook; images are left out (their
    base64 text would match by chance)."""
    out = []
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"], 1):
        out.append((f"cell {i}", "".join(cell.get("source", []))))
        for output in cell.get("outputs", []):
            texts = [output.get("text", "")] + [
                output.get("data", {}).get(kind, "") for kind in ("text/plain", "text/markdown")
            ]
            out.append((f"cell {i} output", "".join("".join(t) if isinstance(t, list) else t for t in texts)))
    return out


def offending_lines(root: Path, glob: str = "**/*.py") -> list[str]:
    """``path:line: text`` of every line of the files ``glob`` matches under ``root`` that matches
    :data:`FORBIDDEN` (``path:cell N:line: text`` in a notebook)."""
    out = []
    for path in sorted(root.glob(glob)):
        name = path.relative_to(root)
        texts = notebook_texts(path) if path.suffix == ".ipynb" else [("", path.read_text(encoding="utf-8"))]
        for where, text in texts:
            for n, line in enumerate(text.splitlines(), 1):
                if PATTERN.search(line):
                    out.append(f"{name}:{where + ':' if where else ''}{n}: {line.strip()}")
    return out


def test_src_cites_no_issue_amendment_or_spec():
    bad = offending_lines(SRC)
    assert not bad, "references a reader cannot open (cite the paper or docs/methods/):\n" + "\n".join(bad)


@pytest.mark.parametrize(("folder", "glob"), OTHER_PLACES.items())
def test_benchmarks_config_docs_and_notebooks_cite_no_issue_amendment_or_spec(folder, glob):
    assert list((ROOT / folder).glob(glob)), f"nothing to check: {folder}/{glob}"
    bad = offending_lines(ROOT / folder, glob)
    assert not bad, (
        f"{folder}/: references a reader cannot open (say what it is, cite the paper or "
        "docs/methods/):\n" + "\n".join(bad)
    )


@pytest.mark.parametrize(
    "line",
    [
        "# the final C-step (issue 17)",
        '"""Privacy (amendment A-1)."""',
        "Spec: ``specs/001_fed_spectral.md``",
        "(spec 2.6 RESOLUTION)",
        "(spec 000, A9)",
        "the spec's typo fix",
        "as spec 003's MNIST_bals asks",
        "Mironov et al. 2019, §3",
        "(section 2.1.6 and A6/A18)",
        "the spec-004 CNN",
        'ap.add_argument("--six-files", "--issue17", dest="issue17")',
        "def issue17_table(names, seeds, P=8):",
        "ISSUE17_COLS = [...]",
    ],
)
def test_the_check_catches_each_kind_of_reference(tmp_path, line):
    (tmp_path / "mod.py").write_text(f"x = 1\n{line}\n")
    assert offending_lines(tmp_path) == [f"mod.py:2: {line}"]


@pytest.mark.parametrize(
    "line",
    [
        "from fedclust.registry.spec import MethodSpec",
        "for name, spec in REGISTRY.items():",
        "(the paper's Sec. 3.2, Thm 3.9; see docs/methods/fedsc.md)",
        "Algorithm 1 lines 9-10",
        "rows_spec = [",
        "rho_factor: 1.0e-2  # a stronger one-hot penalty than the paper's 1.0e-7: see docs/methods/dp_fedc.md",
        "| `dp_fedc_grid` | the DP-FedC experiments | DP-FedC's Table I, Figs. 3-4 |",
        'ap.add_argument("--six-files", dest="six_files", action="store_true")',
    ],
)
def test_the_check_leaves_ordinary_code_alone(tmp_path, line):
    (tmp_path / "mod.py").write_text(line + "\n")
    assert offending_lines(tmp_path) == []


def _notebook(source: str, image: str) -> str:
    return json.dumps(
        {
            "cells": [
                {"cell_type": "markdown", "source": ["# Privacy against utility\n", source]},
                {
                    "cell_type": "code",
                    "source": ["plot()"],
                    "outputs": [
                        {"output_type": "display_data", "data": {"image/png": image, "text/plain": "<Figure>"}}
                    ],
                },
            ]
        }
    )


@pytest.mark.parametrize(
    ("name", "text", "glob", "expected"),
    [
        (
            "base/parameters.yml",
            "dp_fedc:\n  G: 0.03  # gradient clip (spec A4)\n",
            "**/*.yml",
            ["base/parameters.yml:2: G: 0.03  # gradient clip (spec A4)"],
        ),
        (
            "methods/fedsc.md",
            "# FedSC\n\nThe graph (issue 17) is ours.\n",
            "**/*.md",
            ["methods/fedsc.md:3: The graph (issue 17) is ours."],
        ),
        (
            "tour.ipynb",
            _notebook("As amendment A-1 asks.", "iVBOR+A12/specs/x"),
            "*.ipynb",
            ["tour.ipynb:cell 1:2: As amendment A-1 asks."],
        ),
        ("tour.ipynb", _notebook("Accounted against audited epsilon.", "iVBOR+A12/specs/x"), "*.ipynb", []),
    ],
)
def test_the_check_reads_config_markdown_and_notebook_cells(tmp_path, name, text, glob, expected):
    """YAML and Markdown line by line; a notebook by its cells' sources and text outputs, never its
    images (base64 such as ``+A12/`` would otherwise read as a resolution label)."""
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
    assert offending_lines(tmp_path, glob) == expected
