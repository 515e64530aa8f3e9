"""Kedro project settings for fedclust."""

import os
import sys

from fedclust.hooks import InterruptHook, MethodRunsCloseHook, ParamsCheckHook, RunTagsHook, install_fast_exit

# kedro-mlflow registers its own hook through its entry point; ours tags every MLflow run with
# the method(s), dataset, partition scheme and privacy budget, so that the MLflow UI's search
# (for example ``tags.dataset = 'digits'``) works without knowing our code.
# ParamsCheckHook stops a run with an unknown or invalid parameter before anything runs (fedclust.cli prints a
# user error as one line); MethodRunsCloseHook ends a method's nested run of the tour before the next
# method's nodes; InterruptHook marks the MLflow run of an interrupted run as KILLED.
HOOKS = (ParamsCheckHook(), RunTagsHook(), MethodRunsCloseHook(), InterruptHook())

CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
}

# Tools that plugins start by name (`kedro mlflow ui` runs `mlflow`) come from this environment
# even when it is not activated (`.venv/bin/kedro mlflow ui`).
_BIN = os.path.dirname(sys.executable)
if _BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join([_BIN, os.environ.get("PATH", "")])

# `kedro run` ends without the interpreter's ~1.3 s module teardown (same exit code, every atexit
# handler still runs; FEDCLUST_SLOW_EXIT=1 turns this off): see fedclust.hooks.install_fast_exit.
install_fast_exit()
