"""One record, one mapping (``pipeline.tracking.mapping``): what MLflow gets from a job's record,
and the docs that name it (docs/mlflow.md, docs/results.md) tested against it both ways.

The records are real: a chunked, budgeted bm25 job on the bundled long sample, run in this
process (``pipeline.run_job``, ``tracking=none``; its record has every key a plain job's has,
and the chunks' and budgets' too); a dense job's cost comes from
``retrievers.cost.measured_index`` on a retriever that reports an encoding and an index on disk;
a sweep's job and parent from the mapping's own functions with a sweep's launch and best job.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

import pipeline
from pipeline.metrics import BUDGET_FAMILIES, RUN_FAMILIES
from pipeline.tracking import TABLE_FILE, mapping
from pipeline.tracking.store import SWEEP_TABLE_FILE
from retrievers.cost import measured_index

REPO = Path(__file__).resolve().parents[2]

#: What a placeholder of the docs stands for.
PLACEHOLDERS = {"<family>": "(?:" + "|".join(RUN_FAMILIES) + ")", "<K>": r"[0-9]+", "<B>": r"[0-9]+",
                "<name>": "(?:" + "|".join(BUDGET_FAMILIES) + ")", "<objective>": r"[a-z_0-9]+",
                "<count>": r"[a-z_]+", "<override>": r"[a-z_.]+", "<config key>": r"[a-z_0-9.]+"}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """{name: (results folder, record)} of the representative jobs."""
    root = tmp_path_factory.mktemp("mapping")
    common = ["tracking=none", f"paths.root={root / 'out'}", f"cache_dir={root / 'cache'}"]
    chunked = pipeline.run_job([*common, f"hydra.run.dir={root / 'chunked'}", "dataset=sample_long",
                                "chunker=tokens", "chunker.size=64", "budget=512"])
    dense = copy.deepcopy(chunked.record)
    dense["cost"]["metrics"].update(measured_index(_Encoder(), ["d1", "d2"], ["a", "b"]))
    dense["tags"] = mapping.job_tags(mapping.Launch(["retriever=dense", "k=5"], {"retriever": "dense"}, False,
                                                    "sweep-1", 3, True, "abc123"), True, dense["cost"])
    return {"chunked": (chunked.results, chunked.record), "dense_in_sweep": (chunked.results, dense)}


class _Encoder:
    """A retriever whose index reports its encoding and its size in memory and on disk."""

    encode_report = {"seconds": 0.5, "passages": 2}

    def index(self, doc_ids, doc_texts):
        pass

    def index_size(self):
        return {"memory_bytes": 2 ** 20, "disk_bytes": 2 ** 21}


def _produced(jobs) -> dict[str, set[str]]:
    """Every key each kind of MLflow entry gets from the representative jobs and a sweep's parent."""
    out: dict[str, set[str]] = {"param": set(), "metric": set(), "curve": set(), "tag": set(),
                                "parent tag": set(), "parent metric": set()}
    for results, record in jobs.values():
        run = mapping.run_of(record, results)
        out["param"] |= set(run.params)
        out["metric"] |= {key for key, _, step in mapping.metric_points(run) if key in run.metrics} | {
            mapping.TRACK_TIME}
        out["curve"] |= set(run.curves) | set(run.stepped or {})
        out["tag"] |= set(mapping.run_tags(run, "parent-run-id", TABLE_FILE))
    best = {"run_name": "bm25 k10", "run_id": "r1", "ndcg_at_10": 0.5, "ndcg_at_10_ci_low": 0.4,
            "ndcg_at_10_ci_high": 0.6, "optuna_trial": "3"}
    tags, metrics = mapping.parent_best("ndcg_at_10", best, {"retriever": "bm25", "paths.root": "/x"}, [], 2)
    out["parent tag"] = set(mapping.sweep_start_tags("sweep-1", "sweep k=3,5", {})) | set(
        mapping.parent_finish_tags(tags, "**sweep**", SWEEP_TABLE_FILE))
    out["parent metric"] = set(metrics)
    met, within = mapping.parent_budget("ndcg_at_10", 50.0, "bm25 k10", None, "r1", 0.5)
    unmet, _ = mapping.parent_budget("ndcg_at_10", 5.0, None, "bm25 k3")
    out["parent tag"] |= set(met) | set(unmet)
    out["parent metric"] |= set(within)
    return out


def _documented(page: str) -> dict[str, list[str]]:
    """The keys of each table of a docs page whose header's first cell names a kind of key
    (``| metric | what |``): the backquoted names of the first column."""
    found: dict[str, list[str]] = {}
    kind = None
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            kind = None
        elif kind is None:
            kind = cells[0]
            found.setdefault(kind, [])
        elif not set(cells[0]) <= set("-"):
            found[kind] += re.findall(r"`([^`]+)`", cells[0])
    return found


