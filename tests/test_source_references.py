"""The library's docstrings and comments point only at things a reader of the repository can open:
the papers, ``docs/methods/<method>.md`` and other modules. Never at issue numbers, amendments,
external spec files or their sections and resolution labels."""

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

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


def offending_lines(root: Path) -> list[str]:
    """``path:line: text`` of every line under ``root`` (``*.py``) that matches :data:`FORBIDDEN`."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if PATTERN.search(line):
                out.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return out


def test_src_cites_no_issue_amendment_or_spec():
    bad = offending_lines(SRC)
    assert not bad, "references a reader cannot open (cite the paper or docs/methods/):\n" + "\n".join(bad)


@pytest.mark.parametrize("line", [
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
])
def test_the_check_catches_each_kind_of_reference(tmp_path, line):
    (tmp_path / "mod.py").write_text(f"x = 1\n{line}\n")
    assert offending_lines(tmp_path) == [f"mod.py:2: {line}"]


@pytest.mark.parametrize("line", [
    "from fedclust.registry.spec import MethodSpec",
    "for name, spec in REGISTRY.items():",
    "(the paper's Sec. 3.2, Thm 3.9; see docs/methods/fedsc.md)",
    "Algorithm 1 lines 9-10",
])
def test_the_check_leaves_ordinary_code_alone(tmp_path, line):
    (tmp_path / "mod.py").write_text(line + "\n")
    assert offending_lines(tmp_path) == []
