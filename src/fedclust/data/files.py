"""Readers for local data files: MNIST/Fashion-MNIST IDX, MATLAB ``.mat``, CIFAR-10 python batches,
and a user's own tables (CSV, Parquet) and arrays (``.npz``).

Nothing here downloads anything. Every reader checks its file completely before it returns, so a
missing, truncated or mismatched file stops a run at the loading step:

* a missing file raises :class:`FileNotFoundError` naming the path and what was expected there;
* a truncated or malformed file raises :class:`ValueError` naming the path and what was expected
  (for IDX: the expected versus the actual number of bytes).

All readers return a :class:`~fedclust.data.base.Dataset` in raw units (pixels 0..255 as float32);
scale with :func:`fedclust.data.preprocess.preprocess`.

A table (CSV, Parquet) becomes a data set through :func:`table_to_dataset`, the one conversion that
both the library readers (:func:`load_csv`, :func:`load_parquet`, reading with pandas) and the Kedro
catalog dataset :class:`fedclust.pipelines.datasets.TableDataset` (reading with kedro-datasets) use,
so both give the same arrays. A missing or non-numeric value in a feature, or a missing label, is a
:class:`~fedclust.errors.DataError` naming the column and the number of bad rows.
"""

from __future__ import annotations

import difflib
import gzip
import io
import os
import pickle
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.io
import scipy.sparse

from fedclust.data.base import Dataset
from fedclust.errors import DataError

