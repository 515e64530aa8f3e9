"""Load any data set by name: :func:`load_dataset` and the one-call :func:`prepare_dataset`.

Names (``DATASET_NAMES``):

=====================  =========================================================================
name                   source, ``path`` and ``options``
=====================  =========================================================================
``digits``             scikit-learn digits (8x8 images, pixel_max 16); no path, no options
``iris``, ``wine``,    scikit-learn built-ins; no path, no options
``breast_cancer``
``gaussian_mixture``   :func:`fedclust.data.synthetic.gaussian_mixture` (n_samples, n_features, k,
                       separation, cluster_std, weights)
``linear_model``       :func:`fedclust.data.synthetic.linear_model` (n_samples, n_features, k,
                       snr_db, balanced, exact_snr)
``concentric_circles`` :func:`fedclust.data.synthetic.concentric_circles` (n_samples, radii, noise,
                       angles)
``mixed_linear_regression``  :func:`fedclust.data.synthetic.mixed_linear_regression` as a Dataset
                       (``y`` = group, ``meta["target"]`` = responses)
``mixed_regression_1d``  :func:`fedclust.data.synthetic.mixed_regression_1d` as a Dataset
``mnist``,             ``path`` = folder with the IDX files (standard names, ``.gz`` or raw);
``fashion_mnist``      option ``split`` = "test" (default) or "train"
``cifar10``            ``path`` = the ``cifar-10-batches-py`` folder (or its parent); option
                       ``split`` = "train" (default) or "test"
``mat``                ``path`` = a ``.mat`` file with samples as columns; options ``x_key``,
                       ``label_key``, ``samples_as``
``csv``, ``parquet``   ``path`` = a table with a header, rows = samples (:func:`fedclust.data.files.load_csv`,
                       :func:`~fedclust.data.files.load_parquet`); options ``label`` (the column of
                       class labels; absent: unlabelled), ``features`` (the feature columns; default
                       every numeric column but the label), ``sep`` (CSV only)
``npz``                ``path`` = a NumPy ``.npz`` archive (:func:`fedclust.data.files.load_npz`);
                       options ``x_key`` (default ``"X"``), ``label`` (the array of labels; absent:
                       unlabelled)
``fedsc_iris``,        the FedSC ``.mat`` files; ``path`` = the folder holding them (or the file
``fedsc_bank``,        itself); options as for ``mat`` (e.g. ``x_key="Xn"`` for the noisy circles)
``fedsc_coil20``,
``fedsc_circles``
=====================  =========================================================================

Synthetic generators get ``seed``; the other loaders are deterministic and ignore it.

Every data set has a display name, :func:`dataset_label`: ``label`` where the parameters give one,
else the file's stem for the data sets read from one file of the user's (``csv``, ``parquet``,
``npz``, ``mat``), else the data set's name. It names the data set in runs, MLflow tags and reports.
"""

from __future__ import annotations

import difflib
import inspect
import json
from pathlib import Path
from typing import Any, Callable

from fedclust.data import builtin, files, synthetic
from fedclust.data.base import Dataset
from fedclust.data.preprocess import check_scaling, preprocess, resolve_minmax_mode, scaling_of, subsample
from fedclust.data.sizes import FEDSC_FILES, require_dataset_memory
from fedclust.digest import array_digest, path_digest
from fedclust.errors import DataError

__all__ = [
    "load_dataset",
    "prepare_dataset",
    "dataset_digest",
    "dataset_label",
    "DATASET_NAMES",
    "FEDSC_FILES",
    "TABLE_NAMES",
]


def _check_options(name: str, func: Callable, options: dict, exclude=("seed",)) -> None:
    params = inspect.signature(func).parameters
    allowed = [p for p in params if p not in exclude]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        near = difflib.get_close_matches(str(unknown[0]), allowed, n=1, cutoff=0.5)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ValueError(
            f"dataset {name!r}: unknown option(s) {unknown}{hint} (allowed options: {', '.join(allowed) or 'none'})"
        )


def _need_path(name: str, path, what: str) -> Path:
    if path is None:
        raise ValueError(f"dataset {name!r} needs path= ({what})")
    return Path(path)


def _no_path(name: str, path) -> None:
    if path is not None:
        raise ValueError(
            f"dataset {name!r} reads no file, but a path was given ({path}): remove the path "
            "(dataset.path), or choose a data set read from files"
        )


def _builtin(name):
    def load(path, seed, options):
        _no_path(name, path)
        if options:
            raise ValueError(f"dataset {name!r}: takes no options, got {sorted(options)}")
        return builtin.BUILTIN_LOADERS[name]()

    return load


def _synthetic(func, exclude=("seed",)):
    def load(path, seed, options):
        _no_path(func.__name__, path)
        _check_options(func.__name__, func, options, exclude)
        out = func(seed=seed, **options)
        return out.as_dataset(func.__name__) if isinstance(out, synthetic.RegressionData) else out

    return load


