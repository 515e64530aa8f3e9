"""Shared helpers for the data tests: where the real data lives and writers for small fake files."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest

#: ../shared/data relative to the project root (tests/data/ -> project root -> its parent).
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
MNIST_DIR = SHARED_DATA / "mnist"
FEDSC_DIR = SHARED_DATA / "fedsc"
MNIST_IMAGES = MNIST_DIR / "t10k-images-idx3-ubyte.gz"
MNIST_LABELS = MNIST_DIR / "t10k-labels-idx1-ubyte.gz"


def need(*paths: Path) -> None:
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        pytest.skip(f"real data file(s) not available: {missing} (see ../shared/data/README.md)")


def idx_bytes(arr: np.ndarray, magic: int) -> bytes:
    arr = np.asarray(arr, dtype=np.uint8)
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return header + arr.tobytes()


def write_idx(path: Path, arr: np.ndarray, magic: int, gz: bool = False) -> Path:
    data = idx_bytes(arr, magic)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def write_cifar_batch(path: Path, data: np.ndarray, labels) -> Path:
    with open(path, "wb") as f:
        pickle.dump({b"batch_label": b"fake", b"data": data, b"labels": list(labels)}, f, protocol=2)
    return path