__all__ = [
    "load_idx",
    "read_idx",
    "load_mnist_folder",
    "load_mat",
    "load_cifar10",
    "load_csv",
    "load_parquet",
    "load_npz",
    "table_to_dataset",
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


# --------------------------------------------------------------------------- tables and arrays
#: at most this many bad columns are named in one error line
_MAX_NAMED = 3


def _bad_rows_text(column: str, bad: np.ndarray, values) -> str:
    """``column 'x': 3 rows with a missing or non-numeric value (first: data row 7, '?')``."""
    first = int(np.flatnonzero(bad)[0])
    shown = values[first]
    try:
        empty = bool(pd.isna(shown))
    except (TypeError, ValueError):  # not a scalar
        empty = False
    what = "empty" if empty else repr(shown.item() if isinstance(shown, np.generic) else shown)
    n = int(bad.sum())
    return f"column {column!r}: {n} row{'s' if n != 1 else ''} with a missing or non-numeric value (first: data row {first + 1}, {what})"


def _numeric(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(values as float64, bad rows)`` of a column: a bad row is missing, not a number or infinite."""
    if pd.api.types.is_bool_dtype(col):
        vals = col.astype("float64").to_numpy()
    elif pd.api.types.is_numeric_dtype(col):
        vals = col.to_numpy(dtype="float64", na_value=np.nan)
    else:
        vals = pd.to_numeric(col, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    return vals, ~np.isfinite(vals)


def _looks_numeric(col: pd.Series) -> bool:
    """A numeric (or boolean) column, or a text column most of whose filled cells are numbers (a
    numeric column with a few bad cells, such as ``?`` for missing: it is kept, and its bad cells
    are reported, instead of being dropped in silence)."""
    if pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col):
        return True
    filled = col.dropna()
    if filled.empty:
        return False
    return bool(pd.to_numeric(filled, errors="coerce").notna().mean() > 0.5)


def _column_list(value, what: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(c, (str, int)) for c in value):
        raise DataError(f"{what} must be a list of column names, got {value!r}")
    return [str(c) for c in value]


def _unknown_column(source: str, column: str, role: str, columns: list[str]) -> DataError:
    near = difflib.get_close_matches(column, columns, n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return DataError(f"{source}: no column {column!r} ({role}){hint} (the columns: {', '.join(columns)})")


def _class_ids(values, source: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    """``(y, label_values)``: class ids 0..C-1 in the order of the sorted distinct label values
    (numbers by value, anything else as text); a missing label is a :class:`DataError` naming
    ``what`` and the number of unlabelled rows."""
    col = pd.Series(np.asarray(values)).infer_objects()
    numeric = pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)
    missing = col.isna().to_numpy()
    if numeric:
        missing |= ~np.isfinite(col.to_numpy(dtype="float64", na_value=np.nan))
    if missing.any():
        raise DataError(
            f"{source}: {what}: {int(missing.sum())} row(s) without a label (first: data row "
            f"{int(np.flatnonzero(missing)[0]) + 1}); fill or drop those rows"
        )
    arr = col.to_numpy() if numeric else col.astype(str).to_numpy()
    label_values, y = np.unique(arr, return_inverse=True)
    return y.astype(np.int64).ravel(), label_values


def table_to_dataset(
    frame: pd.DataFrame, *, label=None, features=None, name: str = "table", source: str = ""
) -> Dataset:
    """A table (rows = samples) as a :class:`Dataset`.

    * ``label``: the column of class labels (any values: the sorted distinct values become the
      classes 0..C-1, ``meta["label_values"]`` keeps them); None: an unlabelled data set.
    * ``features``: the feature columns, in this order; None: every numeric column but the label
      (a column of text is left out, and named in ``meta["dropped_columns"]``).

    A missing, non-numeric or infinite feature value, or a missing label, raises a
    :class:`~fedclust.errors.DataError` naming the column(s) and the number of bad rows.
    """
    source = source or name
    columns = [str(c) for c in frame.columns]
    frame = frame.set_axis(columns, axis=1)
    if label is not None:
        label = str(label)
        if label not in columns:
            raise _unknown_column(source, label, "the label, dataset.options.label", columns)
    chosen = _column_list(features, f"{source}: features")
    dropped: list[str] = []
    if chosen is None:
        rest = [c for c in columns if c != label]
        chosen = [c for c in rest if _looks_numeric(frame[c])]
        dropped = [c for c in rest if c not in chosen]
    else:
        for c in chosen:
            if c not in columns:
                raise _unknown_column(source, c, "in dataset.options.features", columns)
        if label is not None and label in chosen:
            raise DataError(f"{source}: the label column {label!r} is also listed in features; remove it there")
    if not chosen:
        raise DataError(
            f"{source}: no numeric feature column (the columns: {', '.join(columns)}); "
            "list the feature columns in dataset.options.features"
        )
    X = np.empty((len(frame), len(chosen)), dtype=np.float64)
    problems = []
    for j, c in enumerate(chosen):
        X[:, j], bad = _numeric(frame[c])
        if bad.any():
            problems.append(_bad_rows_text(c, bad, frame[c].to_numpy(dtype=object)))
    if problems:
        more = f"; and {len(problems) - _MAX_NAMED} more column(s)" if len(problems) > _MAX_NAMED else ""
        raise DataError(
            f"{source}: " + "; ".join(problems[:_MAX_NAMED]) + more + ". Fix or drop those rows, or leave the "
            "column out with dataset.options.features"
        )
    meta = {"source": source, "features": chosen, "dropped_columns": dropped, "label_column": label}
    if label is None:
        return Dataset(X=X, y=None, name=name, meta=meta)
    y, values = _class_ids(frame[label].to_numpy(dtype=object), source, f"label column {label!r}")
    return Dataset(X=X, y=y, name=name, meta={**meta, "label_values": values})


def _read_table(p: Path, reader, what: str, **kwargs) -> pd.DataFrame:
    try:
        return reader(p, **kwargs)
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise DataError(f"{p}: cannot read as {what} ({type(exc).__name__}: {' '.join(str(exc).split())})") from None


def load_csv(
    path, label: str | None = None, features: list[str] | None = None, *, sep: str = ",", name: str | None = None
) -> Dataset:
    """A CSV file with a header row (read with :func:`pandas.read_csv`), through :func:`table_to_dataset`.
    ``sep``: the field separator (``";"`` for many European exports, ``"\\t"`` for TSV)."""
    p = _require_file(path, "a CSV file with a header row")
    frame = _read_table(p, pd.read_csv, "a CSV file", sep=sep)
    return table_to_dataset(frame, label=label, features=features, name=name or p.stem, source=str(p))


def load_parquet(
    path, label: str | None = None, features: list[str] | None = None, *, name: str | None = None
) -> Dataset:
    """A Parquet file (read with :func:`pandas.read_parquet`, pyarrow), through :func:`table_to_dataset`."""
    p = _require_file(path, "a Parquet file")
    frame = _read_table(p, pd.read_parquet, "a Parquet file")
    return table_to_dataset(frame, label=label, features=features, name=name or p.stem, source=str(p))


def load_npz(path, x_key: str = "X", label: str | None = None, *, name: str | None = None) -> Dataset:
    """A NumPy ``.npz`` archive: ``archive[x_key]`` (n_samples, n_features), rows = samples, and the
    labels in ``archive[label]`` (one per row; distinct values sorted to classes 0..C-1), or none
    (``label=None``: an unlabelled data set). Pickled objects are refused."""
    p = _require_file(path, f"a NumPy .npz archive with the array {x_key!r}")
    try:
        with np.load(p, allow_pickle=False) as archive:
            keys = sorted(archive.files)
            for key, role in ((x_key, "x_key"), (label, "label")):
                if key is not None and key not in keys:
                    raise DataError(f"{p}: no array {key!r} ({role}); the archive holds {keys}")
            X = archive[x_key]
            labels = None if label is None else archive[label]
    except DataError:
        raise
    except (OSError, ValueError, EOFError, zlib.error) as exc:
        raise DataError(f"{p}: cannot read as a NumPy .npz archive ({type(exc).__name__}: {exc})") from None
    if X.ndim != 2 or X.dtype.kind not in "biuf":
        raise DataError(f"{p}: {x_key!r} must be a 2-D numeric array (samples x features), got {X.dtype} {X.shape}")
    X = X.astype(np.float64)
    bad_cols = [j for j in range(X.shape[1]) if not np.isfinite(X[:, j]).all()]
    if bad_cols:
        problems = [_bad_rows_text(f"{x_key}[:, {j}]", ~np.isfinite(X[:, j]), X[:, j]) for j in bad_cols]
        more = f"; and {len(problems) - _MAX_NAMED} more column(s)" if len(problems) > _MAX_NAMED else ""
        raise DataError(f"{p}: " + "; ".join(problems[:_MAX_NAMED]) + more + ". Fix or drop those rows")
    meta = {"source": str(p), "x_key": x_key, "label_column": label, "keys": keys}
    if labels is None:
        return Dataset(X=X, y=None, name=name or p.stem, meta=meta)
    labels = np.asarray(labels).ravel()
    if labels.shape[0] != X.shape[0]:
        raise DataError(f"{p}: {label!r} has {labels.shape[0]} labels but {x_key!r} has {X.shape[0]} rows")
    y, values = _class_ids(labels, str(p), f"array {label!r}")
    return Dataset(X=X, y=y, name=name or p.stem, meta={**meta, "label_values": values})
