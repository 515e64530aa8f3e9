from kedro.pipeline import Pipeline, node

from fedclust.pipelines.partitioning.nodes import report_partition, split_clients


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            node(
                split_clients,
                inputs=["dataset", "params:partition", "params:seed"],
                outputs="partition",
                name="split_clients",
                tags=["partition"],
            ),
            node(
                report_partition,
                inputs=["partition", "dataset"],
                outputs=["partition_stats", "partition_heatmap"],
                name="report_partition",
                tags=["partition", "reporting"],
            ),
        ],
        namespace="partitioning",
        inputs={"dataset"},
        outputs={"partition", "partition_stats", "partition_heatmap"},
        parameters={"params:partition", "params:seed"},
    )
