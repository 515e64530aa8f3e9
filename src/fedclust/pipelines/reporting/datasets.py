"""A versioned figure, or text file, that is also an MLflow artifact.

kedro-mlflow's ``MlflowArtifactDataset`` builds its inner dataset with a save version of its own,
so a versioned inner dataset clashes with the run's save version (Kedro refuses the catalog).
``MlflowFigureDataset`` is a ``matplotlib.MatplotlibDataset`` that takes ``versioned: true`` at the
top level (the run's save version, like every other versioned output) and, when an MLflow run is
active, logs the file it wrote under ``artifact_path``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import mlflow
from kedro.io.core import get_filepath_str
from kedro_datasets.matplotlib import MatplotlibDataset
from kedro_datasets.text import TextDataset


class MlflowFigureDataset(MatplotlibDataset):
    """``MatplotlibDataset`` (same arguments) plus ``artifact_path``: where the saved PNG goes in the
    active MLflow run (nothing is logged without one)."""

    def __init__(self, *, artifact_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._artifact_path = artifact_path

    def save(self, data) -> None:
        path = self._get_save_path()
        super().save(data)

        if mlflow.active_run() is not None and not isinstance(data, (list, dict)):
            mlflow.log_artifact(get_filepath_str(path, self._protocol), self._artifact_path)

    def _describe(self) -> dict[str, Any]:
        return {**super()._describe(), "artifact_path": self._artifact_path}


class MlflowTextDataset(TextDataset):
    """``text.TextDataset`` (same arguments, ``versioned: true`` allowed) plus ``artifact_path``: the
    saved file is also logged to the active MLflow run there (nothing is logged without one), and
    ``latest``: a plain file path that each save also writes, so that the newest text is always at
    one stable path (a versioned dataset's own path is a folder of versions,
    ``<filepath>/<version>/<name>``). The MLflow artifact keeps the file's name. The path of the
    last file saved under each catalog file path (``latest`` where given) is kept in :data:`SAVED`,
    for the run's closing summary."""

    def __init__(self, *, artifact_path: str | None = None, latest: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._artifact_path = artifact_path
        self._latest = latest

    def save(self, data: str) -> None:
        path = get_filepath_str(self._get_save_path(), self._protocol)
        super().save(data)
        SAVED[str(self._filepath)] = path
        if self._latest:
            latest = Path(self._latest)
            if latest.is_dir():  # the layout of earlier versions: that folder held the versions
                _move_versions(latest, Path(path).parents[1])
            latest.parent.mkdir(parents=True, exist_ok=True)
            tmp = latest.with_name(f".{latest.name}.tmp")
            tmp.write_text(data, encoding="utf-8")
            os.replace(tmp, latest)  # readers see the old file or the new one, never half of one
            SAVED[str(latest)] = str(latest)

        if mlflow.active_run() is not None:
            mlflow.log_artifact(path, self._artifact_path)

    def _describe(self) -> dict[str, Any]:
        return {**super()._describe(), "artifact_path": self._artifact_path, "latest": self._latest}


def _move_versions(old: Path, versions: Path) -> None:
    """Move the version folders of ``old`` (``<old>/<version>/<name>``) into ``versions`` and remove
    ``old``, so a plain file can take its place."""
    versions.mkdir(parents=True, exist_ok=True)
    for child in old.iterdir():
        target = versions / child.name
        if not target.exists():
            shutil.move(str(child), str(target))
    shutil.rmtree(old, ignore_errors=True)


#: catalog file path -> the file last written there in this process (versioned: the version's file)
SAVED: dict[str, str] = {}
