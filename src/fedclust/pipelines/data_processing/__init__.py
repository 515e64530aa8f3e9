from fedclust.pipelines.data_processing.pipeline import create_pipeline

__all__ = ["create_pipeline"]
