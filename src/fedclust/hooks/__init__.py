"""Kedro hooks of fedclust, one module per job (registered in :mod:`fedclust.settings`):

* :mod:`.params`: parameters checked against ``conf/base`` and the methods' configs before anything
  runs, and the run's thread setting applied (:class:`ParamsCheckHook`);
* :mod:`.tags`: MLflow run names and tags, and one nested run per method in a run of several
  methods (:class:`RunTagsHook`, :class:`MethodRunsCloseHook`);
* :mod:`.settings_log`: each method's effective settings logged as params of its run
  (:class:`EffectiveSettingsHook`);
* :mod:`.params_log`: the params kedro-mlflow logs node by node written in one batch when a
  one-method run starts (:class:`NodeParamsBatchHook`);
* :mod:`.summary`: progress bars and the end-of-run summary table (:class:`SummaryHook`);
* :mod:`.startup`: the garbage collector kept off the objects a run's set-up builds for good
  (:class:`StartupGCHook`), and MLflow's notebook probe answered without importing IPython
  (:class:`NotebookProbeHook`);
* :mod:`.interrupts`: interrupted runs marked KILLED, and runs left RUNNING by a process that is gone
  marked KILLED by the next run (:class:`InterruptHook`, :func:`kill_dead_runs`);
* :mod:`.store`: the MLflow store opened (created, migrated) once under a file lock, a store that
  cannot be used stopped in one line, and runs that lost their store marked FAILED (:class:`StoreHook`).

The hooks share one record of the pipeline run in progress (:mod:`.state`). A user mistake or an
environment fault is shown in one line, with the MLflow run still open marked FAILED, by the command
line (:mod:`fedclust.cli`).
"""

from fedclust.hooks.interrupts import HOST_TAG, PID_TAG, InterruptHook, kill_dead_runs
from fedclust.hooks.params import ParamsCheckHook
from fedclust.hooks.params_log import NodeParamsBatchHook
from fedclust.hooks.settings_log import EffectiveSettingsHook
from fedclust.hooks.startup import NotebookProbeHook, StartupGCHook
from fedclust.hooks.store import FAILURE_TAG, StoreHook
from fedclust.hooks.summary import SummaryHook
from fedclust.hooks.tags import MethodRunsCloseHook, RunTagsHook

__all__ = [
    "EffectiveSettingsHook",
    "FAILURE_TAG",
    "HOST_TAG",
    "InterruptHook",
    "MethodRunsCloseHook",
    "NodeParamsBatchHook",
    "NotebookProbeHook",
    "PID_TAG",
    "ParamsCheckHook",
    "RunTagsHook",
    "StartupGCHook",
    "StoreHook",
    "SummaryHook",
    "kill_dead_runs",
]
