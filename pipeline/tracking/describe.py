"""A job's run description: the markdown MLflow's UI shows on the run's page.

What a newcomer needs without opening anything else: the headline numbers at the run's k
(first, since the UI shows the first lines), the settings that made them, how to read the
stepped curves, and where the plots and tables are. Built from the job's record alone (and
its results folder, when at hand), so ``pipeline.sync`` writes the same text a job would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.tracking.tags import TAG_OVERRIDES

#: Headline metrics of a run's description, at the run's k (label, metric key pattern).
_DESCRIBED = (("nDCG", "ndcg_at_{k}"), ("precision", "precision_at_{k}"), ("recall", "recall_at_{k}"),
              ("MRR", "mrr_at_{k}"), ("MAP", "map_at_{k}"), ("context utility", "context_utility_at_{k}"))
#: Artifacts a description points to, when the run has them (path, what it is).
_POINTERS = (("plots/k_sweep.png", "every metric vs K, k marked"), ("plots/precision_recall.png", "precision vs recall"),
             ("per_query_table.json", "one row per query: its metrics, text and top k"),
             ("failures.md", "queries with no relevant document in the top k"),
             ("definition_card.md", "how each number is defined"))


def _settings_of(params: Mapping[str, str], group: str) -> str:
    """``k1=1.2, b=0.75`` from the flattened params of a config group (no ``_target_``)."""
    return ", ".join(f"{key[len(group) + 1:]}={value}" for key, value in params.items()
                     if key.startswith(group + ".") and not key.rsplit(".", 1)[-1].startswith("_")
                     and value not in ("null", "None"))


def _choice(record: Mapping[str, Any], group: str) -> str:
    """The option chosen in a config group: its tag, else the last part of its ``_target_``."""
    target = str(record["params"].get(f"{group}._target_", group))
    return str(record["tags"].get(f"choice.{group}") or target.rsplit(".", 1)[-1])


def _counts(record: Mapping[str, Any], results: Path | None) -> str:
    """``52 queries, 171 documents`` (the documents only when the results folder says)."""
    n_q, n_docs = record["metrics"].get("n_queries"), None
    if results is not None:
        try:
            n_docs = json.loads((Path(results) / "metrics.json").read_text())["collection"]["n_docs"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    counts = f"{int(n_q)} queries" if n_q is not None else ""
    if n_docs is not None:
        counts += f", {int(n_docs)} documents"
    return counts


def _headline(record: Mapping[str, Any], results: Path | None) -> list[str]:
    """The first lines: dataset, k, the headline metrics, and the objective with its CI."""
    params, metrics, k = record["params"], record["metrics"], int(record["k"])
    objective = str(record.get("objective") or params.get("objective", ""))
    counts = _counts(record, results)
    shown = [(label, key.format(k=k)) for label, key in _DESCRIBED if key.format(k=k) in metrics]
    lines = [f"On **{record['dataset']['name']}**" + (f" ({counts})" if counts else "") + f", at k = {k}: "
             + ", ".join(f"{label} {metrics[key]:.4f}" for label, key in shown)
             + "".join(f"; {key.upper()} at full depth {metrics[key]:.4f}" for key in ("mrr", "map") if key in metrics)
             + "."]
    low, high = metrics.get(f"{objective}_ci_low"), metrics.get(f"{objective}_ci_high")
    if objective in metrics:
        ci = f" (95% CI {low:.4f} to {high:.4f}, bootstrap over queries)" if low is not None and high is not None else ""
        lines += ["", f"**Objective** `{objective}` = {metrics[objective]:.4f}{ci}."]
    return lines


def _settings_table(record: Mapping[str, Any]) -> list[str]:
    """A two-column markdown table of the settings that made the numbers."""
    params, k = record["params"], int(record["k"])
    rows = [("retriever", f"{_choice(record, 'retriever')}"
                          + (f" ({s})" if (s := _settings_of(params, 'retriever')) else "")),
            ("k", f"{k} chunks placed in the context; metrics for every K = 1..{params.get('k_max', '?')}"),
            ("placement", f"reorder {_choice(record, 'reorder')}, attention curve {_choice(record, 'attention')}"
                          + (f" ({s})" if (s := _settings_of(params, 'attention')) else ""))]
    chunker = str(params.get("chunker._target_", ""))
    if chunker and not chunker.endswith("NoChunker"):
        rows.append(("chunking", chunker.rsplit(".", 1)[-1] + (f" ({s})" if (s := _settings_of(params, 'chunker')) else "")))
    rows.append(("scoring", f"gain {params.get('gain', 'exp')}, relevant when grade >= {params.get('relevance_level', 1)}"
                 + (", judged documents only (trec_eval -J)" if params.get("judged_only") in ("True", "true") else "")))
    if overrides := record["tags"].get(TAG_OVERRIDES):
        rows.append(("command line", f"`{overrides}`"))
    return ["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]


def run_description(record: Mapping[str, Any], results: Path | None = None) -> str:
    """A job's description (``mlflow.note.content``, markdown, shown on its run page): the
    dataset, the retriever and its settings, k, the placement and attention curve, the
    headline metrics, how to read the curves, and where the plots and tables are."""
    k, k_max = int(record["k"]), record["params"].get("k_max", "?")
    lines = [*_headline(record, results), "", *_settings_table(record)]
    lines += ["", (f"**Curves:** the `curve/*` metrics (Model metrics tab) have **step = K**, the cut-off, "
                   f"for K = 1..{k_max}; the other metrics are single values (`ndcg_at_{k}` is nDCG at K = {k}).")]
    have = [(path, what) for path, what in _POINTERS
            if results is None or (Path(results) / path).is_file() or path == "per_query_table.json"
            and record.get("table_columns")]
    if have:
        lines += ["", "**Where things are** (Artifacts tab): " + "; ".join(f"`{path}` ({what})" for path, what in have) + "."]
    return "\n".join(lines) + "\n"
