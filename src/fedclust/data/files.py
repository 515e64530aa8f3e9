"""Readers for local data files: MNIST/Fashion-MNIST IDX, MATLAB ``.mat`` and CIFAR-10 python batches.

Nothing here downloads anything. Every reader checks its file completely before it returns, so a
missing, truncated or mismatched file stops a run at the loading step:

* a missing file raises :class:`FileNotFoundError` naming the path and what was expected there;
* a truncated or malformed file raises :class:`ValueError` naming the path and what was expected
  (for IDX: the expected versus the actual number of bytes).

All readers return a :class:`~fedclust.data.base.Dataset` in raw units (pixels 0..255 as float32);
scale with :func:`fedclust.data.preprocess.preprocess`.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import zlib
from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse

from fedclust.data.base import Dataset

__all__ = [
    "load_idx",
    "read_idx",
    "load_mnist_folder",
    "load_mat",
    "load_cifar10",
    "MNIST_FILES",
    "CIFAR10_TRAIN_BATCHES",
    "CIFAR10_TEST_BATCH",
]

_NO_DOWNLOAD = "fedclust reads local files only and downloads nothing"


def _require_file(path, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: file not found; expected {what} at this path ({_NO_DOWNLOAD})")
    return p


# --------------------------------------------------------------------------- IDX
#: IDX magic number -> (what, number of dimensions) for the two kinds of MNIST file.
_IDX_IMAGES_MAGIC = 2051  # 0x00000803: uint8, 3 dims
_IDX_LABELS_MAGIC = 2049  # 0x00000801: uint8, 1 dim

#: Standard file names of the MNIST / Fashion-MNIST distributions, per split.
MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _read_bytes(p: Path) -> bytes:
    """The file's content, gunzipped when it starts with the gzip magic (whatever its suffix)."""
    with open(p, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise ValueError(f"{p}: the gzip stream is truncated or corrupt ({exc})") from None
    return raw


def read_idx(path, expected_magic: int, what: str = "an IDX file") -> np.ndarray:
    """Read one uint8 IDX file (``.gz`` or raw) into an array of its declared shape.

    Checks the magic number (``expected_magic``: 2051 for images, 2049 for labels) and that the
    payload has exactly ``prod(dims)`` bytes.
    """
    p = _require_file(path, what)
    data = _read_bytes(p)
    if len(data) < 4:
        raise ValueError(f"{p}: truncated IDX header; expected at least 4 bytes, got {len(data)}")
    magic = int.from_bytes(data[:4], "big")
    if magic != expected_magic:
        raise ValueError(
            f"{p}: bad IDX magic number {magic} (0x{magic:08x}); expected {expected_magic} "
            f"(0x{expected_magic:08x}) for {what}"
        )
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{p}: truncated IDX header; expected {header} bytes, got {len(data)}")
    dims = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(dims, dtype=np.int64))
    if len(data) != expected:
        kind = "truncated" if len(data) < expected else "has trailing bytes"
        raise ValueError(
            f"{p}: IDX file {kind}; header declares dims {dims}, so expected {expected} bytes "
            f"(uncompressed), got {len(data)}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def load_idx(images_path, labels_path, name: str = "mnist", image_shape: tuple[int, int] | None = (28, 28)) -> Dataset:
    """MNIST-style images + labels from two IDX files (``.gz`` or raw).

    Checks the magic numbers (2051 / 2049), that the images are 3-D (n, rows, cols) with
    (rows, cols) == ``image_shape`` (28 x 28 for MNIST and Fashion-MNIST; ``None`` accepts any size),
    and that the image and label counts match. Returns ``X`` (n, rows*cols) float32 in 0..255, ``images``
    (n, rows, cols) (28 x 28 for MNIST and Fashion-MNIST), ``y`` int64 and ``meta["pixel_max"] = 255``.
    """
    imgs = read_idx(images_path, _IDX_IMAGES_MAGIC, "an IDX3 image file (magic 2051, n x rows x cols uint8)")
    labels = read_idx(labels_path, _IDX_LABELS_MAGIC, "an IDX1 label file (magic 2049, n uint8 labels)")
    if imgs.ndim != 3:
        raise ValueError(f"{images_path}: expected 3 IDX dimensions (n, rows, cols), got {imgs.shape}")
    if image_shape is not None and tuple(imgs.shape[1:]) != tuple(image_shape):
        raise ValueError(
            f"{images_path}: images are {imgs.shape[1]} x {imgs.shape[2]}; expected "
            f"{image_shape[0]} x {image_shape[1]} (pass image_shape=None to accept any size)"
        )
    if labels.ndim != 1:
        raise ValueError(f"{labels_path}: expected 1 IDX dimension (n), got {labels.shape}")
    if imgs.shape[0] != labels.shape[0]:
        raise ValueError(
            f"image/label count mismatch: {images_path} holds {imgs.shape[0]} images but "
            f"{labels_path} holds {labels.shape[0]} labels; expected the same number"
        )
    n = imgs.shape[0]
    images = imgs.astype(np.float32)
    return Dataset(
        X=images.reshape(n, -1),
        y=labels.astype(np.int64),
        name=name,
        images=images,
        meta={"images_path": str(images_path), "labels_path": str(labels_path), "pixel_max": 255.0},
    )


def _find_idx(folder: Path, stem: str) -> Path:
    for cand in (folder / (stem + ".gz"), folder / stem):
        if cand.is_file():
            return cand
    # also accept the dotted names some mirrors use (t10k-images.idx3-ubyte)
    dotted = stem.replace("-idx", ".idx")
    for cand in (folder / (dotted + ".gz"), folder / dotted):
        if cand.is_file():
            return cand
    raise FileNotFoundError(
        f"{folder / (stem + '.gz')}: file not found; expected the IDX file {stem}[.gz] in {folder} ({_NO_DOWNLOAD})"
    )


def load_mnist_folder(folder, split: str = "test", name: str = "mnist") -> Dataset:
    """MNIST or Fashion-MNIST from a folder holding the standard file names
    (``t10k-images-idx3-ubyte[.gz]`` etc.; both distributions use the same names).

    ``split``: ``"test"`` (10,000 images) or ``"train"`` (60,000).
    """
    if split not in MNIST_FILES:
        raise ValueError(f"split must be one of {sorted(MNIST_FILES)}, got {split!r}")
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{folder}: folder not found; expected a folder with the {name} IDX files "
            f"{MNIST_FILES[split]} (.gz or raw) ({_NO_DOWNLOAD})"
        )
    img_stem, lab_stem = MNIST_FILES[split]
    ds = load_idx(_find_idx(folder, img_stem), _find_idx(folder, lab_stem), name=name)
    ds.meta["split"] = split
    return ds


