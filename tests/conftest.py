"""Shared test fixtures and paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def project_root() -> Path:
    return PROJECT_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return SHARED_DATA


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    d = SHARED_DATA / "mnist"
    if not (d / "t10k-images-idx3-ubyte.gz").exists():
        pytest.skip(f"MNIST test set not found under {d}")
    return d
