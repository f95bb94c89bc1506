"""The systems a comparison reads: each one's per-query scores and where they came from.

A system is a job's folder (or its ``results/``), every job of a sweep folder, a TREC run
file scored against qrels (``pipeline.io.scored``), an MLflow job run, every job of a
sweep's parent run, or the runs of an MLflow experiment; :func:`load_systems` gives them
unique names. Only the evaluated queries count: in a ``per_query.csv``, the rows whose
``evaluated`` is true (in an older table, ``n_relevant`` > 0; else every row). Bad input is
an ``InputError`` naming the file (or MLflow artifact) and line: a missing column, a
duplicate query id, a value that is not a finite number.

Each system also carries how it was scored (``System.scoring``, the keys of :data:`SCORING`):
a job's ``metrics.json`` ``scoring`` (older folders: the record's params and dataset digest,
the qrels digest unknown), a run file's own settings and qrels. :func:`scoring_differences`
says which settings differ between systems, and which some systems do not record.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import shlex
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from pipeline import tracking
from pipeline.errors import InputError
from pipeline.io import results as res
from pipeline.io.scored import score_files
from pipeline.metrics import metric_key
from pipeline.tracking.store import DEFAULT_TRACKING_URI

log = logging.getLogger(__name__)

#: nDCG@10 (the project's objective, graded), recall@10 (did the evidence reach a 10-chunk
#: context: what a RAG generator needs) and MRR (where the first relevant chunk is). Few on
#: purpose: every metric adds (systems - 1) comparisons to the Holm family.
DEFAULT_METRICS = ("ndcg_at_10", "recall_at_10", "mrr")
#: What a score means, and how messages name it: systems that differ in any of these were not
#: scored the same way. ``depth`` (a job's max(k, k_max) within the corpus, a run file's longest
#: ranking) is the cut-off of mrr, map and bpref: it matters for those only.
SCORING = {"gain": "gain", "relevance_level": "relevance_level", "judged_only": "judged_only",
           "qrels_digest": "qrels (digest)", "collection_digest": "collection (digest)",
           "depth": "depth (the cut-off of mrr, map, bpref)"}
#: Override keys that never are factors of an experiment (where and whether things are written).
NOT_FACTORS = ("paths", "tracking", "hydra", "cache_dir")


def is_factor(key: str) -> bool:
    """Whether override ``key`` can be a factor of an experiment (not a path or a store)."""
    return key.split(".", 1)[0] not in NOT_FACTORS


@dataclass
class System:
    """One system's per-query scores and where they came from.

    ``scores[metric]`` maps each evaluated query id to its value. ``spec`` is the command
    line argument it came from (a sweep gives several systems the same spec); ``source`` is
    the file (or ``mlflow:RUN_ID``) that errors name.
    """

    name: str
    kind: str  # job | trec | mlflow
    spec: str
    source: str
    scores: dict[str, dict[str, float]]
    run_name: str
    run_id: str | None = None
    folder: str | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    sweep: str | None = None  # sweep id (folder) or parent run id (MLflow)
    sweep_parent_run: str | None = None  # the sweep's parent run in ``sweep_store``
    sweep_store: str | None = None
    dataset: str | None = None  # the collection's digest, when known
    scoring: dict[str, str | None] = field(default_factory=dict)  # SCORING key -> value (None: not recorded)

    def describe(self) -> dict[str, Any]:
        """The system as the JSON report lists it (no scores: those are in ``per_query``)."""
        return {"name": self.name, "kind": self.kind, "spec": self.spec, "source": self.source,
                "run_name": self.run_name, "run_id": self.run_id, "folder": self.folder, "overrides": self.overrides,
                "sweep": self.sweep, "dataset_digest": self.dataset,
                "n_queries": len(next(iter(self.scores.values()), {}))}


def parse_overrides(text: str) -> dict[str, str]:
    """``"retriever.k1=0.5 k=3"`` (the ``hydra_overrides`` tag) -> ``{"retriever.k1": "0.5", "k": "3"}``.

    Hydra's escapes (``sqlite\\:///x``) and quotes are undone; ``+``/``++``/``~`` prefixes dropped."""
    try:
        tokens = shlex.split(text)
    except ValueError:
        tokens = text.split()
    out: dict[str, str] = {}
    for token in tokens:
        key, sep, value = token.partition("=")
        if sep:
            out[key.lstrip("+~")] = value
    return out