# --------------------------------------------------------------------------- MATLAB .mat
def load_mat(
    path, x_key: str = "X", label_key: str = "Label", *, samples_as: str = "columns", name: str | None = None
) -> Dataset:
    """A MATLAB ``.mat`` file (v5/v7, read with :func:`scipy.io.loadmat`).

    ``X = mat[x_key]`` holds the samples as **columns** (features x samples, the FedSC files) unless
    ``samples_as="rows"``; it is transposed to rows = samples. ``mat[label_key]`` holds one label per
    sample; the distinct label values (sorted) are remapped to 0..C-1 (``meta["label_values"]`` keeps
    the originals). Use ``x_key="Xn"`` for the noisy copy in ``Concentric_Circles.mat``.
    """

    p = _require_file(path, f"a MATLAB .mat file with keys {x_key!r} and {label_key!r}")
    if samples_as not in ("columns", "rows"):
        raise ValueError(f"samples_as must be 'columns' or 'rows', got {samples_as!r}")
    try:
        mat = scipy.io.loadmat(p)
    except NotImplementedError:
        raise ValueError(
            f"{p}: MATLAB v7.3 (HDF5) files are not supported; expected a v5/v7 .mat file "
            "(re-save it in MATLAB with save(..., '-v7'))"
        ) from None
    except Exception as exc:  # scipy raises several types for corrupt or truncated files
        raise ValueError(f"{p}: cannot read as a MATLAB .mat file ({type(exc).__name__}: {exc})") from None
    keys = sorted(k for k in mat if not k.startswith("__"))
    for key, role in ((x_key, "x_key"), (label_key, "label_key")):
        if key not in mat:
            raise ValueError(f"{p}: no variable {key!r} ({role}); the file holds {keys}")
    X = mat[x_key]
    if scipy.sparse.issparse(X):
        X = X.toarray()
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{p}: {x_key!r} must be a numeric matrix, got {type(mat[x_key]).__name__}") from None
    if X.ndim != 2:
        raise ValueError(f"{p}: {x_key!r} must be a 2-D matrix, got shape {X.shape}")
    if samples_as == "columns":
        X = X.T
    labels = np.asarray(mat[label_key]).ravel()
    if labels.shape[0] != X.shape[0]:
        raise ValueError(
            f"{p}: {label_key!r} has {labels.shape[0]} labels but {x_key!r} has {X.shape[0]} samples "
            f"(samples as {samples_as}, shape of {x_key!r} in the file {np.shape(mat[x_key])}); "
            "expected one label per sample"
        )
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{p}: {x_key!r} contains NaN or infinite values")
    values, y = np.unique(labels, return_inverse=True)
    return Dataset(
        X=X,
        y=y,
        name=name or p.stem,
        meta={"path": str(p), "x_key": x_key, "label_key": label_key, "label_values": values, "keys": keys},
    )


