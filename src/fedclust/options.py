"""Typed, frozen option sets: the one way settings are declared, defaulted and validated.

Two families use it. A method's *library options* (``fedclust.clustering.fkm.FKMOptions`` ...) are
what its ``run`` takes; a method's *registry config* (``fedclust.registry.configs``) holds the keys
of ``<method>.train`` in ``conf/base`` with the same defaults (a test checks that they agree). Each
field is declared with :func:`param`: its default, its kind (``int``, ``float``, ``str``, ``bool``,
``list``, ``dict``, ``any`` or a tuple of kinds), and optional ``choices``, bounds and ``count`` (an
integer >= 1).

:meth:`MethodConfig.from_params` builds a config from a parameter dict (the YAML group):

* an unknown key is an error naming it and the nearest valid key;
* ``null`` (or an absent key) means the default, the only default path; a field whose default is
  ``None`` keeps ``None``, which the method resolves by its documented rule (``k = null``: the
  number of classes);
* a value of the wrong kind, outside its bounds or not among its choices is an error naming it;
* :meth:`MethodConfig.problems` adds the checks between fields (RR-Cluster's ``B`` and ``method``).

:meth:`MethodConfig.build` is the library entry: an options object and/or keyword settings, where
``None`` stays ``None`` (a library ``run`` resolves it by its documented rule).

Every problem is reported at once, in one :class:`~fedclust.params_check.ParameterError`.
Plain Python (no Kedro).
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
import numbers
from typing import Any, ClassVar, Mapping

from fedclust.params_check import ParameterError, _nearest, show

_KIND_NAMES = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "list": "a list",
    "dict": "a group of parameters",
    "any": "anything",
}


#: the kinds of loop an integer field can bound (``param(loop=...)``), read by the work estimate
#: (:func:`fedclust.registry.spec.work_of`): ``round`` (the rounds of a run), ``client`` (a client's
#: iterations in a round), ``server`` (the server's iterations in a round), ``once`` (iterations run
#: once, before or after the rounds)
LOOPS = ("round", "client", "server", "once")


#: ``param(conf_default=...)`` left out: a pipeline run uses the library default
_SAME = object()


def _meta(
    kind,
    *,
    choices=None,
    ge=None,
    gt=None,
    le=None,
    lt=None,
    count=False,
    doc="",
    allow_inf=False,
    loop=None,
    conf=True,
    conf_default=_SAME,
) -> dict:
    """What :func:`check_value` checks a value against: its kinds, choices, bounds, ``count``;
    ``loop``, the loop the value bounds (:data:`LOOPS`), for the work estimate; and whether the field
    is a key of ``<method>.train`` (``conf``) with the default a pipeline run gives it
    (``conf_default``, see :func:`config_class`)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    choices = tuple(choices) if choices else None
    bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt}
    if loop is not None and loop not in LOOPS:
        raise ValueError(f"loop must be one of {LOOPS}, got {loop!r}")
    meta = {"kind": kinds, "choices": choices, **bounds, "count": count, "doc": doc, "allow_inf": allow_inf}
    return {**meta, "loop": loop, "conf": conf, "conf_default": conf_default}


def param(
    default: Any,
    kind: str | tuple[str, ...],
    *,
    choices=None,
    ge=None,
    gt=None,
    le=None,
    lt=None,
    count: bool = False,
    doc: str = "",
    loop: str | None = None,
    conf: bool = True,
    conf_default: Any = _SAME,
) -> Any:
    """A config field: ``default`` (``None``: resolved by the method's rule), its ``kind`` and limits;
    ``loop``: the loop it bounds (:data:`LOOPS`), so that the work estimate covers it.

    For a method's library options: ``conf=False`` marks a value that the run supplies (the seed,
    the calibrated noise, arrays) rather than a key of ``<method>.train``; ``conf_default`` is the
    default of a pipeline run where it differs from a library call's (the baselines' library calls
    keep their papers' 100 rounds of 30 clients, a pipeline run 20 rounds of every client)."""
    meta = _meta(
        kind,
        choices=choices,
        ge=ge,
        gt=gt,
        le=le,
        lt=lt,
        count=count,
        doc=doc,
        loop=loop,
        conf=conf,
        conf_default=conf_default,
    )
    return _field(default, meta)