def check_metrics(metrics: Sequence[str]) -> list[str]:
    """The metric keys, each checked and once, in order; InputError (``--metric``) otherwise.
    Any per-query metric a job computes is one (``pipeline.metrics.metric_key``): ``ndcg_at_10``,
    ``mrr``, ``ndcg_at_k`` (each job at its own k), ``context_recall_budget_512``."""
    if not metrics:
        raise InputError("no metric to compare", "--metric")
    out = []
    for metric in metrics:
        try:
            metric_key(metric)
        except ValueError as err:
            raise InputError(str(err), "--metric") from None
        if metric not in out:
            out.append(metric)
    return out


def read_per_query(path: Path, metrics: Sequence[str], source: str | None = None) -> dict[str, dict[str, float]]:
    """``{metric: {query_id: value}}`` of the evaluated queries of a ``per_query.csv``.

    Errors name ``source`` (default: the file) and the line."""
    path = Path(path)
    where = source or str(path)
    header = _header(path)
    wanted = [c for c in ("query_id", "evaluated", "n_relevant", *metrics) if c in header] if header else None
    table = _read_columns(path, wanted, where)
    columns = set(header if wanted is not None else table.column_names)
    _check_columns(columns, metrics, where)
    ids = [str(q) for q in table.column("query_id").to_pylist()]
    keep = _evaluated(table, columns, len(ids))
    seen: dict[str, int] = {}
    for row, qid in enumerate(ids):
        if qid in seen:
            raise InputError(f"query {qid!r} appears twice (first on line {seen[qid] + 2})", where, row + 2)
        seen[qid] = row
    return {metric: _scores(metric, ids, table.column(metric).to_pylist(), keep, where) for metric in metrics}


def _header(path: Path) -> list[str] | None:
    """The first line's column names; None when unreadable (pyarrow's read then says why)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            return next(csv.reader(fh), None)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def _read_columns(path: Path, wanted: list[str] | None, where: str) -> Any:
    """The table with only the ``wanted`` columns (None: all) converted: a job's table has a
    column per metric and K, and converting only the few used is most of the saving."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    try:
        return pa_csv.read_csv(path, convert_options=pa_csv.ConvertOptions(
            column_types={"query_id": pa.string()}, strings_can_be_null=False, include_columns=wanted))
    except FileNotFoundError:
        raise InputError("per-query table not found", where) from None
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(f"unreadable per-query table ({exc})", where) from None


def _check_columns(columns: set[str], metrics: Sequence[str], where: str) -> None:
    """A query id column and every metric; a missing metric's error lists the K the table has."""
    if "query_id" not in columns:
        raise InputError("no query_id column: not a per_query.csv", where, 1)
    absent = [m for m in metrics if m not in columns]
    if absent:
        key = metric_key(absent[0])
        stem = f"{key.family}_budget_" if key.budget is not None else f"{key.family}_at_"
        have = sorted((c for c in columns if c.startswith(stem) and c.rsplit("_", 1)[1].isdigit()),
                      key=lambda c: int(c.rsplit("_", 1)[1]))
        span = f" (it has {have[0]} .. {have[-1]})" if have else (
            " (budget metrics are in the tables of chunked or budgeted jobs)" if key.budget is not None else "")
        raise InputError(f"no column {absent[0]}{span}", where, 1)


def _evaluated(table: Any, columns: set[str], n_rows: int) -> list[bool]:
    """Which rows count: ``evaluated``, else ``n_relevant`` > 0, else all."""
    if "evaluated" in columns:
        return [v is True or str(v).strip().lower() in ("true", "1") for v in table.column("evaluated").to_pylist()]
    if "n_relevant" in columns:
        return [float(v or 0) > 0 for v in table.column("n_relevant").to_pylist()]
    return [True] * n_rows


def _scores(metric: str, ids: Sequence[str], values: Sequence[Any], keep: Sequence[bool],
            where: str) -> dict[str, float]:
    """``{query_id: value}`` of the rows that count; each value a finite number."""
    scores: dict[str, float] = {}
    for row, (qid, value, counts) in enumerate(zip(ids, values, keep)):
        if not counts:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            raise InputError(f"{metric} of query {qid!r} is not a finite number "
                             f"({'empty, nan or null' if value is None else repr(value)})", where, row + 2)
        scores[qid] = number
    return scores


