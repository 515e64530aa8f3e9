"""Kedro project settings for fedclust."""

from fedclust.gc_pause import long_lived

# Declarations only: importing this module changes no environment variable. The process environment
# a fedclust command starts with (MLflow's telemetry off, its HTTP retries, PATH) is set by the command
# line before Kedro loads anything (fedclust.environment, a kedro.init entry point).

with long_lived():  # every command imports MLflow here (fedclust.gc_pause)
    from fedclust.hooks import (
        EffectiveSettingsHook,
        InterruptHook,
        MethodRunsCloseHook,
        NodeParamsBatchHook,
        NotebookProbeHook,
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
# interrupted run as KILLED; NotebookProbeHook lets MLflow's notebook probe answer without importing IPython; StartupGCHook keeps the collector off the objects that kedro-mlflow's
# set-up and the run's start create for good (fedclust.gc_pause); StoreHook opens (creates, migrates)
# the MLflow store under a file lock before kedro-mlflow uses it, stops a run whose store cannot be
# used with one line, and marks FAILED the runs that lost their store earlier (fedclust.hooks.store).
HOOKS = (
    StartupGCHook(),
    NotebookProbeHook(),
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
