"""The size of a data set before it is built: ``(samples, features, classes)`` from its parameters
(a generator's options, a built-in's known shape) or from a file's header (a ``.mat`` file's
variable table, an ``.npz`` member's header, a Parquet footer, the first lines of a CSV), without
reading the data. What the memory check before loading (:func:`require_dataset_memory`) and the work
estimate before a run compare with the machine.

Estimates: a shape that cannot be read cheaply (a file that is missing or unreadable: its loader says
why) is None, and nothing is refused on it.
"""

from __future__ import annotations

import inspect
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from fedclust.data import synthetic
from fedclust.memory import human, require_memory

#: float64 copies of the data set alive while it is generated or read, subsampled and scaled
DATA_COPIES = 3

_BUILTIN = {"digits": (1797, 64, 10), "iris": (150, 4, 3), "wine": (178, 13, 3), "breast_cancer": (569, 30, 2)}
_MNIST = {"test": 10_000, "train": 60_000}
_CIFAR = {"test": 10_000, "train": 50_000}
_GENERATORS = {
    "gaussian_mixture": synthetic.gaussian_mixture,
    "linear_model": synthetic.linear_model,
    "concentric_circles": synthetic.concentric_circles,
    "mixed_linear_regression": synthetic.mixed_linear_regression,
    "mixed_regression_1d": synthetic.mixed_regression_1d,
}
#: FedSC convenience name -> file name inside the folder given as ``path``
FEDSC_FILES = {
    "fedsc_iris": "Iris_tsne.mat",
    "fedsc_bank": "Bank_tsne.mat",
    "fedsc_coil20": "COIL20_tsne.mat",
    "fedsc_circles": "Concentric_Circles.mat",
}


class Shape(NamedTuple):
    n: int  # samples
    m: int  # features
    classes: int  # classes (an estimate for a file: 1 where unknown)


def _int(value, default: int) -> int:
    try:
        out = int(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return out if out >= 0 else default


def _generated(name: str, options: dict) -> Shape:
    func = _GENERATORS[name]
    defaults = {k: p.default for k, p in inspect.signature(func).parameters.items()}
    opt = {**defaults, **options}
    if name == "concentric_circles":
        radii = opt.get("radii")
        return Shape(_int(opt["n_samples"], 1), 2, len(radii) if isinstance(radii, (list, tuple)) else 2)
    if name == "mixed_regression_1d":
        return Shape(_int(opt["n_clients"], 1) * _int(opt["n_per_client"], 1), 1, 4)
    return Shape(_int(opt["n_samples"], 1), _int(opt["n_features"], 1), _int(opt["k"], 1))


def _mat_shape(path: Path, x_key: str) -> Shape | None:
    import scipy.io  # on first use, as the .mat loader does

    for key, shape, _ in scipy.io.whosmat(str(path)):
        if key == x_key and len(shape) == 2:
            return Shape(max(shape), min(shape), 1)
    return None


def _npz_shape(path: Path, x_key: str) -> Shape | None:
    with zipfile.ZipFile(path) as archive, archive.open(f"{x_key}.npy") as fh:
        version = np.lib.format.read_magic(fh)
        readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in readers:
            return None
        shape, _, _ = readers[version](fh)
    if len(shape) < 1:
        return None
    return Shape(int(shape[0]), int(np.prod(shape[1:])) if len(shape) > 1 else 1, 1)


def _parquet_shape(path: Path) -> Shape:
    import pyarrow.parquet as pq  # on first use: only a Parquet data set needs it

    meta = pq.ParquetFile(path).metadata
    return Shape(int(meta.num_rows), int(meta.num_columns), 1)


def _csv_shape(path: Path, sep: str) -> Shape | None:
    """Rows and columns of a CSV from its size and its first 64 KiB (the bytes per row there)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(1 << 16)
    lines = head.split(b"\n")
    if len(lines) < 2:
        return Shape(1, max(1, head.count(sep.encode()) + 1), 1)
    body = lines[1:-1] if len(lines) > 2 else lines[1:]
    per_row = max(1.0, sum(len(x) + 1 for x in body) / max(len(body), 1))
    cols = lines[0].count(sep.encode()) + 1
    return Shape(max(1, int((size - len(lines[0])) / per_row)), cols, 1)


def _file_shape(name: str, path, options: dict) -> Shape | None:
    if path is None:
        return None
    p = Path(path)
    if name in ("mnist", "fashion_mnist"):
        return Shape(_MNIST.get(options.get("split", "test"), 60_000), 784, 10)
    if name == "cifar10":
        return Shape(_CIFAR.get(options.get("split", "train"), 50_000), 3072, 10)
    if name in FEDSC_FILES and p.suffix != ".mat":
        p = p / FEDSC_FILES[name]
    if not p.is_file():
        return None
    if name == "mat" or name in FEDSC_FILES:
        return _mat_shape(p, options.get("x_key", "X"))
    if name == "npz":
        return _npz_shape(p, options.get("x_key", "X"))
    if name == "parquet":
        return _parquet_shape(p)
    if name == "csv":
        return _csv_shape(p, options.get("sep", ","))
    return None


def dataset_shape(name: str, path=None, options: dict | None = None) -> Shape | None:
    """The shape of the data set ``name`` as loaded (before any subsampling), or None when it cannot
    be told without reading the data. Never raises for a bad file: its loader says what is wrong."""
    options = dict(options or {}) if isinstance(options, dict) else {}
    if name in _BUILTIN:
        return Shape(*_BUILTIN[name])
    if name in _GENERATORS:
        return _generated(name, options)
    try:
        return _file_shape(name, path, options)
    except Exception:  # an unreadable header: the loader gives the error, with the file's name
        return None


def subsampled(shape: Shape, n_per_class=None, n_total=None) -> Shape:
    """The shape after ``n_per_class`` / ``n_total`` subsampling (an upper bound)."""
    n = shape.n
    if isinstance(n_total, int) and not isinstance(n_total, bool) and n_total >= 1:
        n = min(n, n_total)
    if isinstance(n_per_class, int) and not isinstance(n_per_class, bool) and n_per_class >= 1:
        n = min(n, n_per_class * max(shape.classes, 1)) if shape.classes > 1 else n
    return Shape(n, shape.m, shape.classes)


def require_dataset_memory(name: str, path=None, options: dict | None = None, available: int | None = None):
    """Refuse (:class:`fedclust.memory.MemoryEstimateError`, with the estimate) a data set whose
    :data:`DATA_COPIES` float64 copies would not fit in the memory available, before it is generated
    or read; return its shape (None when unknown)."""
    shape = dataset_shape(name, path, options)
    if shape is None:
        return None
    elements = float(shape.n) * float(shape.m)
    require_memory(
        f"dataset {name!r} ({shape.n:,} samples x {shape.m:,} features)",
        {f"{DATA_COPIES} float64 copies of the data set, {human(elements * 8)} each": DATA_COPIES * elements * 8},
        "generate or read a smaller data set (dataset.options: n_samples, n_features; or a smaller file), and run again",
        available=available,
    )
    return shape