def read_scoring(metrics_json: Path | None, params: Mapping[str, Any],
                 dataset_digest: str | None = None) -> dict[str, str | None]:
    """A job's :data:`SCORING` values: its ``metrics.json`` ``scoring`` block; for what an
    older job did not write there, its params (gain, relevance_level, judged_only, depth =
    max(k, k_max) within the corpus) and its dataset digest; None where nothing says."""
    metrics: dict[str, Any] = {}
    if metrics_json is not None:
        try:
            metrics = json.loads(Path(metrics_json).read_text())
        except (OSError, ValueError):
            metrics = {}
    metrics = metrics if isinstance(metrics, dict) else {}
    given = metrics.get("scoring") if isinstance(metrics.get("scoring"), dict) else {}
    out = {key: _text(given.get(key, params.get(key))) for key in ("gain", "relevance_level", "judged_only")}
    out["qrels_digest"] = _text(given.get("qrels_digest"))
    out["collection_digest"] = _text(given.get("collection_digest") or dataset_digest)
    depth = given.get("depth")
    if depth is None:
        try:
            n_docs = (metrics.get("collection") or {}).get("n_docs")
            depth = min(max(int(params["k"]), int(params["k_max"])), int(n_docs)) if n_docs is not None else None
        except (KeyError, TypeError, ValueError):
            depth = None
    out["depth"] = _text(depth)
    return out


def _text(value: Any) -> str | None:
    """A setting as compared: ``True`` and ``"False"`` as ``true`` and ``false``; None stays None."""
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) or str(value) in ("True", "False") else str(value)


def scoring_differences(systems: Sequence[System], metrics: Sequence[str]
                        ) -> tuple[dict[str, dict[str, list[str]]], dict[str, list[str]]]:
    """(differences, unknown): for each :data:`SCORING` setting whose recorded values differ
    between the systems, ``{value: [system names]}``; for each setting some systems do not
    record while others do, those systems' names. ``depth`` counts only when a metric is a
    full-depth one (mrr, map, bpref); a run file has no collection, so that one is not asked."""
    full_depth = any(metric_key(m).full_depth for m in metrics)
    differences, unknown = {}, {}
    for key in SCORING:
        if key == "depth" and not full_depth:
            continue
        having = [s for s in systems if key in s.scoring]
        values: dict[str, list[str]] = {}
        for s in having:
            if s.scoring[key] is not None:
                values.setdefault(str(s.scoring[key]), []).append(s.name)
        if len(values) > 1:
            differences[key] = values
        missing = [s.name for s in having if s.scoring[key] is None]
        if missing and values:
            unknown[key] = missing
    return differences, unknown


def describe_differences(differences: Mapping[str, Mapping[str, Sequence[str]]], most: int = 3) -> str:
    """``gain differs (exp: A, B; linear: C)``, one clause per setting, digests shortened."""
    def names(group: Sequence[str]) -> str:
        return ", ".join(group[:most]) + (f" and {len(group) - most} more" if len(group) > most else "")

    return "; ".join(
        f"{SCORING[key]} differs (" + "; ".join(f"{v[:12] if key.endswith('digest') else v}: {names(g)}"
                                                 for v, g in values.items()) + ")"
        for key, values in differences.items())


def _job_results(path: Path) -> Path | None:
    """The results folder when ``path`` is a job's folder or its results folder."""
    if (path / res.RECORD).is_file() or (path.name == res.RESULTS and (path / "per_query.csv").is_file()):
        return path
    if (path / res.RESULTS / res.RECORD).is_file():
        return path / res.RESULTS
    return None


def load_system(folder: str | Path, metrics: Sequence[str] = DEFAULT_METRICS, *, spec: str | None = None,
                sweep_dir: Path | None = None) -> System:
    """One job: its folder (holding ``results/``) or its ``results/`` folder."""
    path = Path(folder)
    results = _job_results(path)
    if results is None:
        raise InputError("not a job folder (no results/record.json)", path)
    metrics = check_metrics(metrics)
    record = res.read_record(results)
    scores = read_job_metrics(results / "per_query.csv", metrics, record["params"].get("k", record.get("k")))
    sweep = record.get("sweep") or {}
    system = System(
        name=str(record["run_name"]), kind="job", spec=spec or str(folder), source=str(results / "per_query.csv"),
        scores=scores, run_name=str(record["run_name"]), folder=str(results.parent),
        overrides=parse_overrides(record["tags"].get("hydra_overrides", "")),
        params={str(k): str(v) for k, v in record["params"].items()},
        tags={str(k): str(v) for k, v in record["tags"].items()},
        sweep=sweep.get("sweep_id"), dataset=(record.get("dataset") or {}).get("digest"),
    )
    system.scoring = read_scoring(results / "metrics.json", system.params, system.dataset)
    marker = res.read_marker(results)
    if marker:
        system.run_id = marker["run_id"]
    if sweep_dir is not None:
        info = res.read_sweep(sweep_dir)  # a JSON file: no MLflow store is opened
        system.sweep = system.sweep or info.get("sweep_id") or str(sweep_dir)
        system.sweep_parent_run, system.sweep_store = info.get("parent_run_id"), info.get("uri")
    return system


