"""MkDocs hook: the parameter reference (``reference/parameters.md``), written at every build from the
two places that define the parameters, so that it cannot go stale:

* ``conf/base/parameters*.yml``: every key, its default as the file writes it, and its comment (the
  comment on the key's line, the comment lines indented below it, and a comment block right above it);
* the method registry's config classes (``fedclust.registry``): for every ``<method>.train`` key, what
  a value is checked against (kind, range, choices) and the class's own description of the key.

:func:`render` returns the page; :func:`reference` the rows behind it (``tests/test_docs.py`` checks
that every key of both sources has a row with a description). The page is generated in memory: it is
not a file of the repository.
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import inspect
from pathlib import Path

import yaml
from mkdocs.structure.files import File

from fedclust import partition
from fedclust.data.registry import DATASET_NAMES
from fedclust.options import MethodConfig
from fedclust.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "conf" / "base"
#: where the generated page sits in the site
PAGE = "reference/parameters.md"


@dataclasses.dataclass
class Row:
    """One key of a parameter group."""

    key: str
    default: str
    checks: str = ""
    meaning: str = ""


@dataclasses.dataclass
class Group:
    """A parameter group: a top-level key of a parameter file, or a method's ``<method>.train``."""

    name: str
    intro: str = ""
    rows: list[Row] = dataclasses.field(default_factory=list)
    #: the config class that checks the group (``<method>.train`` only)
    config: type | None = None


# ---- comments of a YAML file ------------------------------------------------------------------------


