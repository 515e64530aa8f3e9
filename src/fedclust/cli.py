"""The project's command line: Kedro's ``kedro run`` with four changes.

* A user mistake or an environment fault (:func:`fedclust.errors.user_message`) ends the command
  with two lines on stderr (what is wrong and what to do, then how to see the traceback), exit
  status 1, and the MLflow run still open marked FAILED. Any other error is a bug and keeps its
  traceback. ``-v`` / ``--verbose`` (or ``FEDCLUST_TRACEBACK=1``) shows the traceback of every error.
* Ctrl-C (SIGINT) prints one line, ``fedclust: interrupted; finished cells kept; rerun the same command
  to resume``, marks the MLflow run KILLED and exits with status 130 (click printed ``Aborted!``).
* ``--config FILE`` and ``--params`` merge: the file's ``run.params`` are kept, and a key given in
  both takes the value of ``--params`` (plain Kedro drops the file's params when ``--params`` is given).
* Nothing else: every option of Kedro's ``run`` is there with its meaning.

Kedro picks this module up as the project's ``cli.py``; ``python -m fedclust`` runs the same command.
"""

from __future__ import annotations

import logging
import os
import sys

import click
from click.core import ParameterSource
from kedro.framework.cli.project import run as kedro_run
from kedro.framework.cli.utils import _split_params

from fedclust.errors import RepeatedUserErrorFilter, tracebacks_requested, user_message

#: set (to anything but 0/false/no) to see the traceback of every error
TRACEBACK_ENV = "FEDCLUST_TRACEBACK"


def merge_params(base: dict, override: dict) -> dict:
    """``base`` with ``override`` on top, nested groups merged key by key (override wins)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_params(out[key], value)
        else:
            out[key] = value
    return out


def _params_with_config_file(ctx: click.Context, params: dict) -> dict:
    """The run's params: those of the ``--config`` file under ``--params`` (both kept)."""
    from_file = (ctx.default_map or {}).get("params")
    if not from_file or ctx.get_parameter_source("params") is not ParameterSource.COMMANDLINE:
        return params  # no file params, or click already took them as the default
    option = next(p for p in ctx.command.params if p.name == "params")
    return merge_params(_split_params(ctx, option, from_file), params)


def fail_open_runs(exc: BaseException) -> str | None:
    """Mark the MLflow runs this process left open FAILED, with the error as the reason (MLflow's exit
    handler would say FINISHED); a line for the user when that has to wait for the store."""
    reason = user_message(exc) or f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    try:
        # here: every kedro command loads this module, and MLflow (imported by the hooks) is slow to import
        from fedclust.hooks.store import fail_runs

        return fail_runs(reason)
    except Exception:  # the store itself may be the fault: never hide the error being reported
        return "fedclust: the MLflow run could not be marked FAILED (the next run on this host marks it KILLED)"


def report(exc: BaseException) -> bool:
    """Print a user mistake or environment fault as two lines on stderr; False for a bug."""
    message = None if tracebacks_requested() else user_message(exc)
    if not message:
        return False
    click.echo(f"fedclust: error: {message}\n(run with -v, or FEDCLUST_TRACEBACK=1, to see the traceback)", err=True)
    return True


@click.group(name="fedclust")
def cli():
    """fedclust's project commands (they replace Kedro's of the same name)."""


@cli.command(
    name="run",
    params=[
        *kedro_run.params,
        click.Option(
            ["--verbose", "-v"], is_flag=True, help="Show the traceback of every error (also FEDCLUST_TRACEBACK=1)."
        ),
    ],
    help=kedro_run.help,
    short_help=kedro_run.short_help,
)
@click.pass_context
def run(ctx: click.Context, verbose: bool = False, **kwargs):
    if verbose:
        os.environ[TRACEBACK_ENV] = "1"  # read by the log filter and the error report below
    kwargs["params"] = _params_with_config_file(ctx, kwargs.get("params") or {})
    # Kedro's own lines about an error we print in one line (the failed node, how to resume) are
    # dropped; Kedro's logging configuration accepts no custom filter, so it goes on the handlers
    # of the configured root logger (conf/logging.yml) and of MLflow's logger (MLflow sets its own)
    quiet = RepeatedUserErrorFilter()
    handlers = [*logging.getLogger().handlers, *logging.getLogger("mlflow").handlers]  # MLflow's own
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        return ctx.invoke(kedro_run, **kwargs)
    except KeyboardInterrupt:  # Ctrl-C: one line, not click's "Aborted!" (nor a traceback)
        # here: every kedro command loads this module, and MLflow (imported by the hooks) is slow to import
        from fedclust.hooks.interrupts import INTERRUPTED, kill_open_runs_quietly

        killed = kill_open_runs_quietly()
        marked = f" (MLflow run {killed[-1]} marked KILLED)" if killed else ""
        click.echo(INTERRUPTED.replace("; finished", f"{marked}; finished", 1), err=True)
        sys.stderr.flush()
        raise SystemExit(130) from None
    except Exception as exc:
        later = fail_open_runs(exc)
        if report(exc):
            if later:
                click.echo(later, err=True)
            sys.stderr.flush()
            raise SystemExit(1) from None
        if later:
            click.echo(later, err=True)
        raise
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)
