"""A versioned figure that is also an MLflow artifact.

kedro-mlflow's ``MlflowArtifactDataset`` builds its inner dataset with a save version of its own,
so a versioned inner dataset clashes with the run's save version (Kedro refuses the catalog).
``MlflowFigureDataset`` is a ``matplotlib.MatplotlibDataset`` that takes ``versioned: true`` at the
top level (the run's save version, like every other versioned output) and, when an MLflow run is
active, logs the file it wrote under ``artifact_path``.
"""

from __future__ import annotations

from typing import Any

from kedro.io.core import get_filepath_str
from kedro_datasets.matplotlib import MatplotlibDataset


class MlflowFigureDataset(MatplotlibDataset):
    """``MatplotlibDataset`` (same arguments) plus ``artifact_path``: where the saved PNG goes in the
    active MLflow run (nothing is logged without one)."""

    def __init__(self, *, artifact_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._artifact_path = artifact_path

    def save(self, data) -> None:
        path = self._get_save_path()
        super().save(data)
        import mlflow

        if mlflow.active_run() is not None and not isinstance(data, (list, dict)):
            mlflow.log_artifact(get_filepath_str(path, self._protocol), self._artifact_path)

    def _describe(self) -> dict[str, Any]:
        return {**super()._describe(), "artifact_path": self._artifact_path}
