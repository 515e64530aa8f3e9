"""The library imports at module level. An import inside a function is allowed only with a comment
that says why (a heavy or optional dependency loaded on first use, a cycle, start-up time): on one of
its lines or on the line just above its block."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fedclust"


def unexplained_imports(root: Path) -> list[str]:
    """``path:line: statement`` of every import inside a function of ``root/**.py`` without a comment."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        inside = set()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside.update(n.lineno for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
        for ln in sorted(inside):
            top = ln
            while top - 1 in inside:
                top -= 1
            block = lines[top - 1 : ln]
            above = lines[top - 2].strip() if top > 1 else ""
            if not (above.startswith("#") or any("#" in line for line in block)):
                bad.append(f"{path.relative_to(root)}:{ln}: {lines[ln - 1].strip()}")
    return bad


def test_every_import_inside_a_function_says_why():
    bad = unexplained_imports(SRC)
    assert not bad, "move these imports to the top of their module, or say why they are late:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("def f():\n    import json\n    return json\n", True),
        ("def f():\n    # optional dependency\n    import ray\n    return ray\n", False),
        ("def f():\n    import torch  # only for torch inputs\n    return torch\n", False),
        ("def f():\n    # heavy\n    import a\n    import b\n    return a, b\n", False),
        ("import json\n\n\ndef f():\n    return json\n", False),
    ],
)
def test_the_check_flags_only_unexplained_late_imports(tmp_path, source, flagged):
    (tmp_path / "mod.py").write_text(source)
    assert bool(unexplained_imports(tmp_path)) is flagged