def read_job_metrics(path: Path, metrics: Sequence[str], k: Any, source: str | None = None
                     ) -> dict[str, dict[str, float]]:
    """:func:`read_per_query` of a job whose cut-off is ``k``: a job-relative key
    (``ndcg_at_k``) reads the job's own column (``ndcg_at_<k>``) and keeps its name, so jobs
    with different k compare, each at its k."""
    try:
        columns = {m: metric_key(m).at(int(k)) if metric_key(m).relative else m for m in metrics}
    except (TypeError, ValueError):
        raise InputError(f"the job's k ({k!r}) is unknown: job-relative metrics (*_at_k) need it",
                         source or path) from None
    scores = read_per_query(path, list(dict.fromkeys(columns.values())), source)
    return {m: scores[c] for m, c in columns.items()}


def _load_trec(path: Path, metrics: Sequence[str], qrels: str | None, gain: str, relevance_level: int,
               spec: str) -> System:
    """A TREC run file scored against ``qrels``: the ranking metrics only (no placed context)."""
    if qrels is None:
        raise InputError("a TREC run file needs --qrels (or pass a job's folder)", path)
    keys = [metric_key(m) for m in metrics]
    for key in keys:
        if key.placed:
            raise InputError(f"{key.key} needs the placed context: a run file has only the ranking", "--metric")
        if key.relative:
            raise InputError(f"{key.key} is each job at its own k: a run file has no k (name the cut-off, "
                             f"{key.family}_at_10)", "--metric")
    parsed = [(key.family, key.k) for key in keys]
    k_max = max([k for _, k in parsed if k is not None] or [1])
    try:
        scored = score_files(str(qrels), str(path), k_max, gain, relevance_level)
    except ValueError as err:
        raise InputError(str(err), path) from err
    ev = scored.evaluation
    keep = np.asarray(ev.evaluated, dtype=bool)
    ids = [q for q, k in zip(scored.query_ids, keep) if k]
    scores: dict[str, dict[str, float]] = {}
    for metric, (family, k) in zip(metrics, parsed):
        values = ev.full[metric] if k is None else scored.values(family, k)  # K past the run's depth too
        scores[metric] = dict(zip(ids, np.asarray(values, np.float64)[keep].tolist()))
    if warning := scored.overlap_warning():
        log.warning("%s: %s", path, warning.removeprefix("warning: "))
    scoring = {"gain": gain, "relevance_level": str(relevance_level), "judged_only": "false",
               "qrels_digest": scored.qrels_digest(), "depth": str(scored.doc_idx.shape[1])}  # no collection
    return System(name=path.stem, kind="trec", spec=spec, source=str(path), scores=scores, run_name=path.stem,
                  folder=str(path.parent), scoring=scoring)


def _load_mlflow_runs(runs: Sequence[Mapping[str, Any]], metrics: Sequence[str], settings: Any, spec: str,
                      sweep: str | None = None) -> list[System]:
    """MLflow runs, each read from its ``per_query.csv`` artifact (downloaded, then dropped)."""
    systems = []
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        for run in runs:
            source = f"mlflow:{run['run_id']}"
            local = tracking.download_artifact(settings, run["run_id"], "per_query.csv", Path(tmp) / run["run_id"])
            try:  # how it was scored; a run without the file: its params only
                metrics_json: Path | None = tracking.download_artifact(settings, run["run_id"], "metrics.json",
                                                                      Path(tmp) / run["run_id"])
            except InputError:
                metrics_json = None
            tags = run["tags"]
            systems.append(System(
                name=run["run_name"], kind="mlflow", spec=spec, source=source,
                scores=read_job_metrics(local, metrics, run["params"].get("k"), source=f"{source}/per_query.csv"),
                run_name=run["run_name"], run_id=run["run_id"],
                overrides=parse_overrides(tags.get("hydra_overrides", "")), params=run["params"], tags=tags,
                sweep=sweep or tags.get("sweep_id"),
                sweep_parent_run=run.get("parent_run_id") if sweep else None,
                sweep_store=str(settings.uri) if sweep else None,
                scoring=read_scoring(metrics_json, run["params"]),
            ))
    return systems


