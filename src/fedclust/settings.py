"""Kedro project settings for fedclust."""

import os
import sys

from fedclust.hooks import (
    EffectiveSettingsHook,
    InterruptHook,
    MethodRunsCloseHook,
    NodeParamsBatchHook,
    ParamsCheckHook,
    RunTagsHook,
    SummaryHook,
)

# kedro-mlflow registers its own hook through its entry point. Ours, one job each (fedclust.hooks):
# ParamsCheckHook stops a run with an unknown or invalid parameter before anything runs (the command
# line, fedclust.cli, prints a user error as one line); RunTagsHook names and tags every MLflow run with the method(s), dataset,
# partition scheme and privacy budget, so that the MLflow UI's search (for example
# ``tags.dataset = 'digits'``) works without knowing our code, and opens one nested run per method of
# the tour (MethodRunsCloseHook ends it before the next method's nodes); EffectiveSettingsHook logs
# each method's settings as it ran; NodeParamsBatchHook writes the params that kedro-mlflow logs node
# by node in one batch at the start of a one-method run (one SQLite write instead of one per key);
# SummaryHook shows progress and the end-of-run table; InterruptHook marks the MLflow run of an
# interrupted run as KILLED.
HOOKS = (
    ParamsCheckHook(),
    RunTagsHook(),
    MethodRunsCloseHook(),
    EffectiveSettingsHook(),
    NodeParamsBatchHook(),
    SummaryHook(),
    InterruptHook(),
)

CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
}

# Tools that plugins start by name (`kedro mlflow ui` runs `mlflow`) come from this environment
# even when it is not activated (`.venv/bin/kedro mlflow ui`).
_BIN = os.path.dirname(sys.executable)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join([_BIN, os.environ.get("PATH", "")])
