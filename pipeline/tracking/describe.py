"""What a run's page and a sweep's say in words: a job's description (``mlflow.note.content``)
and the judged-coverage warning, for the console, the run's description and the sweep's.

Built from a job's record alone (and its results folder, when at hand), so that
``pipeline.sync`` writes the same text a job would.

The judged-coverage warning (``pipeline.metrics.judged_warning``: the mean ``judged_at_<k>``
below 0.9, at the job's own k: the share of the chunks its generator reads) advises pooling:
judging the unjudged top documents of the retrievers compared.
On a public benchmark (``dataset=beir``, ``dataset=ir_datasets``) nobody here can extend the
judgments, so the advice there is ``bpref`` and ``judged_only=true`` instead
(:func:`coverage_warning`). A sweep says it once, for all its jobs (:func:`sweep_coverage_warning`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.metrics import JUDGED_WARN_BELOW, JUDGED_WARN_K, judged_warning
from pipeline.tracking.store import TAG_OVERRIDES

#: The loaders of public benchmarks (the ``_target_`` of ``conf/dataset/beir.yaml`` and
#: ``ir_datasets.yaml``): their judgments cannot be extended by pooling here.
PUBLIC_LOADERS = ("load_beir", "load_ir_datasets")
#: The advice for a public benchmark, instead of pooling.
PUBLIC_ADVICE = ("the judgments of a public benchmark cannot be extended here (no pooling): compare on bpref, "
                 "or rerun with judged_only=true (unjudged documents removed before scoring)")
#: Where ``judged_warning``'s advice starts (what it says after "biased low").
_ADVICE_AT = "; pool it"


def public_benchmark(params: Mapping[str, Any]) -> bool:
    """Whether a job's collection is a public benchmark (its params' ``dataset._target_``)."""
    return str(params.get("dataset._target_", "")).rsplit(".", 1)[-1] in PUBLIC_LOADERS


def coverage_warning(metrics: Mapping[str, float], params: Mapping[str, Any], k: int = JUDGED_WARN_K) -> str | None:
    """``judged_warning`` at the job's ``k`` (None when judged_at_k >= 0.9), its advice replaced
    by :data:`PUBLIC_ADVICE` on a public benchmark."""
    warning = judged_warning(dict(metrics), k)
    if warning is None or not public_benchmark(params) or _ADVICE_AT not in warning:
        return warning
    return f"{warning.split(_ADVICE_AT, 1)[0]}; {PUBLIC_ADVICE}"


def sweep_coverage_warning(records: list[Mapping[str, Any]]) -> str | None:
    """One warning for a sweep's jobs whose judged_at_k (each at its own k) is below 0.9 (how
    many, the range, the advice), or None when no job's is."""
    low = []
    public = False
    for record in records:
        k = int(record.get("k", JUDGED_WARN_K))
        if coverage_warning(record["metrics"], record["params"], k) is not None:
            low.append((float(record["metrics"][f"judged_at_{k}"]), str(record.get("run_name", "")), k))
            public = public or public_benchmark(record["params"])
    if not low:
        return None
    (worst, name, _), best = min(low), max(low)[0]
    share = f"{worst:.1%}" if worst == best else f"{worst:.1%} to {best:.1%}"
    ks = sorted({k for _, _, k in low})
    key, judged = ((f"judged_at_{ks[0]}", f"of the top {ks[0]} documents are judged") if len(ks) == 1 else
                   ("judged_at_k", f"of each job's top k documents are judged, k = {', '.join(map(str, ks))}"))
    advice = PUBLIC_ADVICE if public else ("pool them (judge the unjudged top documents: python -m pipeline.cli pool, "
                                           "docs/judging.md); bpref and judged_only=true score judged documents only")
    return (f"warning: {key} < {JUDGED_WARN_BELOW} in {len(low)} of {len(records)} jobs ({share} {judged}; "
            f"lowest: {name}): their numbers are biased low; {advice}")


#: Headline metrics of a run's description, at the run's k (label, metric key pattern).
_DESCRIBED = (("nDCG", "ndcg_at_{k}"), ("precision", "precision_at_{k}"), ("recall", "recall_at_{k}"),
              ("MRR", "mrr_at_{k}"), ("MAP", "map_at_{k}"), ("context utility", "context_utility_at_{k}"))
#: Artifacts a description points to, when the run has them (path, what it is).
_POINTERS = (("plots/k_sweep.png", "every metric vs K, k marked"),
             ("plots/precision_recall.png", "precision vs recall"),
             ("per_query_table.json", "one row per query: its metrics, text and top k"),
             ("failures.md", "queries with no relevant document in the top k"),
             ("definition_card.md", "how each number is defined"))