# --------------------------------------------------------------------------- CIFAR-10
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCH = "test_batch"


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickles only plain containers and numpy arrays: a CIFAR batch file cannot run code."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("_codecs", "encode"),
    }

    def find_class(self, module, name):
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a data file")


def _get(d: dict, key: str):
    if key in d:
        return d[key]
    return d.get(key.encode())


def _read_cifar_batch(p: Path):
    with open(p, "rb") as f:
        raw = f.read()
    try:
        d = _ArrayOnlyUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as exc:
        raise ValueError(
            f"{p}: cannot read as a CIFAR-10 python batch (truncated or corrupt pickle, {len(raw)} bytes; "
            f"{type(exc).__name__}: {exc}); expected a pickled dict with 'data' (n x 3072 uint8) and 'labels'"
        ) from None
    if not isinstance(d, dict):
        raise ValueError(f"{p}: expected a pickled dict with 'data' and 'labels', got {type(d).__name__}")
    data, labels = _get(d, "data"), _get(d, "labels")
    if data is None or labels is None:
        raise ValueError(f"{p}: expected keys 'data' and 'labels', got {sorted(map(str, d))}")
    data = np.asarray(data)
    labels = np.asarray(labels).ravel()
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype != np.uint8:
        raise ValueError(f"{p}: expected 'data' of shape (n, 3072) uint8, got {data.shape} {data.dtype}")
    if labels.shape[0] != data.shape[0]:
        raise ValueError(
            f"{p}: 'data' has {data.shape[0]} rows but 'labels' has {labels.shape[0]} entries; "
            "expected one label per row"
        )
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{p}: expected labels in 0..9, got range {labels.min()}..{labels.max()}")
    return data, labels.astype(np.int64)


def load_cifar10(folder, split: str = "train") -> Dataset:
    """CIFAR-10 from the official python batches (``data_batch_1..5``, ``test_batch``).

    ``folder`` is the ``cifar-10-batches-py`` folder or a folder containing it. ``split="train"``
    concatenates the 5 training batches (50,000 images), ``"test"`` reads ``test_batch`` (10,000).
    Each row of a batch is 1024 red, 1024 green then 1024 blue values of a 32 x 32 image, so
    ``images`` = rows reshaped to (n, 3, 32, 32) and ``X`` = the same rows (n, 3072), float32 in 0..255.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    folder = Path(folder)
    if (folder / "cifar-10-batches-py").is_dir():
        folder = folder / "cifar-10-batches-py"
    names = CIFAR10_TRAIN_BATCHES if split == "train" else (CIFAR10_TEST_BATCH,)
    paths = [_require_file(folder / nm, f"the CIFAR-10 python batch {nm!r} (split {split!r})") for nm in names]
    parts = [_read_cifar_batch(p) for p in paths]
    data = np.concatenate([d for d, _ in parts])
    y = np.concatenate([lab for _, lab in parts])
    X = data.astype(np.float32)
    return Dataset(
        X=X,
        y=y,
        name="cifar10",
        images=X.reshape(-1, 3, 32, 32),
        meta={"folder": os.fspath(folder), "split": split, "pixel_max": 255.0},
    )
