from kedro.pipeline import Pipeline, node

from fedclust.pipelines.data_processing.nodes import load_dataset


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            node(
                load_dataset,
                inputs=["params:dataset", "params:data_paths", "params:seed"],
                outputs="dataset",
                name="load_dataset",
                tags=["data"],
            )
        ],
        namespace="data_processing",
        inputs=None,
        outputs={"dataset"},
        parameters={"params:dataset", "params:data_paths", "params:seed"},
    )
