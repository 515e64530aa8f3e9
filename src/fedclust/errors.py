"""The one error type for what a user can fix: a mistake in the parameters or the data, or a fault
of the environment (a read-only folder, a full disk). Its message says what is wrong and what to
do; the command line prints it in one or two lines, without a traceback.

:func:`user_message` also recognises the standard errors that mean the same (a ``ValueError`` or a
missing file from a loader, an ``OSError`` such as a read-only file system), anywhere in the chain of
causes of an exception (Kedro wraps a failed save in its own error).

No Kedro imports here.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import sys


class FedclustError(Exception):
    """A user mistake or an environment fault; the message says what is wrong and what to do."""


class DataError(FedclustError, ValueError):
    """A data set cannot be used as it is (empty, no features)."""


_NOT_WRITABLE = {
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOTDIR: "a file is in the way of a folder on that path",
    errno.EEXIST: "a file is in the way of a folder on that path",
}
_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _os_message(exc: OSError) -> str | None:
    where = exc.filename or "a file"
    if exc.errno in _NOT_WRITABLE:
        return (
            f"cannot write {where}: {_NOT_WRITABLE[exc.errno]}. Make that folder writable, or point the "
            "output elsewhere (conf/local/catalog.yml for results, conf/local/mlflow.yml for the MLflow "
            "store), and run again"
        )
    if exc.errno in _NO_SPACE:
        return f"cannot write {where}: no space left on the device. Free some space and run again"
    return None


#: SQLite's words for a store that cannot be used, and what to do
_STORE_FAULTS = {
    "database is locked": (
        "the MLflow store is locked by another program (database is locked): wait for it to finish, or "
        "close it (a `sqlite3` shell, another tool holding a transaction), and run again"
    ),
    "readonly database": None,
    "unable to open database file": None,
    "disk I/O error": None,
    "file is not a database": (
        "the MLflow store is not an SQLite database (file is not a database): move the file aside and run "
        "again to start a new store, or set mlflow_tracking_uri in conf/local/mlflow.yml"
    ),
}
_UNWRITABLE = (
    "the MLflow store cannot be written ({words}): its folder was moved or deleted, or is read-only. Put it "
    "back (or set mlflow_tracking_uri in conf/local/mlflow.yml) and run again"
)


def _store_message(exc: BaseException) -> str | None:
    """An MLflow store that cannot be used: SQLite says so (locked by another process; its folder
    moved, deleted or read-only; not a database), or a tracking server does not answer."""
    text = " ".join(str(exc).split())
    package = type(exc).__module__.split(".")[0]
    if package in ("sqlite3", "sqlalchemy", "mlflow"):
        for words, message in _STORE_FAULTS.items():
            if words in text:
                return message or _UNWRITABLE.format(words=words)
    if package == "mlflow" and (server := _server_message(text)):
        return server
    return None


def _server_message(text: str) -> str | None:
    """MLflow's REST client gave up on a tracking server: which server, and why, in a few words."""
    found = re.search(r"API request to (https?://[^/\s]+)\S* failed with exception (.*)", text)
    if not found:
        return None
    server, detail = found.groups()
    why = next(
        (
            reason
            for words, reason in (
                ("Connection refused", "connection refused"),
                ("timed out", "no answer in time"),
                ("Timeout", "no answer in time"),
                ("Name or service not known", "unknown host"),
                ("NameResolutionError", "unknown host"),
                ("nodename nor servname", "unknown host"),
                ("too many 5", "it answers with server errors"),
            )
            if words in detail
        ),
        "no connection",
    )
    return (
        f"cannot reach the MLflow tracking server at {server} ({why}): start it (or check the address), or set "
        "mlflow_tracking_uri in conf/<env>/mlflow.yml to a reachable server or to sqlite:///mlflow.db, and run again"
    )


def user_message(exc: BaseException) -> str | None:
    """The one-line message of a user mistake or environment fault in ``exc`` (or its causes), or
    None when ``exc`` is a bug whose traceback should be shown."""
    chain = list(_chain(exc))
    for e in chain:  # the precise causes first: a project error, then an OS fault
        if isinstance(e, FedclustError):
            return " ".join(str(e).split()) or type(e).__name__
    for e in chain:
        if isinstance(e, OSError) and (msg := _os_message(e)):
            return msg
    for e in chain:
        if msg := _store_message(e):
            return msg
    for e in chain:
        if isinstance(e, MemoryError):
            return (
                f"not enough memory ({' '.join(str(e).split()) or 'MemoryError'}). Use a smaller setting "
                "(fewer samples, clients or rounds) and run again"
            )
    for e in chain:
        if isinstance(e, (ValueError, FileNotFoundError)):
            return " ".join(str(e).split()) or type(e).__name__
    return None


def tracebacks_requested() -> bool:
    """Whether errors keep their traceback: ``kedro run -v`` or ``FEDCLUST_TRACEBACK=1`` (``FEDCLUST_DEBUG=1``)."""
    return any(
        os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")
        for name in ("FEDCLUST_TRACEBACK", "FEDCLUST_DEBUG")
    )


class RepeatedUserErrorFilter(logging.Filter):
    """A logging filter that drops Kedro's and MLflow's own warnings and errors about a user error
    while it propagates (the failed node with the whole message, the advice to resume, MLflow's
    traceback of a store it cannot write): the command line prints that error once, in one line.
    They are logged inside ``except`` blocks, so the error is the one being handled in the logging
    thread. Every line is kept when tracebacks are requested."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith(("kedro", "mlflow")):
            return True
        exc = sys.exc_info()[1]
        return exc is None or tracebacks_requested() or user_message(exc) is None