def _pattern(documented: str) -> re.Pattern[str]:
    regex = re.escape(documented)
    for placeholder, part in PLACEHOLDERS.items():
        regex = regex.replace(re.escape(placeholder), part)
    return re.compile(f"^{regex}$")


def _unmatched(keys: set[str], documented: list[str]) -> tuple[list[str], list[str]]:
    """(keys no documented name matches, documented names no key matches)."""
    patterns = {name: _pattern(name) for name in documented}
    undocumented = sorted(k for k in keys if not any(p.match(k) for p in patterns.values()))
    unproduced = [name for name, p in patterns.items() if not any(p.match(k) for k in keys)]
    return undocumented, unproduced


@pytest.mark.slow  # one job, in this process
def test_docs_mlflow_names_every_key_the_mapping_produces_and_nothing_else(jobs):
    documented = _documented((REPO / "docs" / "mlflow.md").read_text())
    for kind, keys in _produced(jobs).items():
        assert documented.get(kind), f"docs/mlflow.md has no `| {kind} | what |` table"
        undocumented, unproduced = _unmatched(keys, documented[kind])
        assert not undocumented, f"{kind}s the mapping produces that docs/mlflow.md does not name: {undocumented}"
        assert not unproduced, f"{kind}s docs/mlflow.md names that the mapping does not produce: {unproduced}"


def test_the_doc_check_finds_a_missing_and_a_stale_key():
    page = "| metric | what |\n|---|---|\n| `<family>_at_<K>`, `gone_metric` | x |\n\ntext\n"
    documented = _documented(page)
    assert documented == {"metric": ["<family>_at_<K>", "gone_metric"]}
    assert _unmatched({"ndcg_at_10", "new_metric"}, documented["metric"]) == (["new_metric"], ["gone_metric"])


@pytest.mark.slow  # one job, in this process
def test_docs_results_names_every_key_of_record_json_and_metrics_json(jobs):
    documented = _documented((REPO / "docs" / "results.md").read_text())
    records = [record for _, record in jobs.values()]
    written = [json.loads((results / "metrics.json").read_text()) for results, _ in jobs.values()]
    for kind, produced in (("record.json key", records), ("metrics.json key", written)):
        keys = set().union(*(set(r) for r in produced))
        undocumented, unproduced = _unmatched(keys, documented.get(kind, []))
        assert not undocumented and not unproduced, (kind, undocumented, unproduced)


@pytest.mark.slow  # one job, in this process
def test_the_run_is_the_record_mapped(jobs):
    """What MLflow gets, by value: the params without the Python objects' keys plus the options
    chosen, the metrics with the cost and the values at the run's k, the curves at step K,
    the tags with the job key and the description, the per-query table's columns."""
    results, record = jobs["chunked"]
    run = mapping.run_of(record, results)
    assert "retriever._target_" in record["params"] and "retriever._target_" not in run.params
    assert run.params["retriever"] == "bm25" and run.params["k"] == "10"
    assert run.metrics["ndcg_at_k"] == record["metrics"]["ndcg_at_10"]
    assert run.metrics["latency_p95_ms"] == record["cost"]["metrics"]["latency_p95_ms"]
    assert "latency_p95_ms" not in record["metrics"]  # the record keeps cost apart from quality
    points = mapping.metric_points(run)
    ndcg = [(step, value) for key, value, step in points if key == "curve/ndcg"]
    assert [step for step, _ in ndcg] == list(range(1, 21))
    assert ndcg[9][1] == pytest.approx(record["metrics"]["ndcg_at_10"], abs=1e-12)
    assert run.tags["job_key"] == record["job_key"] and run.tags["choice.retriever"] == "bm25"
    assert run.tags["mlflow.note.content"].startswith("On **sample_long** (")
    assert run.table_columns == record["table_columns"] and run.table_columns[-1] == "top_10"
    budget = {step: value for key, value, step in points if key == "budget/context_recall"}
    assert budget[512] == record["metrics"]["context_recall_budget_512"]


def test_a_sweeps_best_job_on_its_parent_names_only_what_its_twins_share():
    best = {"run_name": "litm k3", "run_id": "r1", "map": 0.4, "map_ci_low": 0.3, "map_ci_high": 0.5}
    tags, metrics = mapping.parent_best("map", best, {"reorder": "litm", "k": "3", "paths.root": "/x"},
                                        [{"reorder": "litm", "k": "5"}], 3)
    assert tags == {"best_run_name": "litm k3", "best_run_id": "r1", "best.reorder": "litm"}
    assert metrics == {"best_map": 0.4, "best_map_ci_low": 0.3, "best_map_ci_high": 0.5, "n_tied_with_best": 3.0}
