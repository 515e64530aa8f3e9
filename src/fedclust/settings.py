"""Kedro project settings for fedclust."""

from fedclust.hooks import RunTagsHook

# kedro-mlflow registers its own hook through its entry point; ours tags every MLflow run with
# the method(s), dataset, partition scheme and privacy budget, so that the MLflow UI's search
# (for example ``tags.dataset = 'digits'``) works without knowing our code.
HOOKS = (RunTagsHook(),)

CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
}
