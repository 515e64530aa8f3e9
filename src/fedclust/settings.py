"""Kedro project settings for fedclust."""

import os
import sys

from fedclust.gc_pause import long_lived

# MLflow's usage telemetry is off in this project unless the user turns it on
# (MLFLOW_DISABLE_TELEMETRY=false): a tool for private analyses does not report on its users by
# default, and its background threads cost a tiny run about a second on our benchmark machine. Set
# before MLflow is first imported, below.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# MLflow resumes the run of a Databricks serverless GPU job on its own; anywhere else its probe only
# imports IPython (a quarter of a second). Left to MLflow on Databricks.
if "DATABRICKS_RUNTIME_VERSION" not in os.environ:
    os.environ.setdefault("MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS", "false")

# A tracking server that does not answer ends a run within about half a minute, in one line, rather
# than after MLflow's default of 7 retries with exponential back-off and 120 s timeouts (about 4
# minutes per request): 2 retries, 1 s back-off, 10 s per request. MLflow reads these at each request;
# set them in the environment to wait longer for a flaky server.
for _name, _value in (
    ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"),
    ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
    ("MLFLOW_HTTP_REQUEST_TIMEOUT", "10"),
):
    os.environ.setdefault(_name, _value)

with long_lived():  # every command imports MLflow and the method registry here (fedclust.gc_pause)
    from fedclust.hooks import (
        EffectiveSettingsHook,
        InterruptHook,
        MethodRunsCloseHook,
        NodeParamsBatchHook,
        ParamsCheckHook,
        RunTagsHook,
        StartupGCHook,
        StoreHook,
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
# interrupted run as KILLED; StartupGCHook keeps the collector off the objects that kedro-mlflow's
# set-up and the run's start create for good (fedclust.gc_pause); StoreHook opens (creates, migrates)
# the MLflow store under a file lock before kedro-mlflow uses it, stops a run whose store cannot be
# used with one line, and marks FAILED the runs that lost their store earlier (fedclust.hooks.store).
HOOKS = (
    StartupGCHook(),
    StoreHook(),
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