def _mnist(name):
    def load(path, seed, options):
        _check_options(name, files.load_mnist_folder, options, exclude=("folder", "name"))
        folder = _need_path(name, path, "the folder holding the IDX files, e.g. ../shared/data/mnist")
        return files.load_mnist_folder(folder, name=name, **options)

    return load


def _cifar10(path, seed, options):
    _check_options("cifar10", files.load_cifar10, options, exclude=("folder",))
    folder = _need_path("cifar10", path, "the cifar-10-batches-py folder")
    return files.load_cifar10(folder, **options)


def _mat(name, filename=None):
    def load(path, seed, options):
        _check_options(name, files.load_mat, options, exclude=("path",))
        p = _need_path(
            name,
            path,
            "the .mat file" if filename is None else f"the folder holding {filename}, e.g. ../shared/data/fedsc",
        )
        if filename is not None and not p.suffix == ".mat":
            p = p / filename
        options = dict(options)
        options.setdefault("name", name if filename else None)
        return files.load_mat(p, **options)

    return load


def _file(name: str, reader: Callable, what: str):
    def load(path, seed, options):
        _check_options(name, reader, options, exclude=("path", "name"))
        return reader(_need_path(name, path, what), **options)

    return load


_LOADERS: dict[str, Callable[[Any, int, dict], Dataset]] = {
    "digits": _builtin("digits"),
    "iris": _builtin("iris"),
    "wine": _builtin("wine"),
    "breast_cancer": _builtin("breast_cancer"),
    "gaussian_mixture": _synthetic(synthetic.gaussian_mixture),
    "linear_model": _synthetic(synthetic.linear_model),
    "concentric_circles": _synthetic(synthetic.concentric_circles),
    "mixed_linear_regression": _synthetic(synthetic.mixed_linear_regression),
    "mixed_regression_1d": _synthetic(synthetic.mixed_regression_1d),
    "mnist": _mnist("mnist"),
    "fashion_mnist": _mnist("fashion_mnist"),
    "cifar10": _cifar10,
    "mat": _mat("mat"),
    "csv": _file("csv", files.load_csv, "the CSV file, e.g. data/01_raw/mine.csv"),
    "parquet": _file("parquet", files.load_parquet, "the Parquet file, e.g. data/01_raw/mine.parquet"),
    "npz": _file("npz", files.load_npz, "the .npz archive, e.g. data/01_raw/mine.npz"),
    **{nm: _mat(nm, fn) for nm, fn in FEDSC_FILES.items()},
}

#: Every name :func:`load_dataset` accepts.
DATASET_NAMES = tuple(_LOADERS)

#: The names whose loaders declare a pixel range (``meta["pixel_max"]``): min-max scaling in its
#: ``auto`` mode divides by it and reads nothing of the data.
PIXEL_RANGE_NAMES = ("digits", "mnist", "fashion_mnist", "cifar10")


def planned_scaling(name: str, scale: str = "minmax", options: dict | None = None) -> dict:
    """What the scaling of :func:`prepare_dataset` will read, from its parameters alone (before any
    file is read): the :func:`~fedclust.data.preprocess.scaling_statistics` of the data set it gives."""
    options = options or {}
    if scale == "minmax":
        mode = options.get("minmax_mode", "auto")
        return scaling_of(resolve_minmax_mode(mode, options.get("bounds"), name in PIXEL_RANGE_NAMES))
    return scaling_of(scale)


#: The names whose data sets read no file (built-in or generated): a path given to them is a mistake.
NO_FILE_NAMES = (
    "digits",
    "iris",
    "wine",
    "breast_cancer",
    "gaussian_mixture",
    "linear_model",
    "concentric_circles",
    "mixed_linear_regression",
    "mixed_regression_1d",
)


#: the data sets read from one file of the user's: their display name defaults to the file's stem
TABLE_NAMES = ("csv", "parquet", "npz", "mat")

#: The keys of a data-set spec (a benchmark entry, a server-data file): a ``dataset`` group's keys.
SPEC_KEYS = ("name", "path", "options", "label", "scale")


def dataset_label(spec: dict | str, data_paths: dict | None = None) -> str:
    """The display name of a data set given by ``spec`` (the ``dataset`` parameters, a benchmark
    entry, or a bare name): ``spec["label"]`` when set, else the stem of its file for
    :data:`TABLE_NAMES` (``path``, or ``data_paths[name]``), else its name."""
    if isinstance(spec, str):
        spec = {"name": spec}
    name = str(spec.get("name", ""))
    if spec.get("label"):
        return str(spec["label"])
    path = spec.get("path") or (data_paths or {}).get(name)
    if name in TABLE_NAMES and path:
        return Path(path).stem
    return name


