"""The names this package writes into a store: run and experiment tags, and the artifact
paths of the tables MLflow's UI shows.

They are contracts: the sweep summary, ``pipeline.compare``, MLflow's UI and users' searches
(``tags.sweep_id = '...'``) rely on them.
"""

from __future__ import annotations

import json

from pipeline.io import results as res

#: A job's sweep; its parent run also carries :data:`TAG_SWEEP_PARENT` = ``"true"``.
TAG_SWEEP = "sweep_id"
TAG_SWEEP_PARENT = "sweep_parent"
#: The job's Hydra overrides, as typed on the command line.
TAG_OVERRIDES = "hydra_overrides"
TAG_GIT = "git_commit"
#: What makes logging a results folder idempotent (``pipeline.io.results``).
TAG_JOB_KEY = res.TAG_JOB_KEY
#: MLflow's own tags: a nested run's parent, a run's name.
TAG_PARENT = "mlflow.parentRunId"
TAG_RUN_NAME = "mlflow.runName"
#: A run's (or experiment's) description: markdown shown on its page in the UI.
TAG_NOTE = "mlflow.note.content"

#: The experiment tag that tells MLflow's UI what kind of work an experiment holds, and its
#: value for model training (the classic runs table, metrics and charts, not the GenAI views):
#: ``ExperimentKind.CUSTOM_MODEL_DEVELOPMENT`` of MLflow 3.17's UI
#: (``mlflow/server/js/build/static/js/main.*.js``). MLflow 3.17.2's UI reads it only when its
#: global workflow-type switch is off, and that switch is on in this build: the UI opens in its
#: GenAI view unless the URL carries :data:`UI_WORKFLOW` (what ``ui_url`` adds) or the user
#: clicked "Model training" once (remembered by the browser).
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
#: The UI's query parameter that selects its model-training view.
UI_WORKFLOW = "workflowType=machine_learning"

#: The run tag that lists the tables MLflow's UI shows (``MlflowClient.log_table`` sets it).
TAG_LOGGED_ARTIFACTS = "mlflow.loggedArtifacts"
#: A run's per-query table, as MLflow's UI and ``mlflow.load_table`` read it.
TABLE_FILE = "per_query_table.json"
#: A sweep's table of jobs on its parent run.
SWEEP_TABLE_FILE = "summary/sweep_table.json"


def table_tag(artifact_file: str) -> str:
    """The value of :data:`TAG_LOGGED_ARTIFACTS` for a run whose one table is ``artifact_file``:
    what ``MlflowClient.log_table`` would set, set by the caller in a request it makes anyway
    (``pipeline.tracking.log.log_table``)."""
    return json.dumps([{"path": artifact_file, "type": "table"}])
