"""The shared benchmark harness (plain Python, no Kedro): every script under ``benchmarks/`` is a thin
driver around it, run from the project root as ``python benchmarks/bench_x.py [--quick]``.

* **Arguments** (:func:`parser`): ``--quick``, ``--seeds N``, ``--threads N`` where a script has
  them, and ``--json PATH`` everywhere.
* **A session** (:func:`session`): sets the torch threads, tees what the script prints, and on exit
  writes ``--json PATH``: the arguments, wall time, peak RSS and every Markdown table printed (each
  with the ``#`` heading above it), so a script needs no JSON code of its own.
* **Timing**: :func:`timed` (one call, ``perf_counter``), :func:`interleaved` (the median of repeats
  taken in turn, case A, case B, A, B, ...: on a shared machine the cases see the same load) and the
  resident memory (:func:`rss_mb`, :func:`peak_rss_mb`, :func:`reset_peak_rss`).
* **Tables**: :func:`table` (aligned Markdown), :func:`fmt` (one number), :func:`mean_std`.
* **Data**: the MNIST test set of ``../shared/data/mnist`` (:func:`mnist_test`, :func:`have_mnist`)
  and the rotated clustered-FL data built from it or from scikit-learn's digits (:func:`rotated`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedclust.memory import resident_bytes

#: The project root when the package runs from its source tree (``src/fedclust/bench.py``).
ROOT = Path(__file__).resolve().parents[2]
#: The shared data folder, a sibling of the project (docs/reference/benchmark-scripts.md).
DATA_DIR = ROOT / ".." / "shared" / "data"
MNIST_DIR = DATA_DIR / "mnist"


# ------------------------------------------------------------------------------------------------
# arguments and the session
# ------------------------------------------------------------------------------------------------
def parser(
    description: str | None, *, quick: str | None = None, seeds: int | None = None, threads: int | None = None
) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with the common options: ``--quick`` (when ``quick`` gives its help),
    ``--seeds N`` (when ``seeds`` gives the default), ``--threads N`` (when ``threads`` gives the
    default; 0 = torch's default) and always ``--json PATH``. ``description``: the script's
    docstring (its first line is used)."""
    ap = argparse.ArgumentParser(description=(description or "").strip().splitlines()[0] if description else None)
    if quick is not None:
        ap.add_argument("--quick", action="store_true", help=quick)
    if seeds is not None:
        ap.add_argument("--seeds", type=int, default=seeds, help=f"number of seeds (default {seeds})")
    if threads is not None:
        ap.add_argument(
            "--threads", type=int, default=threads, help=f"torch threads (default {threads}; 0 = torch's default)"
        )
    ap.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write the arguments, timings and every printed table to this JSON file",
    )
    return ap


def set_threads(n: int | None) -> None:
    """``torch.set_num_threads(n)`` for n >= 1 (nothing for None/0, or without torch)."""
    if n:
        try:
            # torch and the data loaders load only for the benchmarks that use them: bench helpers serve numpy-only scripts too
            import torch
        except ImportError:  # pragma: no cover - torch is a dependency
            return
        torch.set_num_threads(int(n))


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self):
        for st in self.streams:
            st.flush()


@contextlib.contextmanager
def session(args: argparse.Namespace | None = None, **extra) -> Iterator[dict]:
    """Run a benchmark's body: threads from ``args.threads``, stdout teed, and on exit (also after
    an error) the JSON report to ``args.json`` when given. Yields a dict whose entries (plus
    ``extra``) are added to the report (``results`` for numbers that are not in a table)."""
    ns = vars(args) if args is not None else {}
    set_threads(ns.get("threads"))
    buf = io.StringIO()
    report: dict[str, Any] = dict(extra)
    t0 = time.perf_counter()
    out = sys.stdout
    sys.stdout = _Tee(out, buf)
    try:
        yield report
    finally:
        sys.stdout = out
        path = ns.get("json")
        if path:
            doc = {
                "script": Path(sys.argv[0]).name,
                "args": ns,
                "wall_s": time.perf_counter() - t0,
                "peak_rss_mb": peak_rss_mb(),
                "tables": markdown_tables(buf.getvalue()),
                **report,
            }
            write_json(path, doc)
            print(f"(report written to {path})")


