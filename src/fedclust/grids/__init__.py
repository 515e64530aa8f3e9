"""The papers' experiment grids, as plain functions that return records (fedclust.experiments).

One module per paper; each exposes ``run(config, data_paths) -> list[record]`` and
``tables(records) -> dict[name, DataFrame]``. The Kedro ``<method>_grid`` pipelines call them and
log every record as a nested MLflow run.
"""
