from fedclust.pipelines.partitioning.pipeline import create_pipeline

__all__ = ["create_pipeline"]
