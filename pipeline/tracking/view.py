"""The runs table a newcomer first sees: the headline columns, without picking them.

MLflow's runs table shows no metric column until one picks them from the Columns menu (a run
here logs about 80 metrics), and it forgets the choice in a new browser. MLflow 3.17's UI has
one way in for a view set by someone else: a *shared view*, the experiment tag
``mlflow.sharedViewState.<key>`` holding the view as JSON (the table's columns, their order
and widths, the sort), which a URL with ``viewStateShareKey=<key>`` applies (the UI's Share
button writes the same tag; ``mlflow/server/js/build``: ``sharedViewState``,
``viewStateShareKey``; a URL with search parameters such as ``searchFilter`` skips it).
``ensure_view`` keeps that tag for :data:`~pipeline.tracking.store.VIEW_KEY` on every
experiment a job logs to, and ``store.ui_url`` (every link a command prints) names it.

The columns (named in ``pipeline.tracking.mapping``), those that answer the question first: the objective of the runs logged (the
latest), ``recall_at_k`` and ``mrr``, the objective's 95% CI, ``latency_p95_ms`` (the p95
per-query retrieval latency), ``context_utility_at_k``
(``pipeline.tracking.log`` logs the ``_at_k`` values at each run's own k, so runs with
different k share one column), then ``k`` and the dataset (name and content digest: runs
scored with other judgments or data differ there), then the objectives of earlier runs. The
order matters on a laptop: at 1,600 px MLflow's Assistant panel, open on a first visit, leaves
about 520 px of the table beside the fixed Run Name and Created columns, room for the
objective, recall_at_k and mrr with every digit (values are never rounded: the widths fit
them). The runs are sorted by the latest objective, best first.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pipeline.tracking.mapping import RUNS_TABLE_CONTEXT, runs_table_metrics
from pipeline.tracking.store import VIEW_KEY

if TYPE_CHECKING:
    from mlflow import MlflowClient

#: The experiment tag that holds the view (MLflow's prefix, our key).
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
#: At most this many columns (objectives of earlier runs are dropped first, oldest first).
MAX_COLUMNS = 14

_done: set[tuple[str, str, str]] = set()  # (store, experiment, objective) already ensured by this process


def column(kind: str, key: str) -> str:
    """A column's key as the UI names it: ``metrics.`ndcg_at_10```, ``params.`k```."""
    return f"{kind}.`{key}`"


#: The columns after the headline: the run's k and the dataset input (name and digest).
CONTEXT = tuple(column(kind, key) for kind, key in RUNS_TABLE_CONTEXT)


def headline_columns(objective: str) -> list[str]:
    """The metric columns of a run whose objective is ``objective`` (``mapping.runs_table_metrics``:
    it, recall_at_k and mrr, its CI, latency_p95_ms, context_utility_at_k)."""
    return [column("metrics", key) for key in runs_table_metrics(objective)]


def _width(name: str) -> int:
    """Pixels for a column: its whole header (``ndcg_at_10_ci_low`` and ``_ci_high`` must not
    look the same when cut) and a value printed in full."""
    if name == "attributes.`Dataset`":
        return 200
    if name == "params.`k`":
        return 60
    return max(150, 8 * (len(name) - len("metrics.``")) + 40)


def view_state(objective: str, previous: str | None = None) -> str:
    """The view's JSON for runs whose latest objective is ``objective``, keeping the objective
    columns of an earlier view (``previous``, the tag's value; unreadable: ignored) after the
    headline, k and the dataset."""
    earlier: list[str] = []
    try:
        old = json.loads(previous) if previous else {}
        earlier = [c for c in old.get("selectedColumns", []) if isinstance(c, str) and c.startswith("metrics.`")]
    except (ValueError, AttributeError):
        pass
    columns = list(dict.fromkeys([*headline_columns(objective), *CONTEXT, *earlier]))[:MAX_COLUMNS]
    state: dict[str, Any] = {
        "selectedColumns": columns,
        "columnOrder": columns,
        "columnWidths": {name: _width(name) for name in columns},
        "orderByKey": column("metrics", objective),
        "orderByAsc": False,
    }
    return json.dumps(state, sort_keys=True)


def ensure_view(mlflow_client: MlflowClient, store: str, exp_id: str, objective: str) -> None:
    """Set the experiment's view tag (:data:`VIEW_TAG`) for ``objective`` unless it holds that
    view already: one read per process and objective, a write only when the view changes."""
    if (store, exp_id, objective) in _done:
        return
    tags = mlflow_client.get_experiment(exp_id).tags or {}
    previous = tags.get(VIEW_TAG)
    wanted = view_state(objective, previous)
    if wanted != previous:
        mlflow_client.set_experiment_tag(exp_id, VIEW_TAG, wanted)
    _done.add((store, exp_id, objective))
