"""The clustered-FL rotation stage, shared by every clustered-FL method (whose pipelines come from
:func:`fedclust.pipelines.methods.clustered_fl_pipeline`)."""

from __future__ import annotations

from kedro.pipeline import Pipeline, node

from fedclust.pipelines.clustered_fl.nodes import rotate, rotation_report


def rotation_pipeline() -> Pipeline:
    return Pipeline(
        [
            node(rotate, ["dataset", "params:data", "params:seed"], "rotated_data", name="rotate", tags=["partition"]),
            node(
                rotation_report,
                "rotated_data",
                "rotation_stats",
                name="report_rotation",
                tags=["partition", "reporting"],
            ),
        ],
        namespace="clustered_fl",
        inputs={"dataset"},
        outputs={"rotated_data", "rotation_stats"},
        parameters={"params:seed"},
    )
