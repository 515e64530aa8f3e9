"""The documentation site: the parameter reference is generated from conf/base and the method registry's
config classes (docs/hooks.py) and lists every key of both with a description; every page of docs/ is
in the site's nav. `make docs` (run by `make test`) builds the site with --strict, which fails on a
broken link or anchor and on a page left out of the nav."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from fedclust.options import param
from fedclust.registry import REGISTRY
from fedclust.registry.configs import FKMConfig

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load_hooks():
    """docs/hooks.py, loaded from its file as MkDocs loads it (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("fedclust_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are built
    spec.loader.exec_module(module)
    return module


hooks = _load_hooks()


def _groups(reference: dict) -> dict:
    return {group.name: group for groups in reference.values() for group in groups}


def _page_rows(page: str) -> dict[str, set[str]]:
    """``{group: {key, ...}}`` of the rendered page: the keys of the table under each ``### `group```."""
    out: dict[str, set[str]] = {}
    group = None
    for line in page.splitlines():
        heading = re.match(r"^### `([^`]+)`$", line)
        if heading:
            group = heading.group(1)
            out[group] = set()
            continue
        row = re.match(r"^\| `([^`]+)` \|", line)
        if row and group is not None:
            out[group].add(row.group(1))
    return out


def _leaves(tree, prefix: str = "") -> list[str]:
    """Dotted paths of the values of a parameter tree (a non-empty mapping is walked into)."""
    if isinstance(tree, dict) and tree:
        return [leaf for key, value in tree.items() for leaf in _leaves(value, f"{prefix}.{key}" if prefix else key)]
    return [prefix]


@pytest.fixture(scope="module")
def page() -> str:
    return hooks.render()


@pytest.mark.parametrize("method", list(REGISTRY))
def test_every_config_key_has_a_row_with_its_default_and_a_description(method, page):
    config = REGISTRY[method].config
    group = _groups(hooks.reference())[f"{method}.train"]
    rows = {row.key: row for row in group.rows}
    assert set(config.fields()) <= set(rows), set(config.fields()) - set(rows)
    undescribed = [key for key in config.fields() if not rows[key].meaning.strip()]
    assert not undescribed, f"{method}.train keys without a description (add doc= or a YAML comment): {undescribed}"
    for key, default in config.defaults().items():
        assert yaml.safe_load(rows[key].default) == default, (key, rows[key].default, default)
    assert set(config.fields()) <= _page_rows(page)[f"{method}.train"]


def test_every_key_of_conf_base_has_a_row(page):
    """Every value of conf/base/parameters*.yml is on the page: its own row, or the row of the mapping
    written in one line that holds it."""
    shown = _page_rows(page)
    missing = []
    for path in sorted((ROOT / "conf" / "base").glob("parameters*.yml")):
        for top, tree in (yaml.safe_load(path.read_text()) or {}).items():
            if top in REGISTRY:
                tree = {k: v for k, v in tree.items() if k != "train"}
                keys = shown.get(f"{top}.train", set())
                missing += [f"{top}.train.{k}" for k in REGISTRY[top].config.fields() if k not in keys]
                if not tree:
                    continue
            rows = shown.get(top, set())
            for leaf in _leaves(tree) if isinstance(tree, dict) and tree else [top]:
                parts = leaf.split(".")
                if not any(".".join(parts[:n]) in rows for n in range(1, len(parts) + 1)):
                    missing.append(f"{top}.{leaf}")
    assert not missing, f"keys of conf/base missing from the parameter reference: {missing}"


def test_a_config_key_that_its_file_lacks_still_gets_a_row():
    """The rows come from the config class, not only from the file: a new key appears with the class's
    default and description (and the page cannot silently drop it)."""

    @dataclasses.dataclass(frozen=True)
    class Extended(FKMConfig):
        brand_new: int = param(7, "int", ge=1, doc="a key added to the class only")

    registry = {"fkm": SimpleNamespace(config=Extended, library=REGISTRY["fkm"].library)}
    rows = {row.key: row for row in _groups(hooks.reference(registry=registry))["fkm.train"].rows}
    assert (rows["brand_new"].default, rows["brand_new"].meaning) == ("7", "a key added to the class only")
    assert rows["brand_new"].checks == "integer ≥ 1"
    assert "| `brand_new` | `7` |" in hooks.render(registry=registry)


def test_checks_column_says_what_a_value_is_checked_against():
    fields = REGISTRY["dp_fedc"].config.fields()
    assert hooks.checks_of(fields["budget"]) == "text: `accountant` \\| `paper`"
    assert hooks.checks_of(fields["q_cap"]) == "number > 0 < 1"
    assert hooks.checks_of(fields["rounds"]) == "integer ≥ 1"


def test_yaml_comments_are_read_with_their_continuation_lines(tmp_path):
    (tmp_path / "parameters_x.yml").write_text(
        "# the file's header\n"
        "\n"
        "# the group's intro\n"
        "grp:\n"
        "  a: 1          # first line\n"
        "                # second line\n"
        "  # above b\n"
        "  b: [1, 2]     # b's own | with a pipe\n"
        "  c: {x: 1}\n"
        "  d:\n"
        "    - 1\n"
        "    - 2\n"
    )
    group = _groups(hooks.reference(base=tmp_path, registry={}))["grp"]
    rows = {row.key: (row.default, row.meaning) for row in group.rows}
    assert group.intro == "the group's intro"
    assert rows == {
        "a": ("1", "first line second line"),
        "b": ("[1, 2]", "above b b's own | with a pipe"),
        "c": ("{x: 1}", ""),
        "d": ("[1, 2]", ""),
    }
    assert "b's own \\| with a pipe" in hooks.render(base=tmp_path, registry={})


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return [page for item in nav for page in _nav_pages(item)]


def test_every_page_of_docs_is_in_the_nav_and_every_nav_page_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = set(_nav_pages(config["nav"]))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    generated = {hooks.PAGE}
    assert on_disk - nav == set(), "pages missing from the nav of mkdocs.yml"
    assert nav - on_disk - generated == set(), "nav entries without a page"
    assert not (generated & on_disk), "a generated page must not also be a file"


def test_no_hand_written_test_counts_in_the_readme_or_the_docs():
    """A number of tests in prose goes stale with the next test; counts come from a command."""
    texts = [ROOT / "README.md", *DOCS.rglob("*.md")]
    bad = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in texts
        for m in re.finditer(r"\b\d[\d,]* (?:tests|test cases)\b", p.read_text())
    ]
    assert not bad, bad
