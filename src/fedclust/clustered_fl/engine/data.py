"""Engine data: :class:`FederatedTensors`, the padded per-client layout (rows grouped by client,
padding masked out of every loss), the padding mask, and the same layout on disk
(:func:`write_client_npy`, :meth:`FederatedTensors.from_npy`: one ``.npy`` file per field, opened
memory-mapped, so a population larger than the memory is read chunk by chunk)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

Params = dict[str, torch.Tensor]


class GatheredParams(Mapping):
    """``{name: models[name][index]}``, gathered name by name when first read: the start models of
    clients that chose among few cluster models (``models`` stacked (k, ...), ``index`` (B,) the
    choices). A round's largest copy is its clients' start models (a first layer of 784 x 200 floats
    is 0.6 MB per client); the deferred local update reads each distinct start instead, and a plain
    average never reads them, so the copy is made only where something reads it. Each name is
    gathered once (cached); the values are those of ``models[name].index_select(0, index)``."""

    def __init__(self, models: Mapping[str, torch.Tensor], index: torch.Tensor):
        self.models, self.index = models, index
        self._gathered: dict[str, torch.Tensor] = {}

    def __getitem__(self, name: str) -> torch.Tensor:
        v = self._gathered.get(name)
        if v is None:
            v = self._gathered[name] = self.models[name].index_select(0, self.index)
        return v

    def __iter__(self):
        return iter(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def is_gathered(self, name: str) -> bool:
        """Whether ``name`` was read (its copy made) already."""
        return name in self._gathered

    def rows(self, sl: slice) -> GatheredParams:
        """The clients ``sl`` (names already gathered: views of their copies)."""
        out = GatheredParams(self.models, self.index[sl])
        out._gathered = {k: v[sl] for k, v in self._gathered.items()}
        return out


# the per-client fields of the training and of the test clients, as .npy files of the same name
TRAIN_FIELDS = ("X_train", "y_train", "n_train", "group")
TEST_FIELDS = ("X_test", "y_test", "n_test", "test_group")


def write_client_npy(directory, n_clients: int, blocks: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``n_clients`` clients to ``directory`` as one ``.npy`` file per field, block by block.

    Every block maps field names (``X_train``, ``y_train``, ``n_train``, ``group`` or the test fields
    ``X_test``, ``y_test``, ``n_test``, ``test_group``) to arrays of the next consecutive clients
    (first axis = clients, the same count in every field of a block). The files are created from the
    first block's shapes and dtypes and filled with plain sequential writes (no mapping in this
    process), so only one block is ever in memory. Fields of the training and of the test clients go
    through separate calls when their client counts differ. Returns the directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, tuple[Any, int, tuple, np.dtype]] = {}
    pos = 0
    try:
        for block in blocks:
            arrs = {k: np.asarray(v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in block.items()}
            unknown = set(arrs) - set(TRAIN_FIELDS) - set(TEST_FIELDS)
            if unknown:
                raise ValueError(f"unknown fields {sorted(unknown)}; expected some of {TRAIN_FIELDS + TEST_FIELDS}")
            sizes = {len(a) for a in arrs.values()}
            if len(sizes) != 1:
                raise ValueError(f"a block's fields must have the same number of clients, got {sorted(sizes)}")
            b = sizes.pop()
            if not files:
                for k, a in arrs.items():
                    # open_memmap writes the header and sizes the file; the rows are written below
                    mm = np.lib.format.open_memmap(
                        directory / f"{k}.npy", mode="w+", dtype=a.dtype, shape=(n_clients, *a.shape[1:])
                    )
                    offset = mm.offset
                    del mm
                    files[k] = (open(directory / f"{k}.npy", "r+b"), offset, a.shape[1:], a.dtype)
            if set(arrs) != set(files):
                raise ValueError(f"every block needs the fields {sorted(files)}, got {sorted(arrs)}")
            if pos + b > n_clients:
                raise ValueError(f"the blocks hold more than n_clients={n_clients} clients")
            for k, a in arrs.items():
                f, offset, shape, dtype = files[k]
                if a.shape[1:] != shape or a.dtype != dtype:
                    raise ValueError(f"{k}: block of shape {a.shape[1:]} / {a.dtype}, the file has {shape} / {dtype}")
                f.seek(offset + pos * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
                f.write(np.ascontiguousarray(a).tobytes())
            pos += b
    finally:
        for f, *_ in files.values():
            f.close()
    if pos != n_clients:
        raise ValueError(f"the blocks hold {pos} clients, expected n_clients={n_clients}")
    return directory


def _flat_rows(split: str, X, y, client, n_clients, group):
    """Rows = samples (images flattened), labels and client ids of one split (``"train"``/``"test"``),
    checked to have one entry per row; ``n_clients`` defaults to ``len(group)`` or ``max(client)+1``."""
    X = np.asarray(X)
    X = X.reshape(X.shape[0], -1)
    y = np.asarray(y)
    client = np.asarray(client).astype(np.int64)
    if y.shape != (X.shape[0],) or client.shape != (X.shape[0],):
        raise ValueError(f"y_{split} and client_{split} must have one entry per row of X_{split}")
    if n_clients is None:
        n_clients = len(group) if group is not None else int(client.max()) + 1
    return X, y, client, int(n_clients)


def _pad_by_client(X: np.ndarray, y: np.ndarray, client: np.ndarray, n_clients: int):
    """Group rows by client into padded arrays (no loop over clients)."""
    keep = client >= 0
    X, y, client = X[keep], y[keep], client[keep]
    if client.size and client.max() >= n_clients:
        raise ValueError(f"client ids must be < n_clients={n_clients}, got max {client.max()}")
    counts = np.bincount(client, minlength=n_clients)
    order = np.argsort(client, kind="stable")
    cs = client[order]
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.arange(cs.size) - offsets[cs]
    n_max = max(int(counts.max(initial=0)), 1)
    Xp = np.zeros((n_clients, n_max) + X.shape[1:], dtype=X.dtype)
    yp = np.zeros((n_clients, n_max), dtype=y.dtype)
    Xp[cs, pos] = X[order]
    yp[cs, pos] = y[order]
    return Xp, yp, counts


@dataclass
class FederatedTensors:
    """Per-client padded data for the engine.

    * ``X_train`` (N, n_max, d) float, ``y_train`` (N, n_max) int64 labels (or float targets for
      regression), ``n_train`` (N,) true number of samples of each training client (rows past it are
      padding and never enter a loss);
    * ``X_test``/``y_test``/``n_test`` the same for the ``M`` test clients (optional);
    * ``group`` (N,) true group of every training client; ``test_group`` (M,) of every test client;
    * ``memory_mapped``: the data tensors are views of files (:meth:`from_npy`); nothing reads them
      whole at construction, and the engine checks every gathered chunk for NaN or infinite values
      instead (an in-memory data set is checked here, once); ``directory``: the folder of those files
      (workers of a distributed round read their chunks' rows from it themselves, :class:`ClientRows`).
    """

    X_train: torch.Tensor
    y_train: torch.Tensor
    n_train: torch.Tensor
    X_test: torch.Tensor | None = None
    y_test: torch.Tensor | None = None
    n_test: torch.Tensor | None = None
    group: np.ndarray | None = None
    test_group: np.ndarray | None = None
    memory_mapped: bool = False
    directory: str | None = None

    def __post_init__(self):
        if self.X_train.ndim != 3:
            raise ValueError(f"X_train must be (n_clients, n_max, d), got shape {tuple(self.X_train.shape)}")
        N, n_max = self.X_train.shape[:2]
        if tuple(self.y_train.shape) != (N, n_max):
            raise ValueError(f"y_train must be (n_clients, n_max) = {(N, n_max)}, got {tuple(self.y_train.shape)}")
        self.n_train = torch.as_tensor(self.n_train, dtype=torch.long)
        if tuple(self.n_train.shape) != (N,):
            raise ValueError(f"n_train must have one entry per client ({N}), got {tuple(self.n_train.shape)}")
        if (self.n_train < 0).any() or (self.n_train > n_max).any():
            raise ValueError(f"n_train entries must be in [0, n_max={n_max}]")
        if self.group is not None:
            self.group = np.asarray(self.group).astype(np.int64)
            if self.group.shape != (N,):
                raise ValueError(f"group must have one entry per training client ({N}), got {self.group.shape}")
        if self.X_test is not None:
            if self.X_test.ndim != 3 or self.X_test.shape[2] != self.X_train.shape[2]:
                raise ValueError("X_test must be (n_test_clients, m_max, d) with the same d as X_train")
            M = self.X_test.shape[0]
            self.n_test = torch.as_tensor(self.n_test, dtype=torch.long)
            if tuple(self.n_test.shape) != (M,):
                raise ValueError(f"n_test must have one entry per test client ({M})")
            if self.test_group is None and self.group is not None and M == N:
                self.test_group = self.group
            if self.test_group is not None:
                self.test_group = np.asarray(self.test_group).astype(np.int64)
        if not self.memory_mapped and not torch.isfinite(self.X_train).all():
            raise ValueError("X_train contains NaN or infinite values")

    @property
    def n_clients(self) -> int:
        return int(self.X_train.shape[0])

    @property
    def n_test_clients(self) -> int:
        return 0 if self.X_test is None else int(self.X_test.shape[0])

    @property
    def d(self) -> int:
        return int(self.X_train.shape[2])

    @classmethod
    def from_arrays(
        cls,
        X_train,
        y_train,
        client_train,
        X_test=None,
        y_test=None,
        client_test=None,
        group=None,
        test_group=None,
        *,
        n_clients: int | None = None,
        n_test_clients: int | None = None,
        dtype=torch.float32,
    ) -> "FederatedTensors":
        """Build from flat arrays, rows = samples (the layout of ``fedclust.partition.rotation``).

        ``client_train`` (n,) gives the training client of every row (-1 = unused); ``client_test``
        the test client of every test row. Images (n, H, W[, C]) are flattened. Integer ``y`` are class
        labels; float ``y`` are regression targets. ``n_clients`` defaults to ``len(group)`` or
        ``max(client_train)+1``.
        """
        X_train, y_train, client_train, n_clients = _flat_rows(
            "train", X_train, y_train, client_train, n_clients, group
        )
        if client_train.max(initial=-1) >= n_clients:
            raise ValueError(
                f"client_train has ids up to {client_train.max()} but there are only n_clients="
                f"{n_clients} clients (the length of group when given)"
            )
        is_cls = np.issubdtype(y_train.dtype, np.integer)
        ydt = torch.long if is_cls else dtype
        Xp, yp, cnt = _pad_by_client(X_train, y_train, client_train, int(n_clients))
        kw: dict[str, Any] = {}
        if X_test is not None:
            if y_test is None or client_test is None:
                raise ValueError("X_test needs y_test and client_test")
            X_test, y_test, client_test, n_test_clients = _flat_rows(
                "test", X_test, y_test, client_test, n_test_clients, test_group
            )
            Xq, yq, cq = _pad_by_client(X_test, y_test, client_test, n_test_clients)
            kw = dict(
                X_test=torch.as_tensor(Xq, dtype=dtype),
                y_test=torch.as_tensor(yq, dtype=ydt),
                n_test=torch.as_tensor(cq),
            )
        return cls(
            X_train=torch.as_tensor(Xp, dtype=dtype),
            y_train=torch.as_tensor(yp, dtype=ydt),
            n_train=torch.as_tensor(cnt),
            group=group,
            test_group=test_group,
            **kw,
        )

    @classmethod
    def from_npy(cls, directory, mmap_mode: str = "r") -> "FederatedTensors":
        """Open a data set written by :func:`write_client_npy` (or :meth:`to_npy`) without reading it:
        ``X_train``/``y_train`` (and the test fields when present) stay memory-mapped
        (``np.load(mmap_mode=...)``), so a round reads only the rows of the clients it gathers and the
        operating system keeps or drops those pages as memory allows. The small per-client vectors
        (sample counts, groups) are read into memory."""
        directory = Path(directory)

        def tensor(name):
            a = np.load(directory / f"{name}.npy", mmap_mode=mmap_mode)
            with warnings.catch_warnings():
                # a read-only mapping: torch warns that it cannot write to it, and nothing here writes
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                return torch.from_numpy(a)

        def small(name):
            p = directory / f"{name}.npy"
            return np.load(p) if p.exists() else None

        kw: dict[str, Any] = {}
        if (directory / "X_test.npy").exists():
            kw = {"X_test": tensor("X_test"), "y_test": tensor("y_test"), "n_test": small("n_test")}
        return cls(
            X_train=tensor("X_train"),
            y_train=tensor("y_train"),
            n_train=small("n_train"),
            group=small("group"),
            test_group=small("test_group"),
            memory_mapped=True,
            directory=str(directory),
            **kw,
        )

    def to_npy(self, directory, block_clients: int = 4096) -> Path:
        """Write this data set to ``directory`` in the layout of :func:`write_client_npy` (blocks of
        ``block_clients`` clients); :meth:`from_npy` opens it memory-mapped."""

        def blocks(fields, n):
            for a in range(0, n, block_clients):
                yield {f: getattr(self, f)[a : a + block_clients] for f in fields if getattr(self, f) is not None}

        write_client_npy(directory, self.n_clients, blocks(TRAIN_FIELDS, self.n_clients))
        if self.X_test is not None:
            write_client_npy(directory, self.n_test_clients, blocks(TEST_FIELDS, self.n_test_clients))
        return Path(directory)

    @classmethod
    def from_rotated(cls, data, dtype=torch.float32) -> "FederatedTensors":
        """From an object with the fields of ``fedclust.partition.rotation``'s ``RotatedData``
        (``X_train, y_train, client_train, X_test, y_test, client_test, group``)."""
        return cls.from_arrays(
            data.X_train,
            data.y_train,
            data.client_train,
            data.X_test,
            data.y_test,
            data.client_test,
            data.group,
            getattr(data, "test_group", None),
            dtype=dtype,
        )


def _mask(n: torch.Tensor, n_max: int) -> torch.Tensor:
    return torch.arange(n_max, device=n.device).unsqueeze(0) < n.unsqueeze(1)


def gather_train(data: FederatedTensors, clients, device: torch.device | None = None):
    """The padded training data ``X, y, n`` of the given clients (a gathered copy on ``device``; from a
    memory-mapped data set only these clients' rows are read, and checked for NaN or infinite values)."""
    idx = torch.as_tensor(clients, dtype=torch.long)
    X = data.X_train[idx]
    if data.memory_mapped and not torch.isfinite(X).all():
        raise ValueError("X_train contains NaN or infinite values (in the rows of this chunk's clients)")
    y, n = data.y_train[idx], data.n_train[idx]
    if device is not None:
        X, y, n = X.to(device), y.to(device), n.to(device)
    return X, y, n


_OPENED: dict[str, FederatedTensors] = {}  # data sets a worker process has opened, by folder


@dataclass(frozen=True)
class ClientRows:
    """The training rows of ``clients`` of the data set stored in ``directory`` (:meth:`FederatedTensors.from_npy`),
    read where they are used: a distributed round sends a worker this (the client ids) instead of
    the rows, and the worker reads them from the files (opened once per process, memory-mapped). On
    a cluster the folder must be at the same path on every machine (a shared file system)."""

    directory: str
    clients: np.ndarray

    def gather(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        data = _OPENED.get(self.directory)
        if data is None:
            data = _OPENED[self.directory] = FederatedTensors.from_npy(self.directory)
        return gather_train(data, self.clients)