def _comment(line: str) -> str | None:
    """The comment of a line (after a ``#`` outside quotes), or None."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[i + 1 :].strip()
    return None


def _is_comment_only(line: str) -> bool:
    return line.lstrip().startswith("#")


def _column(line: str) -> int:
    return len(line) - len(line.lstrip())


def _key_comment(lines: list[str], key_node, value_node) -> tuple[str, str]:
    """``(leading, own)`` comments of a key: the block of comment lines right above it at its own
    indentation, and the comment at the end of its line (or of its value's last line) with the comment
    lines below it that are indented deeper than the key."""
    first, col = key_node.start_mark.line, key_node.start_mark.column
    leading = []
    i = first - 1
    while i >= 0 and _is_comment_only(lines[i]) and _column(lines[i]) == col:
        leading.insert(0, _comment(lines[i]) or "")
        i -= 1
    leaf = not isinstance(value_node, yaml.MappingNode) or value_node.flow_style
    last = value_node.end_mark.line if leaf and isinstance(value_node, yaml.CollectionNode) else first
    if leaf and isinstance(value_node, yaml.CollectionNode) and not value_node.flow_style:
        last = max(first, value_node.end_mark.line - 1)  # a block sequence ends on the next key's line
    if last >= len(lines):
        last = len(lines) - 1
    own = [c for c in (_comment(lines[n]) for n in range(first, last + 1)) if c]
    if not leaf:  # the lines below a group are its keys, and a comment there belongs to the next key
        return " ".join(leading).strip(), " ".join(own).strip()
    j = last + 1
    while j < len(lines) and _is_comment_only(lines[j]) and _column(lines[j]) > col:
        own.append(_comment(lines[j]) or "")
        j += 1
    return " ".join(leading).strip(), " ".join(own).strip()


def _default(text: str, node) -> str:
    """The default as the file writes it (flow style for a block collection)."""
    if isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False):
        return text[node.start_mark.index : node.end_mark.index].strip()
    value = yaml.safe_load(yaml.serialize(node))
    return yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()


def _file_intro(lines: list[str]) -> str:
    """The comment block at the top of a file, before its first key."""
    out = []
    for line in lines:
        if not _is_comment_only(line):
            break
        out.append(_comment(line) or "")
    return " ".join(out).strip()


#: Descriptions of keys that many groups share, for a key that has none in its file nor its classes
#: (the clustered-FL engine's keys, the grids' executor keys): by the key's last name.
COMMON = {
    "k": "clusters; null = the number of classes (of rotation groups in clustered FL)",
    "rounds": "communication rounds",
    "lr": "the clients' learning rate",
    "local_steps": "local steps of a client per round (H)",
    "participation": "share of the clients sampled per round (a fixed number)",
    "eval_every": "rounds between two evaluations (0 = after the last round only)",
    "batch_size": "minibatch of a local step; null = the client's whole data",
    "model": "the model: {type: mlp, hidden: ...} | {type: cnn} | {type: linear}",
    "seed": "one seed; every source of randomness draws from its own stream derived from it",
    "seeds": "seeds per cell (0, 1, ...)",
    "delta": "target δ of every private run",
    "epsilons": "privacy budgets (null = no DP; the others are accounted budgets)",
    "executor": "where the cells run: serial | processes | ray (Running pipelines: executors)",
    "executor_options": "options of the executor: processes {max_workers, threads_per_cell}; "
    "ray {address, num_cpus, init_options, threads_per_cell}",
    "resume": "a re-run with the same settings skips the cells already in the grid's cells.jsonl",
    "n_clients": "number of clients",
    "samples_per_client": "training samples per client",
    "test_per_client": "held-out test samples per client",
    "datasets": "data sets (names, or specs of your own files)",
    "dataset": "the data set",
    "methods": "the methods to run",
    "clip": "L2 bound on every sample (or update) when private",
    "init_domain": "[low, high] public feature domain (null = [0, 1])",
    "trust_model": "where the noise is added: local | secure_aggregation | central",
    "accountant": "rdp | pld",
}


# ---- the config classes -------------------------------------------------------------------------------

_KINDS = {"int": "integer", "float": "number", "str": "text", "bool": "true/false", "list": "list", "dict": "mapping"}


def checks_of(field: dataclasses.Field) -> str:
    """What a config field's value is checked against, in words (its ``param`` metadata)."""
    meta = field.metadata
    kinds = [_KINDS.get(k, k) for k in meta["kind"]]
    parts = ["integer ≥ 1" if meta["count"] else " or ".join(kinds)]
    for bound, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
        if meta[bound] is not None:
            parts.append(f"{sign} {meta[bound]:g}")
    out = " ".join(parts)
    if meta["choices"]:
        out += ": " + " \\| ".join(f"`{c}`" for c in meta["choices"])
    return out


def library_docs(spec) -> dict[str, str]:
    """``{key: description}`` from the library options classes a method's module uses (``FKMOptions``,
    the k-means family's shared groups, ...): the same names as the registry config's keys."""
    module = importlib.import_module(spec.library.partition(":")[0])
    out: dict[str, str] = {}
    for obj in vars(module).values():
        if isinstance(obj, type) and issubclass(obj, MethodConfig) and obj is not MethodConfig:
            for name, field in obj.fields().items():
                if field.metadata.get("doc") and name not in out:
                    out[name] = field.metadata["doc"]
    return out


def shared_checks() -> dict[str, str]:
    """What the shared keys accept, read from the code that checks them: ``{"group.key": text}``."""
    options = []
    for scheme in partition.SCHEMES:
        func = getattr(partition, "kmeans_split" if scheme == "kmeans" else scheme)
        names = [p for p in inspect.signature(func).parameters if p not in partition._NOT_OPTIONS]
        options.append(f"{scheme}: {', '.join(f'`{n}`' for n in names) or 'none'}")
    return {
        "dataset.name": " \\| ".join(f"`{n}`" for n in DATASET_NAMES),
        "partition.scheme": " \\| ".join(f"`{n}`" for n in partition.SCHEMES),
        "partition.options": "; ".join(options),
    }


# ---- the rows --------------------------------------------------------------------------------------------


def _flatten(prefix: str, key_node, value_node, text: str, lines: list[str], rows: list[Row]) -> None:
    """Rows of a key: one for a leaf (a scalar, a list, a flow mapping), else one per key below it."""
    leading, own = _key_comment(lines, key_node, value_node)
    meaning = " ".join(part for part in (leading, own) if part)
    if isinstance(value_node, yaml.MappingNode) and not value_node.flow_style and value_node.value:
        if meaning:
            rows.append(Row(prefix, "", "", meaning))
        for k, v in value_node.value:
            _flatten(f"{prefix}.{k.value}", k, v, text, lines, rows)
        return
    rows.append(Row(prefix, _default(text, value_node), "", meaning or COMMON.get(prefix.rsplit(".", 1)[-1], "")))


def reference(base: Path = BASE, registry=REGISTRY) -> dict[str, list[Group]]:
    """``{parameter file: [groups]}``: every key of ``base/parameters*.yml``, and for each method of
    ``registry`` every key of its config class (also one that its file lacks)."""
    files = sorted(base.glob("parameters*.yml"), key=lambda p: (p.name != "parameters.yml", p.name))
    out: dict[str, list[Group]] = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        root = yaml.compose(text)
        groups = []
        for key_node, value_node in root.value if root is not None else []:
            name = key_node.value
            leading, own = _key_comment(lines, key_node, value_node)
            leading = "" if leading == _file_intro(lines) else leading  # the file's own header
            intro = " ".join(p for p in (leading, own) if p)
            spec = registry.get(name)
            train = dict((k.value, (k, v)) for k, v in value_node.value).get("train") if spec else None
            if spec is not None and train is not None:
                groups.append(_method_group(name, spec, train, text, lines, intro))
                continue
            group = Group(name, intro)
            if isinstance(value_node, yaml.MappingNode) and not value_node.flow_style:
                for k, v in value_node.value:
                    _flatten(k.value, k, v, text, lines, group.rows)
                checks = shared_checks()
                for row in group.rows:
                    row.checks = checks.get(f"{name}.{row.key}", "")
            else:
                group = Group(name, rows=[Row(name, _default(text, value_node), "", intro or COMMON.get(name, ""))])
            groups.append(group)
        out[path.name] = groups
    return out


def _method_group(name: str, spec, train: tuple, text: str, lines: list[str], intro: str) -> Group:
    """The rows of ``<name>.train``: the config class's keys in the file's order (then any the file
    lacks), with the file's defaults and comments, then any key the file has and the class lacks. A key's description is its comment in the
    file, else the config class's, else the library options class's, else :data:`COMMON`'s."""
    config, library = spec.config, library_docs(spec)
    train_key, train_node = train
    _, train_comment = _key_comment(lines, train_key, train_node)
    in_file = {k.value: (k, v) for k, v in train_node.value}
    group = Group(f"{name}.train", " ".join(p for p in (intro, train_comment) if p), config=config)
    fields = config.fields()
    order = [k for k in in_file if k in fields] + [k for k in fields if k not in in_file]
    for key in order:
        field = fields[key]
        doc = field.metadata.get("doc", "") or library.get(key, "")
        default = config.defaults()[key]
        if key in in_file:
            k, v = in_file[key]
            leading, own = _key_comment(lines, k, v)
            comment = " ".join(p for p in (leading, own) if p)
            shown = _default(text, v)
        else:
            comment, shown = "", yaml.safe_dump(default, default_flow_style=True, width=10**6, sort_keys=False).strip()
            shown = shown.removesuffix("...").strip()
        meaning = comment or doc or COMMON.get(key, "")
        group.rows.append(Row(key, shown, checks_of(field), meaning))
    for key in in_file.keys() - fields.keys():  # tests/registry fails on these; shown meanwhile
        k, v = in_file[key]
        group.rows.append(Row(key, _default(text, v), "not a key of the config class", ""))
    return group


# ---- the page ---------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Plain text in a table cell: pipes escaped, angle brackets not read as HTML."""
    return html.escape(text, quote=False).replace("|", "\\|")


def render(base: Path = BASE, registry=REGISTRY) -> str:
    """The parameter reference page, in Markdown."""
    out = [
        "# Parameters",
        "",
        "Every parameter of `conf/base/parameters*.yml`, with its default and its comment in that file; for",
        "a method's `<method>.train` group also what a value is checked against (from the method's config",
        "class in `fedclust.registry`). This page is generated from those two sources at every `make docs`.",
        "",
        'Override a key on the command line with dotted keys, `kedro run --params="fkm.train.rounds=50"`,',
        "or in a run config file when the value is a list ([Running pipelines](runs.md)). `null` always",
        "means the default; for a key whose default is `null`, the rule its description names.",
        "",
    ]
    for file, groups in reference(base, registry).items():
        out += [f"## {file}", ""]
        intro = _file_intro((base / file).read_text(encoding="utf-8").splitlines())
        if intro:
            out += [_cell(intro), ""]
        for group in groups:
            out += [f"### `{group.name}`", ""]
            if group.intro and group.intro != intro:
                out += [_cell(group.intro), ""]
            if group.config is not None:
                checked = f"Checked by `{group.config.__module__}.{group.config.__name__}`"
                home = getattr(group.config, "OPTIONS", None)
                if home is not None:  # generated from the library options class, where the defaults live
                    checked += f", generated from `{home.__module__}.{home.__name__}`"
                out += [checked + ".", ""]
                out += ["| key | default | accepts | meaning |", "|---|---|---|---|"]
                out += [f"| `{r.key}` | `{r.default}` | {r.checks} | {_cell(r.meaning)} |" for r in group.rows]
            else:
                out += ["| key | default | accepts | meaning |", "|---|---|---|---|"]
                out += [
                    f"| `{r.key}` | {f'`{r.default}`' if r.default else ''} | {r.checks} | {_cell(r.meaning)} |"
                    for r in group.rows
                ]
            out.append("")
    return "\n".join(out)


def on_files(files, config):
    """MkDocs event: add the generated page to the site's files."""
    files.append(File.generated(config, PAGE, content=render()))
    return files
