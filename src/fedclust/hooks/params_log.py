"""The parameters of a run's nodes written to MLflow in one batch when the run starts.

kedro-mlflow logs the parameters a node reads just before the node runs, one ``log_param`` call per
flattened key: each is its own SQLite transaction, and a new value costs a synced write (about 20 ms
on this project's SQLite store; a tiny FKM run logs 52 of them). :class:`NodeParamsBatchHook` writes
the same keys and values in one ``log_batch`` before the first node; kedro-mlflow's calls then find
each value already there, which needs no write. The run ends with the same params.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import mlflow
from kedro.framework.hooks import hook_impl
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

from fedclust.hooks.state import RUN, is_grid_run

logger = logging.getLogger(__name__)

#: parameter names kedro-mlflow logs as they are (any other name it renames, with a warning: left to it)
_PLAIN_NAME = re.compile(r"[/\w.\- ]*")


def node_params(pipeline, catalog, flatten: bool = True, recursive: bool = True, sep: str = ".") -> dict[str, Any]:
    """The params kedro-mlflow logs for the nodes of ``pipeline`` (``params:x`` inputs as ``x``, the
    whole ``parameters`` input as ``parameters``), flattened as it flattens them, with their values
    as the catalog holds them. Names it would rename and values too long for a param are left out."""
    # kedro-mlflow's own flattening, so that the keys are the ones it writes; the module is loaded
    # with kedro-mlflow's hook for any run, but importing it here would cost every `kedro` command
    from kedro_mlflow.framework.hooks.utils import _flatten_dict

    names = sorted({n for node in pipeline.nodes for n in node.inputs if n.startswith("params:") or n == "parameters"})
    inputs = {name[7:] if name.startswith("params:") else name: catalog.load(name) for name in names}
    if flatten:
        inputs = _flatten_dict(d=inputs, recursive=recursive, sep=sep)
    return {k: v for k, v in inputs.items() if _PLAIN_NAME.fullmatch(k) and len(str(v)) <= MAX_PARAM_VAL_LENGTH}


class NodeParamsBatchHook:
    """Before the first node, logs in one batch the params kedro-mlflow would log node by node.

    Only in a run of one method (not a tour, whose method runs are nested, nor a grid, whose cells
    open their own runs): there every node's params go to the pipeline's run, which is the active
    run when the pipeline starts. kedro-mlflow's settings (``mlflow.yml``'s ``dict_params``) are read
    from its hook; when it tracks another run, or none, nothing is logged here.
    """

    @hook_impl(trylast=True)  # after kedro-mlflow has opened the run and RunTagsHook has planned it
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        try:
            active = mlflow.active_run()
            if active is None or RUN.nested or is_grid_run(pipeline):
                return
            # kedro-mlflow's hook object (the one Kedro registers from its entry point), for the run
            # it opened and how it flattens params; loaded by Kedro for the run already
            from kedro_mlflow.framework.hooks.mlflow_hook import mlflow_hook

            if mlflow_hook.run_id != active.info.run_id or not getattr(mlflow_hook, "_is_mlflow_enabled", False):
                return
            params = node_params(
                pipeline, catalog, flatten=mlflow_hook.flatten, recursive=mlflow_hook.recursive, sep=mlflow_hook.sep
            )
            if params:
                mlflow.log_params(params)
        except Exception as exc:  # tracking must never break a run; kedro-mlflow still logs each node's params
            logger.debug("node params not logged in one batch: %s", exc)
