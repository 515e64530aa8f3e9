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


class FedclustError(Exception):
    """A user mistake or an environment fault; the message says what is wrong and what to do."""


class DataError(FedclustError, ValueError):
    """A data set cannot be used as it is (empty, no features)."""


_NOT_WRITABLE = {errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
                 errno.EPERM: "operation not permitted"}
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
        return (f"cannot write {where}: {_NOT_WRITABLE[exc.errno]}. Make that folder writable, or point the "
                "output elsewhere (conf/local/catalog.yml), and run again")
    if exc.errno in _NO_SPACE:
        return f"cannot write {where}: no space left on the device. Free some space and run again"
    return None


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
        if isinstance(e, MemoryError):
            return (f"not enough memory ({' '.join(str(e).split()) or 'MemoryError'}). Use a smaller setting "
                    "(fewer samples, clients or rounds) and run again")
    for e in chain:
        if isinstance(e, (ValueError, FileNotFoundError)):
            return " ".join(str(e).split()) or type(e).__name__
    return None