def _from_mlflow(spec: str, metrics: Sequence[str], settings: Any, experiment_filter: str) -> list[System]:
    """``mlflow:RUN_ID`` (a job run, or a sweep's parent: all its jobs) or
    ``mlflow-experiment:NAME[:FILTER]`` (its finished runs)."""
    if spec.startswith("mlflow:"):
        run_id = spec[len("mlflow:"):].strip()
        if not run_id:
            raise InputError("mlflow: needs a run id (mlflow:RUN_ID)", spec)
        run = tracking.get_run_info(settings, run_id)
        if not run["is_sweep_parent"]:
            return _load_mlflow_runs([run], metrics, settings, spec)
        children = tracking.child_runs(settings, run_id)
        if not children:
            raise InputError("the sweep's parent run has no finished job runs", spec)
        return _load_mlflow_runs(children, metrics, settings, spec, sweep=run_id)
    name, _, inline = spec[len("mlflow-experiment:"):].partition(":")
    filters = " and ".join(f for f in (inline.strip(), experiment_filter.strip()) if f)
    runs = tracking.experiment_runs(settings, name, filters)
    if not runs:
        raise InputError(f"no finished runs match {filters!r}" if filters else "no finished runs", spec)
    return _load_mlflow_runs(runs, metrics, settings, spec)


def _from_path(spec: str, metrics: Sequence[str], qrels: str | None, gain: str,
               relevance_level: int) -> list[System]:
    """A ``per_query.csv``, a TREC run file, a job's folder, or a folder of jobs (a sweep)."""
    path = Path(spec).expanduser()
    if not path.exists():
        raise InputError("no such file or folder", spec)
    if path.is_file():
        if path.name == "per_query.csv":
            return [load_system(path.parent, metrics, spec=spec)]
        return [_load_trec(path, metrics, qrels, gain, relevance_level, spec)]
    if _job_results(path) is not None:
        return [load_system(path, metrics, spec=spec)]
    found = res.find_results([path])
    if not found:
        raise InputError("no job results (results/record.json) in this folder", path)
    sweep_dir = path if (path / res.SWEEP_FILE).is_file() else None
    return [load_system(r, metrics, spec=spec, sweep_dir=sweep_dir) for r in found]


def load_systems(specs: Sequence[str], metrics: Sequence[str] = DEFAULT_METRICS, *, qrels: str | None = None,
                 tracking_uri: str | None = None, experiment_filter: str = "", gain: str = "exp",
                 relevance_level: int = 1) -> list[System]:
    """Every system the command line names, in order, with unique names (see :func:`name_systems`).

    A sweep (folder or MLflow parent run) or an experiment expands to all its jobs."""
    metrics = check_metrics(metrics)
    systems: list[System] = []
    settings = None
    for spec in specs:
        if spec.startswith(("mlflow:", "mlflow-experiment:")):
            settings = settings or tracking.StoreSettings(uri=tracking_uri or DEFAULT_TRACKING_URI)
            systems += _from_mlflow(spec, metrics, settings, experiment_filter)
        else:
            systems += _from_path(spec, metrics, qrels, gain, relevance_level)
    name_systems(systems)
    return systems


def name_systems(systems: list[System]) -> None:
    """Make names unique: a duplicate run name gets the overrides that tell its group apart
    (``bm25-none-k10 [retriever.k1=0.5]``), else its folder or run id, else a number."""
    groups: dict[str, list[System]] = {}
    for s in systems:
        groups.setdefault(s.name, []).append(s)
    for name, group in groups.items():
        if len(group) < 2:
            continue
        keys = list(dict.fromkeys(k for s in group for k in s.overrides if is_factor(k)))  # command-line order
        varying = [k for k in keys if len({s.overrides.get(k) for s in group}) > 1]
        labels = [" ".join(f"{k}={s.overrides[k]}" for k in varying if k in s.overrides) for s in group]
        if len(set(labels)) < len(group) or not all(labels):
            labels = [_where(s) for s in group]
        if len(set(labels)) < len(group):
            labels = [f"{label} #{i}" for i, label in enumerate(labels, start=1)]
        for s, label in zip(group, labels):
            s.name = f"{name} [{label}]"
    counts = Counter(s.name for s in systems)  # a new name may equal another system's name
    for s in systems:
        if counts[s.name] > 1:
            s.name = f"{s.name} ({s.source})"


def _where(s: System) -> str:
    """A short label of where a system came from: its run id, its run file's folder, its folder."""
    if s.kind == "mlflow" and s.run_id:
        return s.run_id[:8]
    if s.kind == "trec":
        return str(Path(s.source).parent.name or s.source)
    return Path(s.folder or s.source).name
