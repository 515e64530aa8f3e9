"""Content hashes of files, folders and arrays, for the keys of stored grid cells.

A stored cell may only be reused when the bytes it was computed from are the same, so the hash is
of the content, never of a name or a date. Hashing a large file on every run would be slow, so
:func:`file_digest` keeps, within a process, the digest of each file by path, size, modification
and change time and inode: a file rewritten in place gets a new modification time and is hashed again.

No Kedro imports here.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_CHUNK = 1 << 20
#: (absolute path, size, mtime_ns, ctime_ns, inode) -> hex digest of the file's bytes
_FILE_CACHE: dict[tuple, str] = {}


def _signature(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (cached in this process while the file's size and times stay)."""
    path = Path(path)
    sig = _signature(path)
    hit = _FILE_CACHE.get(sig)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    out = h.hexdigest()
    _FILE_CACHE[sig] = out
    return out


def path_digest(path: str | os.PathLike) -> str:
    """The digest of a file, or of a folder: the relative names and digests of every file under it
    (hidden files and folders left out). A path that does not exist digests as ``missing``: the
    loader will say what is wrong when the cell runs."""
    path = Path(path)
    if path.is_file():
        return file_digest(path)
    if not path.is_dir():
        return "missing"
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        h.update(rel.as_posix().encode())
        h.update(file_digest(p).encode())
    return h.hexdigest()


def array_digest(*arrays) -> str:
    """SHA-256 of numpy arrays: their dtypes, shapes and bytes (``None`` entries allowed)."""
    import numpy as np  # here so that hashing files needs no numpy

    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            h.update(b"none")
            continue
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def text_digest(*parts: str) -> str:
    """SHA-256 of strings, separated so that ("ab", "c") and ("a", "bc") differ."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()