def load_dataset(name: str, *, path=None, seed: int = 0, **options) -> Dataset:
    """Load the data set ``name`` (see the module docstring for names, ``path`` and ``options``).

    Raises ValueError for an unknown name (listing the valid ones), an unknown option or a missing
    ``path``; FileNotFoundError / ValueError from the file readers for missing or corrupt files.
    """
    if name not in _LOADERS:
        raise ValueError(f"unknown dataset name {name!r}; valid names: {', '.join(DATASET_NAMES)}")
    require_dataset_memory(name, path, options)  # a data set that cannot fit is refused before it is built
    ds = _LOADERS[name](path, seed, options)
    ds.meta.setdefault("dataset", name)
    _check_not_empty(ds, name, path)
    return ds


def _check_not_empty(ds: Dataset, name: str, path=None) -> None:
    if ds.n_samples == 0 or ds.n_features == 0:
        src = f" read from {path}" if path is not None else ""
        what = "no samples" if ds.n_samples == 0 else "no features"
        raise DataError(
            f"dataset {name!r}{src} has {what} (shape {tuple(ds.X.shape)}); "
            "check the file, or the subsampling options n_per_class / n_total"
        )


def check_dataset_params(
    name, *, seed=0, scale="minmax", n_per_class=None, n_total=None, options: dict | None = None
) -> None:
    """The checks of :func:`prepare_dataset`'s parameters that need no data (a ValueError naming the
    parameter): also run by the pre-run check, before anything is built."""
    if not isinstance(name, str) or name not in _LOADERS:
        near = difflib.get_close_matches(str(name), DATASET_NAMES, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ValueError(f"unknown dataset name {name!r}{hint}; valid names: {', '.join(DATASET_NAMES)}")
    check_scaling(scale, (options or {}).get("minmax_mode", "auto"), (options or {}).get("bounds"))
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    for pname, val in (("n_per_class", n_per_class), ("n_total", n_total)):
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 1):
            raise ValueError(f"{pname} must be a positive integer or None, got {val!r}")
    if n_per_class is not None and n_total is not None:
        raise ValueError("give either n_per_class or n_total, not both")


def prepare_dataset(
    name: str,
    path=None,
    seed: int = 0,
    scale: str = "minmax",
    n_per_class: int | None = None,
    n_total: int | None = None,
    options: dict | None = None,
    label: str | None = None,
    **more_options,
) -> Dataset:
    """Load, subsample, then scale, in one call (what the data node runs on the ``dataset`` parameters).

    ``label`` is the display name of the data set (:func:`dataset_label`; the data set's ``name``
    attribute), not the label column of a table (that is ``options["label"]``).

    ``options`` (a dict, convenient in YAML) and ``**more_options`` are merged and passed to the
    loader, except ``minmax_mode`` and ``bounds`` which go to :func:`preprocess`. Subsampling (``n_per_class``
    or ``n_total``, seeded by ``seed``) comes before scaling, so
    per-feature statistics are those of the kept samples. Parameters are checked before any file is read.
    """
    opts = {**(options or {}), **more_options}
    check_dataset_params(name, seed=seed, scale=scale, n_per_class=n_per_class, n_total=n_total, options=opts)
    minmax_mode, bounds = opts.pop("minmax_mode", "auto"), opts.pop("bounds", None)
    ds = load_dataset(name, path=path, seed=seed, **opts)
    ds.name = dataset_label({"name": name, "path": path, "label": label})
    ds = subsample(ds, n_per_class=n_per_class, n_total=n_total, seed=seed)
    _check_not_empty(ds, name, path)
    return preprocess(ds, scale=scale, minmax_mode=minmax_mode, bounds=bounds)


#: (name, seed, options) -> digest of the arrays of a data set that reads no file (built-in, generated)
_ARRAY_DIGESTS: dict[str, str] = {}


def dataset_digest(name: str, path=None, seed: int = 0, options: dict | None = None) -> str:
    """A hash of the content a data set is loaded from: the bytes of the file or folder that
    ``path`` points to (the FedSC names read one file of a folder), or, for a data set that reads
    no file (built-in, generated), the arrays themselves (computed once per process and arguments)."""
    if path is not None:
        p = Path(path)
        if name in FEDSC_FILES and p.suffix != ".mat":
            p = p / FEDSC_FILES[name]
        return path_digest(p)
    key = json.dumps([name, seed, options or {}], sort_keys=True, default=str)
    if key not in _ARRAY_DIGESTS:
        opts = {k: v for k, v in (options or {}).items() if k not in ("minmax_mode", "bounds")}
        ds = load_dataset(name, seed=seed, **opts)
        _ARRAY_DIGESTS[key] = array_digest(ds.X, ds.y)
    return _ARRAY_DIGESTS[key]