def run_description(record: Mapping[str, Any], results: Path | None = None) -> str:
    """A job's description (``mlflow.note.content``, markdown, shown on its run page): the
    headline metrics at the run's k first (the UI shows the first lines), the settings that
    made them, how to read the stepped curves, and where the plots and tables are. Built from
    the record alone (and its results folder, when at hand), so ``pipeline.sync`` writes the
    same text a job would."""
    k, k_max = int(record["k"]), record["params"].get("k_max", "?")
    lines = [*_headline(record, results), "", *_settings_table(record)]
    lines += ["", (f"**Curves:** the `curve/*` metrics (Model metrics tab) have **step = K**, the cut-off, "
                   f"for K = 1..{k_max}; the other metrics are single values (`ndcg_at_{k}` is nDCG at K = {k}).")]
    have = [(path, what) for path, what in _POINTERS
            if results is None or (Path(results) / path).is_file() or path == "per_query_table.json"
            and record.get("table_columns")]
    if have:
        lines += ["", "**Where things are** (Artifacts tab): "
                  + "; ".join(f"`{path}` ({what})" for path, what in have) + "."]
    return "\n".join(lines) + "\n"


def _headline(record: Mapping[str, Any], results: Path | None) -> list[str]:
    """Dataset (``52 queries, 171 documents``: the documents only when the results folder
    says), k, the headline metrics (MRR and MAP at full depth with that depth, when the results
    folder says), and the objective with its CI."""
    params, metrics, k = record["params"], record["metrics"], int(record["k"])
    n_q, n_docs, depth = metrics.get("n_queries"), None, None
    if results is not None:
        try:
            written = json.loads((Path(results) / "metrics.json").read_text())
            n_docs = written["collection"]["n_docs"]
            depth = int(written["scoring"]["depth"]) if "depth" in written.get("scoring", {}) else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
    counts = f"{int(n_q)} queries" if n_q is not None else ""
    if n_docs is not None:
        counts += f", {int(n_docs)} documents"
    shown = [(label, key.format(k=k)) for label, key in _DESCRIBED if key.format(k=k) in metrics]
    lines = [f"On **{record['dataset']['name']}**" + (f" ({counts})" if counts else "") + f", at k = {k}: "
             + ", ".join(f"{label} {metrics[key]:.4f}" for label, key in shown)
             + "".join(f"; {key.upper()} at full depth{f' ({depth})' if depth else ''} {metrics[key]:.4f}"
                       for key in ("mrr", "map") if key in metrics)
             + "."]
    objective = str(record.get("objective") or params.get("objective", ""))
    low, high = metrics.get(f"{objective}_ci_low"), metrics.get(f"{objective}_ci_high")
    if objective in metrics:
        ci = "" if low is None or high is None else f" (95% CI {low:.4f} to {high:.4f}, bootstrap over queries)"
        lines += ["", f"**Objective** `{objective}` = {metrics[objective]:.4f}{ci}."]
    if warning := coverage_warning(metrics, params, k):
        lines += ["", f"**Warning:** {warning.removeprefix('warning: ')}."]
    return lines


def _settings_of(params: Mapping[str, str], group: str) -> str:
    """`` (k1=1.2, b=0.75)`` from the flattened params of a config group (no ``_target_``), or ``""``."""
    settings = ", ".join(f"{key[len(group) + 1:]}={value}" for key, value in params.items()
                         if key.startswith(group + ".") and not key.rsplit(".", 1)[-1].startswith("_")
                         and value not in ("null", "None"))
    return f" ({settings})" if settings else ""


def _choice(record: Mapping[str, Any], group: str) -> str:
    """The option chosen in a config group: its tag, else the last part of its ``_target_``."""
    target = str(record["params"].get(f"{group}._target_", group))
    return str(record["tags"].get(f"choice.{group}") or target.rsplit(".", 1)[-1])


def _settings_table(record: Mapping[str, Any]) -> list[str]:
    """A two-column markdown table of the settings that made the numbers."""
    params, k = record["params"], int(record["k"])
    rows = [("retriever", _choice(record, "retriever") + _settings_of(params, "retriever")),
            ("k", f"{k} chunks placed in the context; metrics for every K = 1..{params.get('k_max', '?')}"),
            ("placement", f"reorder {_choice(record, 'reorder')}, attention curve {_choice(record, 'attention')}"
                          + _settings_of(params, "attention"))]
    chunker = str(params.get("chunker._target_", ""))
    if chunker and not chunker.endswith("NoChunker"):
        rows.append(("chunking", chunker.rsplit(".", 1)[-1] + _settings_of(params, "chunker")))
    judged_only = ", judged documents only (trec_eval -J)" if params.get("judged_only") in ("True", "true") else ""
    rows.append(("scoring", f"gain {params.get('gain', 'exp')}, relevant when grade >= "
                            f"{params.get('relevance_level', 1)}{judged_only}"))
    if overrides := record["tags"].get(TAG_OVERRIDES):
        rows.append(("command line", f"`{overrides}`"))
    return ["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