def _field(default, meta: dict) -> dataclasses.Field:
    if isinstance(default, (dict, list)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _default_of(f: dataclasses.Field):
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def config_class(name: str, options: type, keys: type, *, module: str, drop: tuple[str, ...] = ()) -> type:
    """The registry config of a method, generated from its library ``options`` class, so that each
    default, bound, choice and doc has one home (the options class).

    Its fields are those of ``keys`` (a frozen :class:`MethodConfig` dataclass with the keys a
    pipeline run adds: ``k``, the server's data as a file spec, the calibration's choices; its
    methods hold the checks between keys), then every field of ``options`` declared as a key of
    ``<method>.train`` (``param(conf=True)``, the default) that ``keys`` does not redeclare and
    ``drop`` does not name, with its ``conf_default`` where one is declared. :meth:`MethodConfig.options`
    of a config gives the library options of a run."""
    own = {f.name for f in dataclasses.fields(keys)}
    fields = []
    for f in dataclasses.fields(options):
        if f.name in own or f.name in drop or not f.metadata.get("conf", True):
            continue
        default = f.metadata.get("conf_default", _SAME)
        fields.append((f.name, f.type, _field(_default_of(f) if default is _SAME else default, dict(f.metadata))))
    namespace = {"OPTIONS": options, "__module__": module, "__qualname__": name}
    return dataclasses.make_dataclass(name, fields, bases=(keys,), frozen=True, namespace=namespace)


def _matches(value, kind: str) -> bool:
    if kind == "any":
        return True
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
    if kind == "float":
        return isinstance(value, numbers.Real)
    if kind == "str":
        return isinstance(value, str)
    if kind == "list":
        return isinstance(value, (list, tuple))
    if kind == "dict":
        return isinstance(value, Mapping)
    raise TypeError(f"unknown kind {kind!r}")


def _convert(value, kind: str):
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "list":
        return list(value)
    if kind == "dict":
        return dict(value)
    return value


def check_value(path: str, value, meta: dict) -> tuple[Any, list[str]]:
    """``(converted value, problems)`` of one non-null ``value`` against its field's ``meta``."""
    kinds = meta["kind"]
    kind = next((k for k in kinds if _matches(value, k)), None)
    if kind is None:
        want = " or ".join(_KIND_NAMES[k] for k in kinds)
        if meta["count"]:
            want = "null (the default) or an integer >= 1"
        return value, [f"{path} must be {want}, got {show(value)}"]
    value = _convert(value, kind)
    if kind == "float" and not math.isfinite(value) and not (meta["allow_inf"] and math.isinf(value)):
        return value, [f"{path} must be a finite number, got {show(value)}"]
    if meta["count"] and kind == "int" and value < 1:
        return value, [f"{path} must be null (the default) or an integer >= 1, got {show(value)}"]
    if meta["choices"] is not None and kind == "str" and value not in meta["choices"]:
        near = _nearest(value, meta["choices"])
        hint = f"; did you mean {near!r}?" if near else ""
        return value, [f"{path} must be one of {list(meta['choices'])}, got {value!r}{hint}"]
    if kind in ("int", "float"):
        for bound, ok, word in (
            ("ge", lambda v, b: v >= b, ">="),
            ("gt", lambda v, b: v > b, ">"),
            ("le", lambda v, b: v <= b, "<="),
            ("lt", lambda v, b: v < b, "<"),
        ):
            b = meta[bound]
            if b is not None and not ok(value, b):
                return value, [f"{path} must be {word} {b}, got {show(value)}"]
    return value, []


def check_int(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]`` (either bound may be None); otherwise a
    :class:`~fedclust.params_check.ParameterError` (a ``ValueError``) naming ``name``. The one check
    of an integer argument of a library function (configs and options use :func:`param`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # 3.0 is not an int argument
        raise ParameterError(f"{name} must be an integer, got {show(value)}")
    value, problems = check_value(name, value, _meta("int", ge=low, le=high))
    if problems:
        raise ParameterError(problems[0])
    return value


def check_number(name: str, value, *, ge=None, gt=None, le=None, lt=None, allow_inf: bool = False) -> float:
    """``value`` as a float within the given bounds, finite unless ``allow_inf`` (NaN never);
    otherwise a :class:`~fedclust.params_check.ParameterError` (a ``ValueError``) naming ``name``.
    The one check of a numeric argument of a library function."""
    value, problems = check_value(name, value, _meta("float", ge=ge, gt=gt, le=le, lt=lt, allow_inf=allow_inf))
    if problems:
        raise ParameterError(problems[0])
    return value


#: the parameter group named in the messages of a config being built by ``from_params``
_WHERE: contextvars.ContextVar[str | None] = contextvars.ContextVar("fedclust_config_group", default=None)


def _raise(problems: list[str]):
    head = "invalid parameter" if len(problems) == 1 else f"{len(problems)} invalid parameters"
    raise ParameterError(f"{head}: " + "; ".join(problems))


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """Base of every method's config (see the module docstring)."""

    #: the parameter group it is read from, for messages (``fkm.train``)
    GROUP: ClassVar[str] = "train"
    #: a registry config's library options class (:func:`config_class`); None for the others
    OPTIONS: ClassVar[type | None] = None

    def __post_init__(self) -> None:
        """A config validates itself when it is built, however it is built (``from_params``, the
        constructor, :meth:`replace`): kinds, bounds and choices of every field, then the checks
        between fields; values are converted to their kind (``3.0`` -> ``3`` for an integer)."""
        where = _WHERE.get() or self.GROUP
        problems = []
        for name, f in self.fields().items():
            value = getattr(self, name)
            if value is None:
                continue
            value, found = check_value(f"{where}.{name}", value, f.metadata)
            problems.extend(found)
            object.__setattr__(self, name, value)
        problems = problems or self.problems(where)
        if problems:
            _raise(problems)

    @classmethod
    def fields(cls) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(cls)}

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every key with its default, as YAML writes it."""
        return {name: _default_of(f) for name, f in cls.fields().items()}

    @classmethod
    def collect(cls, params: Mapping[str, Any] | None, where: str | None = None) -> tuple[dict, list[str]]:
        """``(values, problems)`` for ``params``: every field's value (defaults filled in)."""
        where = where or cls.GROUP
        fields = cls.fields()
        values, problems = cls.defaults(), []
        for key, value in dict(params or {}).items():
            path = f"{where}.{key}"
            if key not in fields:
                near = _nearest(str(key), list(fields))
                hint = f"; did you mean '{where}.{near}'?" if near else ""
                problems.append(f"unknown parameter '{path}'{hint} (valid keys: {', '.join(sorted(fields))})")
                continue
            if value is None:
                continue  # null means the default
            values[key], found = check_value(path, value, fields[key].metadata)
            problems.extend(found)
        return values, problems

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None = None, where: str | None = None, **overrides):
        """The config of ``params`` (a ``<method>.train`` dict) and ``overrides``; raises
        :class:`~fedclust.params_check.ParameterError` naming every problem."""
        values, problems = cls.collect({**dict(params or {}), **overrides}, where)
        if problems:
            _raise(problems)
        token = _WHERE.set(where or cls.GROUP)
        try:
            return cls(**values)  # __post_init__ adds the checks between fields
        finally:
            _WHERE.reset(token)

    @classmethod
    def build(cls, options=None, settings: Mapping[str, Any] | None = None):
        """The options of a library call: ``options`` (an instance, or ``None`` for the defaults) with
        ``settings`` (keyword arguments) laid over it. Unlike :meth:`from_params`, an explicit ``None``
        is kept (it asks for the method's documented rule). An unknown name is an error naming the
        nearest valid one."""
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"options must be a {cls.__name__}, got {type(options).__name__}")
        if not settings:
            return options if options is not None else cls()
        fields = cls.fields()
        unknown = [key for key in settings if key not in fields]
        if unknown:
            where = cls.GROUP
            lines = []
            for key in unknown:
                near = _nearest(str(key), list(fields))
                hint = f"; did you mean '{near}'?" if near else ""
                lines.append(f"unknown option '{key}' of {where}{hint} (valid: {', '.join(sorted(fields))})")
            _raise(lines)
        base = options.as_dict() if options is not None else {}
        return cls(**{**base, **settings})

    def problems(self, where: str) -> list[str]:
        """Checks between fields (override); one line per problem."""
        return []

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def set(self) -> dict[str, Any]:
        """The fields that are not ``None`` (keyword arguments for a library ``run``)."""
        return {k: v for k, v in self.as_dict().items() if v is not None}

    def pick(self, *keys: str) -> dict[str, Any]:
        """The non-null values of ``keys``."""
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def run_settings(self, *, exclude: tuple[str, ...] = (), **run: Any) -> dict[str, Any]:
        """The library keyword arguments of a run of a registry config (:func:`config_class`): the
        config's value of every options field it holds (a null value: left out, the library's
        default), except those named in ``exclude`` (values that the calibration or the run
        resolves), with ``run`` (the seed, the noise, the server's points ...) laid over them."""
        if self.OPTIONS is None:
            raise TypeError(f"{type(self).__name__} is not generated from a library options class")
        own = self.fields()
        values = {}
        for f in dataclasses.fields(self.OPTIONS):
            mine = own.get(f.name)
            if mine is None or f.name in exclude or mine.metadata != f.metadata:
                continue  # not a key, or a key of the registry's own of the same name (server_data)
            value = getattr(self, f.name)
            if value is not None:
                values[f.name] = value
        return {**values, **run}

    def options(self, *, exclude: tuple[str, ...] = (), **run: Any):
        """The library options object of a run: :meth:`run_settings`, validated by the options class."""
        settings = self.run_settings(exclude=exclude, **run)  # raises for a config without options class
        return self.OPTIONS.build(None, settings)
