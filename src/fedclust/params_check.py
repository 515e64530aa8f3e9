"""Check a run's parameters against the project's reference parameters, before any work.

The reference is the parameter tree of ``conf/base`` (every key a run may set, with its default);
the parameters of a run are that tree with the user's overrides (``conf/local``, ``--params``)
merged in. :func:`check_params` finds

* keys that are not in the reference (a typo such as ``fkm.train.roundz`` or ``privacyy.epsilon``),
  each reported with the nearest valid key;
* values of the wrong type for their default (``clip=true`` where a number is expected,
  ``rounds=abc``, a dict given for a scalar);
* counts that must be null (= the documented default) or a positive integer (``k=0``,
  ``clients_per_round=0``, ``rounds=-1``, ``n_groups=0.5``).

Only dicts are walked; lists are values. A dict that is empty in the reference (``options: {}``,
``cases: {}``) or whose key is in :data:`FREE_FORM_KEYS` accepts any keys: its consumer checks
them (the partition schemes and data loaders check their options against their signatures).

Plain Python; the Kedro hook in :mod:`fedclust.hooks` calls it.
"""

from __future__ import annotations

import difflib
import math
import numbers
from typing import Any, Iterable, Mapping

from fedclust.errors import FedclustError

#: dict-valued keys whose contents are options of some other function (checked there)
FREE_FORM_KEYS = frozenset({"options", "dataset_options", "model", "cases", "method_settings"})

#: keys that count something: null (the documented default) or an integer >= 1
COUNT_KEYS = frozenset({"k", "rounds", "clients_per_round", "n_clients", "n_groups", "samples_per_client"})


class ParameterError(FedclustError, ValueError):
    """A parameter of the run is unknown or invalid; the message names it."""


#: Keys whose value is a name or a mapping that names a data set (a server-data file): the method's
#: config class checks the mapping.
VALUE_OR_SPEC_KEYS = frozenset({"server_data"})


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def show(value) -> str:
    """``value`` as it is written in YAML / ``--params`` (true, null, 'text')."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return repr(value)


def _nearest(key: str, candidates: Iterable[str]) -> str | None:
    match = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.5)
    return match[0] if match else None


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _walk(given: Mapping, reference: Mapping, prefix: str, problems: list[str]) -> None:
    for key, value in given.items():
        path = _join(prefix, key)
        if key not in reference:
            near = _nearest(str(key), [str(k) for k in reference])
            hint = f"; did you mean '{_join(prefix, near)}'?" if near else ""
            keys = sorted(map(str, reference))
            valid = f" (valid keys here: {', '.join(keys)})" if 0 < len(keys) <= 15 else ""
            problems.append(f"unknown parameter '{path}'{hint}{valid}")
            continue
        default = reference[key]
        problems.extend(_type_problems(path, key, value, default))
        if isinstance(value, Mapping) and isinstance(default, Mapping) and default and key not in FREE_FORM_KEYS:
            _walk(value, default, path, problems)


def _type_problems(path: str, key, value, default) -> list[str]:
    if value is None or default is None or (isinstance(value, bool) == isinstance(default, bool) and value == default):
        return _count_problems(path, key, value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            return [f"{path} must be true or false, got {show(value)}"]
    elif _is_number(default):
        if isinstance(value, bool) or not _is_number(value):
            return [f"{path} must be a number (default {show(default)}), got {show(value)}"]
        if isinstance(value, float) and not math.isfinite(value):
            return [f"{path} must be a finite number, got {show(value)}"]
    elif isinstance(default, Mapping):
        if not isinstance(value, Mapping):
            return [
                f"{path} is a group of parameters ({', '.join(map(str, default)) or 'options'}), "
                f"got the value {value!r}"
            ]
    elif isinstance(value, Mapping) and not isinstance(default, Mapping) and key not in VALUE_OR_SPEC_KEYS:
        return [f"{path} takes a value (default {show(default)}), got a group {dict(value)!r}"]
    return _count_problems(path, key, value)


def _count_problems(path: str, key, value) -> list[str]:
    if key not in COUNT_KEYS or value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        return [f"{path} must be null (the default) or an integer >= 1, got {show(value)}"]
    return []


def check_params(params: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
    """Every problem of ``params`` against ``reference``, one line each (empty: all good)."""
    problems: list[str] = []
    _walk(params, reference, "", problems)
    return problems


def raise_for_params(params: Mapping[str, Any], reference: Mapping[str, Any]) -> None:
    """Raise :class:`ParameterError` listing every problem found by :func:`check_params`."""
    problems = check_params(params, reference)
    if problems:
        head = "invalid parameter" if len(problems) == 1 else f"{len(problems)} invalid parameters"
        raise ParameterError(f"{head}: " + "; ".join(problems))