def write_json(path, obj) -> None:
    """``obj`` as indented JSON (numpy scalars and arrays, tuples, paths and non-finite floats made
    JSON-ready)."""
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(_ready(obj), indent=2) + "\n")


def _ready(x):
    if isinstance(x, dict):
        return {str(k): _ready(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_ready(v) for v in x]
    if isinstance(x, np.ndarray):
        return _ready(x.tolist())
    if isinstance(x, np.generic):
        return _ready(x.item())
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    if isinstance(x, Path):
        return str(x)
    return x


_ROW = re.compile(r"^\s*\|.*\|\s*$")
_SEP = re.compile(r"^\s*\|(\s*:?-{3,}:?\s*\|)+\s*$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_tables(text: str) -> list[dict]:
    """Every Markdown table in ``text`` (a header row, a ``|---|`` row, body rows) as
    ``{"title", "headers", "rows"}``; ``title`` is the last ``#`` heading above it (or "")."""
    lines = text.splitlines()
    out, title, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("#"):
            title = line.strip().lstrip("#").strip()
        if _ROW.match(line) and i + 1 < len(lines) and _SEP.match(lines[i + 1]):
            headers, rows, j = _cells(line), [], i + 2
            while j < len(lines) and _ROW.match(lines[j]):
                rows.append(_cells(lines[j]))
                j += 1
            out.append({"title": title, "headers": headers, "rows": rows})
            i = j
            continue
        i += 1
    return out


# ------------------------------------------------------------------------------------------------
# timing and memory
# ------------------------------------------------------------------------------------------------
def timed(fn: Callable, *args, **kwargs) -> tuple[Any, float]:
    """``(fn(*args, **kwargs), seconds)`` by ``time.perf_counter``."""
    t = time.perf_counter()
    r = fn(*args, **kwargs)
    return r, time.perf_counter() - t


def interleaved(
    cases: dict[str, Callable[[], Any]], repeats: int = 3, *, warmup: bool = False, results: dict | None = None
) -> dict[str, float]:
    """Median seconds of every case over ``repeats`` rounds that run the cases in turn (A, B, A, B,
    ...), so background load on a shared machine falls on all of them alike. ``warmup`` runs every
    case once first, untimed; ``results`` (a dict) receives each case's last return value."""
    if warmup:
        for fn in cases.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(max(1, int(repeats))):
        for name, fn in cases.items():
            r, dt = timed(fn)
            times[name].append(dt)
            if results is not None:
                results[name] = r
    return {name: statistics.median(v) for name, v in times.items()}


def rss_mb() -> float:
    """Current resident set size of this process in MB (Linux ``/proc``; else the peak)."""
    rss = resident_bytes()
    return peak_rss_mb() if rss is None else rss / 2**20


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark of this process (Linux ``clear_refs``); False if not possible."""
    try:
        with open(f"/proc/{os.getpid()}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb(reset_ok: bool = False) -> float:
    """Peak resident set size in MB: since :func:`reset_peak_rss` when it worked (``reset_ok``,
    ``VmHWM``), else since the process started (``getrusage``)."""
    if reset_ok:
        try:
            with open(f"/proc/{os.getpid()}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------------------------------------
# tables
# ------------------------------------------------------------------------------------------------
def fmt(x, nd: int = 3) -> str:
    """One table cell: strings as they are, None/NaN/inf as ``n/a``, very large or small numbers in
    scientific notation, others with ``nd`` decimals."""
    if isinstance(x, str):
        return x
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "n/a"
    if abs(x) >= 1e4 or (abs(x) < 1e-3 and x != 0):
        return f"{x:.2e}"
    return f"{x:.{nd}f}"


def mean_std(values, scale: float = 1.0, nd: int = 3, width: int = 0) -> str:
    """``"mean ± std"`` of ``values`` times ``scale`` (e.g. 100 for percent), ``nd`` decimals; the mean
    right-aligned to ``width`` characters."""
    a = np.asarray(values, dtype=float) * scale
    return f"{a.mean():{width}.{nd}f} ± {a.std():.{nd}f}"


def table(headers: Sequence, rows: Sequence[Sequence], *, title: str | None = None) -> None:
    """Print an aligned Markdown table (``title`` as a ``##`` heading first), then a blank line."""
    rows = [[str(c) for c in r] for r in rows]
    w = [max(len(str(h)), *(len(r[i]) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    if title:
        print(f"## {title}\n")
    print("| " + " | ".join(str(h).ljust(w[i]) for i, h in enumerate(headers)) + " |")
    print("|" + "|".join("-" * (x + 2) for x in w) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |")
    print()


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------
def have_mnist(path=None) -> bool:
    """Whether the MNIST test set (``t10k-images-idx3-ubyte.gz``) is in ``path`` (default :data:`MNIST_DIR`)."""
    return (Path(path or MNIST_DIR) / "t10k-images-idx3-ubyte.gz").exists()


def mnist_raw(path=None):
    """The MNIST test set as loaded (:func:`fedclust.data.files.load_mnist_folder`: raw ``images``,
    ``X``, ``y``); exits with a message when the folder has no MNIST."""
    # torch and the data loaders load only for the benchmarks that use them: bench helpers serve numpy-only scripts too
    from fedclust.data.files import load_mnist_folder

    p = Path(path or MNIST_DIR)
    if not have_mnist(p):
        raise SystemExit(f"MNIST folder {p} not found (expected t10k-images-idx3-ubyte.gz and labels)")
    return load_mnist_folder(p, split="test")


def mnist_test(path=None, *, max_images: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 10,000-image MNIST test set: ``X`` (n, 784) float64 pixels / 255, ``y`` (n,) labels and
    ``images`` (n, 28, 28) / 255; the first ``max_images`` only when given. Exits with a message
    when the folder has no MNIST."""
    ds = mnist_raw(path)
    images, y = ds.images / 255.0, ds.y
    if max_images is not None:
        images, y = images[:max_images], y[:max_images]
    return images.reshape(images.shape[0], -1).astype(np.float64), y, images


def rotated(
    images: np.ndarray,
    y: np.ndarray,
    *,
    n_clients: int,
    n: int,
    n_test: int,
    seed: int = 0,
    n_groups: int = 4,
    **kwargs,
):
    """Rotated clustered-FL data (:func:`fedclust.partition.rotation.rotation`, ``n_groups``
    rotations) as :class:`~fedclust.clustered_fl.FederatedTensors`: ``n`` training and ``n_test``
    test samples per client."""
    # torch and the data loaders load only for the benchmarks that use them: bench helpers serve numpy-only scripts too
    from fedclust.clustered_fl import FederatedTensors
    from fedclust.partition.rotation import rotation

    rd = rotation(
        images,
        y,
        n_groups=n_groups,
        n_clients=n_clients,
        samples_per_client=n,
        test_per_client=n_test,
        seed=seed,
        **kwargs,
    )
    return FederatedTensors.from_rotated(rd)


def mm_rate(M: int, K: int, N: int, batch: int | None = None, reps: int = 10) -> float:
    """GFLOP/s of a plain torch.mm (M x K) @ (K x N), or torch.bmm with `batch` blocks of M/batch rows."""
    # torch and the data loaders load only for the benchmarks that use them: bench helpers serve numpy-only scripts too
    import torch

    if batch is None:
        a, b = torch.randn(M, K), torch.randn(K, N)
        f = lambda: torch.mm(a, b)  # noqa: E731
    else:
        a, b = torch.randn(batch, M // batch, K), torch.randn(batch, K, N)
        f = lambda: torch.bmm(a, b)  # noqa: E731
    f()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2.0 * M * K * N / best / 1e9
