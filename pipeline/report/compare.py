"""Compare retrieval systems on the same queries: ``python -m pipeline.compare SYSTEM SYSTEM ...``.

A SYSTEM is a job's folder (or its ``results/``), a sweep folder (every job in it), a TREC
run file (scored against ``--qrels`` with ``pipeline.score``), ``mlflow:RUN_ID`` (a job run,
or a sweep's parent run: all its jobs) or ``mlflow-experiment:NAME[:FILTER]``. Each system's
per-query scores of the evaluated queries (at least one relevant document) are aligned by
query id (``stats.align``) and compared with ``stats.compare_metrics``: mean and BCa
bootstrap CI per system, the difference to the baseline with its CI, paired t, Wilcoxon,
sign and randomization tests adjusted (Holm by default) over every comparison of every
metric, effect sizes, randomized Tukey HSD, the minimum detectable difference and the set
of systems tied with the best. See docs/comparing.md and docs/statistics.md.

Writes ``report.md``, ``report.json`` (everything, per-query scores included),
``forest.png``, ``per_query_diff.png`` and, for sweeps, ``main_effects.png`` to ``--out``;
prints a table (or, with ``--json``, the report and nothing else) on standard output. Bad
input: one line ``error: FILE[:LINE]: problem`` on standard error, exit status 2; a failing
MLflow store: exit status 3.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import shlex
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from pipeline.io import results as res
from pipeline import stats
from pipeline.errors import InputError, positive_int
from pipeline.metrics import FAMILY, FULL_DEPTH, parse_key

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_METRICS",
    "REPORT_FORMAT",
    "Report",
    "System",
    "build_report",
    "load_system",
    "load_systems",
    "main",
    "parse_overrides",
    "read_per_query",
    "report_for_folders",
    "write_report",
]

#: nDCG@10 (the project's objective, graded), recall@10 (did the evidence reach a 10-chunk
#: context: what a RAG generator needs) and MRR (where the first relevant chunk is). Few on
#: purpose: every metric adds (systems - 1) comparisons to the Holm family.
DEFAULT_METRICS = ("ndcg_at_10", "recall_at_10", "mrr")
DEFAULT_TRACKING_URI = "sqlite:///outputs/mlflow.db"
REPORT_FORMAT = "rag-eval-compare/1"
TESTS = ("fisher", "t", "wilcoxon", "sign")
CORRECTIONS = ("holm", "bonferroni", "fdr_bh")
#: Override keys that never are factors of an experiment (where and whether things are written).
_NOT_FACTORS = ("paths", "tracking", "hydra", "cache_dir")


def _is_factor(key: str) -> bool:
    return key.split(".", 1)[0] not in _NOT_FACTORS
SIGNIFICANT = "†"
BEST = "*"


# --------------------------------------------------------------------------- systems


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

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "spec": self.spec, "source": self.source,
            "run_name": self.run_name, "run_id": self.run_id, "folder": self.folder,
            "overrides": self.overrides, "sweep": self.sweep, "dataset_digest": self.dataset,
            "n_queries": len(next(iter(self.scores.values()), {})),
        }


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


def _check_metrics(metrics: Sequence[str]) -> list[str]:
    if not metrics:
        raise InputError("no metric to compare", "--metric")
    out = []
    for metric in metrics:
        try:
            parse_key(metric)
        except ValueError as err:
            raise InputError(str(err), "--metric") from None
        if metric not in out:
            out.append(metric)
    return out


def read_per_query(path: Path, metrics: Sequence[str], source: str | None = None) -> dict[str, dict[str, float]]:
    """``{metric: {query_id: value}}`` of the evaluated queries of a ``per_query.csv``.

    A query counts when its ``evaluated`` column is true (else, in an older table, when
    ``n_relevant`` > 0; else every row). Errors name ``source`` (default: the file) and the
    line: a missing column, a duplicate query id, a value that is not a finite number."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    path = Path(path)
    where = source or str(path)
    # Only the columns used are converted (a job's table has ~200: 1 ms instead of 12 ms a
    # job); the header line says which exist.
    wanted = None
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            header = next(csv.reader(fh), None)
        if header:
            wanted = [c for c in ("query_id", "evaluated", "n_relevant", *metrics) if c in header]
    except (OSError, UnicodeDecodeError, csv.Error):
        pass  # pyarrow's read below says what is wrong with the file
    try:
        table = pa_csv.read_csv(path, convert_options=pa_csv.ConvertOptions(
            column_types={"query_id": pa.string()}, strings_can_be_null=False, include_columns=wanted))
    except FileNotFoundError:
        raise InputError("per-query table not found", where) from None
    except (OSError, pa.ArrowInvalid) as exc:
        raise InputError(f"unreadable per-query table ({exc})", where) from None
    columns = set(header if wanted is not None else table.column_names)
    if "query_id" not in columns:
        raise InputError("no query_id column: not a per_query.csv", where, 1)
    absent = [m for m in metrics if m not in columns]
    if absent:
        family, _ = parse_key(absent[0])
        have = sorted((c for c in columns if c.startswith(f"{family}_at_")), key=lambda c: int(c.rsplit("_", 1)[1]))
        span = f" (it has {have[0]} .. {have[-1]})" if have else ""
        raise InputError(f"no column {absent[0]}{span}", where, 1)
    ids = [str(q) for q in table.column("query_id").to_pylist()]
    if "evaluated" in columns:
        raw = table.column("evaluated").to_pylist()
        keep = [v is True or str(v).strip().lower() in ("true", "1") for v in raw]
    elif "n_relevant" in columns:
        keep = [float(v or 0) > 0 for v in table.column("n_relevant").to_pylist()]
    else:
        keep = [True] * len(ids)
    seen: dict[str, int] = {}
    for row, qid in enumerate(ids):
        if qid in seen:
            raise InputError(f"query {qid!r} appears twice (first on line {seen[qid] + 2})", where, row + 2)
        seen[qid] = row
    out: dict[str, dict[str, float]] = {}
    for metric in metrics:
        values = table.column(metric).to_pylist()
        scores: dict[str, float] = {}
        for row, (qid, value, counts) in enumerate(zip(ids, values, keep)):
            if not counts:
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                number = math.nan
            if not math.isfinite(number):
                raise InputError(f"{metric} of query {qid!r} is not a finite number ({value!r})", where, row + 2)
            scores[qid] = number
        out[metric] = scores
    return out


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
    metrics = _check_metrics(metrics)
    record = res.read_record(results)
    scores = read_per_query(results / "per_query.csv", metrics)
    sweep = record.get("sweep") or {}
    system = System(
        name=str(record["run_name"]), kind="job", spec=spec or str(folder), source=str(results / "per_query.csv"),
        scores=scores, run_name=str(record["run_name"]), folder=str(results.parent),
        overrides=parse_overrides(record["tags"].get("hydra_overrides", "")),
        params={str(k): str(v) for k, v in record["params"].items()},
        tags={str(k): str(v) for k, v in record["tags"].items()},
        sweep=sweep.get("sweep_id"), dataset=(record.get("dataset") or {}).get("digest"),
    )
    marker = res.read_marker(results)
    if marker:
        system.run_id = marker["run_id"]
    if sweep_dir is not None:
        from pipeline.tracking import read_sweep_file  # reads a JSON file; imports no mlflow

        info = read_sweep_file(sweep_dir)
        system.sweep = system.sweep or info.get("sweep_id") or str(sweep_dir)
        system.sweep_parent_run, system.sweep_store = info.get("parent_run_id"), info.get("uri")
    return system


def _load_trec(path: Path, metrics: Sequence[str], qrels: str | None, gain: str, relevance_level: int,
               spec: str) -> System:
    from pipeline.score import score_files

    if qrels is None:
        raise InputError("a TREC run file needs --qrels (or pass a job's folder)", path)
    parsed = [parse_key(m) for m in metrics]
    for metric, (family, _) in zip(metrics, parsed):
        if family not in FULL_DEPTH and FAMILY[family].stage != "ranking":
            raise InputError(f"{metric} needs the placed context: a run file has only the ranking", "--metric")
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
        values = ev.full[metric] if k is None else ev.values(family)[:, k - 1]
        scores[metric] = dict(zip(ids, np.asarray(values, np.float64)[keep].tolist()))
    return System(name=path.stem, kind="trec", spec=spec, source=str(path), scores=scores, run_name=path.stem,
                  folder=str(path.parent))


def _load_mlflow_runs(runs: Sequence[Mapping[str, Any]], metrics: Sequence[str], settings: Any, spec: str,
                      sweep: str | None = None) -> list[System]:
    from pipeline import tracking

    systems = []
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        for run in runs:
            source = f"mlflow:{run['run_id']}"
            local = tracking.download_artifact(settings, run["run_id"], "per_query.csv", Path(tmp) / run["run_id"])
            tags = run["tags"]
            systems.append(System(
                name=run["run_name"], kind="mlflow", spec=spec, source=source,
                scores=read_per_query(local, metrics, source=f"{source}/per_query.csv"),
                run_name=run["run_name"], run_id=run["run_id"],
                overrides=parse_overrides(tags.get("hydra_overrides", "")), params=run["params"], tags=tags,
                sweep=sweep or tags.get("sweep_id"),
                sweep_parent_run=run.get("parent_run_id") if sweep else None,
                sweep_store=str(settings.uri) if sweep else None,
            ))
    return systems


def load_systems(
    specs: Sequence[str],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    qrels: str | None = None,
    tracking_uri: str | None = None,
    experiment_filter: str = "",
    gain: str = "exp",
    relevance_level: int = 1,
) -> list[System]:
    """Every system the command line names, in order, with unique names (see :func:`_name`).

    A sweep (folder or MLflow parent run) or an experiment expands to all its jobs."""
    metrics = _check_metrics(metrics)
    systems: list[System] = []
    settings = None
    for spec in specs:
        if spec.startswith(("mlflow:", "mlflow-experiment:")):
            from pipeline import tracking

            settings = settings or tracking.StoreSettings(uri=tracking_uri or DEFAULT_TRACKING_URI)
            if spec.startswith("mlflow:"):
                run_id = spec[len("mlflow:"):].strip()
                if not run_id:
                    raise InputError("mlflow: needs a run id (mlflow:RUN_ID)", spec)
                run = tracking.get_run_info(settings, run_id)
                if run["is_sweep_parent"]:
                    children = tracking.child_runs(settings, run_id)
                    if not children:
                        raise InputError("the sweep's parent run has no finished job runs", spec)
                    systems += _load_mlflow_runs(children, metrics, settings, spec, sweep=run_id)
                else:
                    systems += _load_mlflow_runs([run], metrics, settings, spec)
            else:
                name, _, inline = spec[len("mlflow-experiment:"):].partition(":")
                filters = " and ".join(f for f in (inline.strip(), experiment_filter.strip()) if f)
                runs = tracking.experiment_runs(settings, name, filters)
                if not runs:
                    raise InputError(f"no finished runs match {filters!r}" if filters else "no finished runs", spec)
                systems += _load_mlflow_runs(runs, metrics, settings, spec)
            continue
        path = Path(spec).expanduser()
        if not path.exists():
            raise InputError("no such file or folder", spec)
        if path.is_file():
            if path.name == "per_query.csv":
                systems.append(load_system(path.parent, metrics, spec=spec))
            else:
                systems.append(_load_trec(path, metrics, qrels, gain, relevance_level, spec))
            continue
        if _job_results(path) is not None:
            systems.append(load_system(path, metrics, spec=spec))
            continue
        found = res.find_results([path])
        if not found:
            raise InputError("no job results (results/record.json) in this folder", path)
        sweep_dir = path if (path / res.SWEEP_FILE).is_file() else None
        systems += [load_system(r, metrics, spec=spec, sweep_dir=sweep_dir) for r in found]
    _name(systems)
    return systems


def _name(systems: list[System]) -> None:
    """Make names unique: a duplicate run name gets the overrides that tell its group apart
    (``bm25-none-k10 [retriever.k1=0.5]``), else its folder or run id, else a number."""
    groups: dict[str, list[System]] = {}
    for s in systems:
        groups.setdefault(s.name, []).append(s)
    for name, group in groups.items():
        if len(group) < 2:
            continue
        keys = list(dict.fromkeys(k for s in group for k in s.overrides if _is_factor(k)))  # command-line order
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
    if s.kind == "mlflow" and s.run_id:
        return s.run_id[:8]
    if s.kind == "trec":
        return str(Path(s.source).parent.name or s.source)
    return Path(s.folder or s.source).name


# --------------------------------------------------------------------------- the report


@dataclass
class Report:
    """The comparison: ``data`` is the JSON report; ``matrices[metric]`` the aligned scores
    ``[systems, queries]`` (rows in ``names`` order, columns in ``query_ids`` order)."""

    data: dict[str, Any]
    names: list[str]
    query_ids: list[str]
    matrices: dict[str, NDArray[np.float64]]
    systems: list[System]


def _factors(systems: Sequence[System]) -> dict[str, dict[str, str]]:
    """``{factor: {system: value}}`` for each override key whose value varies across systems.

    A system without the override has its config's value (record params, e.g.
    ``retriever.k1``) or its group choice (tag ``choice.retriever``), else ``default``."""
    keys = list(dict.fromkeys(k for s in systems for k in s.overrides if _is_factor(k)))  # command-line order
    out = {}
    for key in keys:
        values = {s.name: s.overrides.get(key) or s.params.get(key) or s.tags.get(f"choice.{key}") or "default"
                  for s in systems}
        if len(set(values.values())) > 1:
            out[key] = values
    return out


def _level_order(values: Iterable[str]) -> list[str]:
    levels = list(dict.fromkeys(values))
    try:
        return sorted(levels, key=float)
    except ValueError:
        return levels


def _main_effects(factors: Mapping[str, Mapping[str, str]], names: list[str],
                  matrices: Mapping[str, NDArray[np.float64]], n_resamples: int, seed: int) -> dict[str, Any]:
    """Per metric and factor, per level: the mean over queries of the per-query average of the
    jobs at that level, with its BCa bootstrap CI (queries resampled, the same for all levels)."""
    out: dict[str, Any] = {}
    for metric, x in matrices.items():
        out[metric] = {}
        for factor, values in factors.items():
            levels = _level_order(values[n] for n in names)
            rows = np.stack([x[[i for i, n in enumerate(names) if values[n] == level]].mean(axis=0)
                             for level in levels])
            lo, hi = stats.bootstrap_ci(rows, n_resamples=n_resamples, seed=seed)
            out[metric][factor] = [
                {"value": level, "mean": float(rows[j].mean()), "ci_low": float(lo[j]), "ci_high": float(hi[j]),
                 "n_systems": sum(values[n] == level for n in names)}
                for j, level in enumerate(levels)
            ]
    return out


def _find_baseline(baseline: str | None, systems: Sequence[System]) -> str:
    if baseline is None:
        return systems[0].name
    for attempt in (
        lambda s: s.name == baseline,
        lambda s: s.run_id is not None and baseline in (s.run_id, f"mlflow:{s.run_id}"),
        lambda s: s.spec == baseline,
        lambda s: s.folder is not None and Path(baseline).expanduser().resolve() in
        (Path(s.folder).resolve(), Path(s.folder).resolve() / res.RESULTS),
        lambda s: s.run_name == baseline,
        lambda s: s.name.endswith(f" [{baseline}]"),  # the overrides that name it: "retriever.k1=0.5"
    ):
        hits = [s for s in systems if attempt(s)]
        if len(hits) == 1:
            return hits[0].name
        if len(hits) > 1:
            raise InputError(f"{baseline!r} names {len(hits)} systems ({', '.join(h.name for h in hits[:4])}): "
                             "pass one system's name", "--baseline")
    raise InputError(f"{baseline!r} is none of the systems ({', '.join(s.name for s in systems[:8])})", "--baseline")


def build_report(
    systems: Sequence[System],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    baseline: str | None = None,
    test: str = "fisher",
    correction: str = "holm",
    alpha: float = 0.05,
    n_resamples: int = 10_000,
    n_permutations: int = 10_000,
    seed: int = 0,
    missing: str = "error",
    delta: float | None = None,
    main_effects: bool | None = None,
) -> Report:
    """Compare ``systems`` (from :func:`load_systems`) on ``metrics``.

    The first system is the baseline unless ``baseline`` names one (its name, run id,
    command-line spec or folder). ``main_effects`` (default: when a sweep is compared)
    adds the per-factor means. ValueErrors of ``stats`` become InputErrors."""
    metrics = _check_metrics(metrics)
    if len(systems) < 2:
        raise InputError(f"need at least two systems to compare, got {len(systems)}",
                         systems[0].spec if systems else None)
    if test not in TESTS:
        raise InputError(f"--test must be one of {', '.join(TESTS)}, got {test!r}")
    names = [s.name for s in systems]
    base = _find_baseline(baseline, systems)

    # The query set: the union of every system's evaluated queries; a query one system lacks
    # is an error naming that system's file, unless missing="zero" (trec_eval -c).
    union = sorted(set().union(*(s.scores[metrics[0]] for s in systems)))
    zero_filled = {}
    for s in systems:
        absent = [q for q in union if q not in s.scores[metrics[0]]]
        if absent and missing != "zero":
            raise InputError(f"no score for {len(absent)} of the {len(union)} evaluated queries of the systems, "
                             f"e.g. {absent[:5]} (--missing zero scores them 0, as trec_eval -c)", s.source)
        if absent:
            zero_filled[s.name] = absent
    digests = {s.dataset for s in systems if s.dataset}
    if len(digests) > 1:
        log.warning("the systems ran on %d different collections (dataset digests differ)", len(digests))
    try:
        aligned = {m: stats.align({s.name: s.scores[m] for s in systems}, missing=missing, query_ids=union)
                   for m in metrics}
        matrices = {m: a.matrix for m, a in aligned.items()}
        comparisons = stats.compare_metrics(
            matrices, names, baseline=base, n_resamples=n_resamples, n_permutations=n_permutations, seed=seed,
            correction=correction, alpha=alpha, test=test, delta=delta)  # type: ignore[arg-type]
        tied = {m: stats.tied_with_best(matrices[m], names, test=test, correction=correction,  # type: ignore[arg-type]
                                        alpha=alpha, n_permutations=n_permutations, seed=seed) for m in metrics}
    except ValueError as err:
        raise InputError(str(err)) from err

    n = len(union)
    best, sensitivity = {}, {}
    for c in comparisons:
        top = max(s.mean for s in c.systems)
        best[c.metric] = [s.name for s in c.systems if s.mean >= top - stats.TIE_TOLERANCE]
        sens = dict(c.sensitivity)
        if delta is not None and "sd_diff" in sens:
            sens["power_at_delta"] = float(stats.power_paired_t(delta, sens["sd_diff"], n, alpha=alpha))
        sensitivity[c.metric] = sens
    is_sweep = any(s.sweep for s in systems)
    factors = _factors(systems)
    effects = {}
    if factors and (main_effects if main_effects is not None else is_sweep):
        effects = _main_effects(factors, names, matrices, n_resamples, seed)
    data = {
        "format": REPORT_FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "metrics": metrics,
        "baseline": base,
        "settings": {"test": test, "correction": correction, "alpha": alpha, "ci_method": "BCa", "confidence": 0.95,
                     "n_resamples": n_resamples, "n_permutations": n_permutations, "seed": seed,
                     "missing": missing, "delta": delta},
        "n_queries": n,
        "n_comparisons": sum(len(c.vs_baseline) for c in comparisons),
        "systems": [s.describe() for s in systems],
        "zero_filled": zero_filled,
        "comparisons": [_finite(c.to_dict()) for c in comparisons],
        "best": best,
        "tied_with_best": tied,
        "sensitivity": _finite(sensitivity),
        "factors": factors,
        "main_effects": _finite(effects),
        "per_query": {"query_ids": union,
                      "scores": {m: {name: row.tolist() for name, row in zip(names, matrices[m])} for m in metrics}},
    }
    return Report(data, names, union, matrices, list(systems))


def _finite(value: Any) -> Any:
    """JSON has no infinities: a non-finite float (t of constant differences) becomes null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


# --------------------------------------------------------------------------- text


def _cells(report: Report, markdown: bool = False, digits: int = 3) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the system table: per metric, mean [CI] (best marked) and the
    difference to the baseline [CI] (significant marked)."""
    data = report.data
    head = ["system"]
    for m in data["metrics"]:
        head += [f"{m} mean [95% CI]", f"{m} diff [95% CI]"]
    by_metric = {c["metric"]: c for c in data["comparisons"]}
    rows = []
    for i, name in enumerate(report.names):
        row = [name + (" (baseline)" if name == data["baseline"] else "")]
        for m in data["metrics"]:
            c = by_metric[m]
            s = c["systems"][i]
            mark = BEST if name in data["best"][m] else ""
            mean = f"{s['mean']:.{digits}f}"
            if mark and markdown:
                mean = f"**{mean}**"
            row.append(f"{mean} [{s['ci_low']:.{digits}f}, {s['ci_high']:.{digits}f}]{mark}")
            vs = next((v for v in c["vs_baseline"] if v["system"] == name), None)
            if vs is None:
                row.append("-")
            else:
                sig = SIGNIFICANT if vs["significant"] else ""
                row.append(f"{vs['diff']:+.{digits}f} [{vs['diff_ci_low']:+.{digits}f}, "
                           f"{vs['diff_ci_high']:+.{digits}f}]{sig}")
        rows.append(row)
    return head, rows


def _legend(report: Report) -> str:
    d = report.data
    st = d["settings"]
    return (f"{BEST} best mean; {SIGNIFICANT} {_TEST_NAMES[st['test']]} p <= {st['alpha']} after {st['correction']} "
            f"over {_count(d['n_comparisons'], 'comparison')} ({_count(len(d['metrics']), 'metric')} x "
            f"{_count(len(report.names) - 1, 'system')} vs the baseline); CIs: {st['ci_method']} bootstrap, {st['n_resamples']} resamples; "
            f"{d['n_queries']} queries")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


_TEST_NAMES = {"fisher": "randomization test", "t": "paired t-test", "wilcoxon": "Wilcoxon signed-rank test",
               "sign": "sign test"}


def _sensitivity_line(report: Report, digits: int = 3) -> str:
    d = report.data
    parts = []
    for m in d["metrics"]:
        s = d["sensitivity"][m]
        if s.get("mdd") is None:
            continue
        text = f"{m} {s['mdd']:.{digits}f}"
        if s.get("delta") is not None:
            text += f" (a difference of {s['delta']:g} has power {s['power_at_delta']:.2f}; needs {s['n_needed']} queries)"
        parts.append(text)
    return (f"sensitivity: smallest difference detectable with power 0.8 at alpha {d['settings']['alpha']} "
            f"with {d['n_queries']} queries (paired t): " + "; ".join(parts))


def _ties_line(report: Report) -> str:
    d = report.data
    st = d["settings"]
    n = len(report.names)
    parts = [f"{m}: " + (f"all {n} systems" if len(d["tied_with_best"][m]) == n else ", ".join(d["tied_with_best"][m]))
             for m in d["metrics"]]
    return (f"tied with the best (not significantly different from it; {_TEST_NAMES[st['test']]}, "
            f"{st['correction']}): " + "; ".join(parts))


def format_table(report: Report, digits: int = 3) -> str:
    """The console table, its legend, the sensitivity and the tie set."""
    head, rows = _cells(report, digits=digits)
    # two header lines: the metric over its two columns, then what each column holds
    top = [""] + [h.split(" ", 1)[0] if j % 2 == 0 else "" for j, h in enumerate(head[1:])]
    sub = [head[0]] + [h.split(" ", 1)[1] for h in head[1:]]
    width = [max(len(r[j]) for r in [top, sub, *rows]) for j in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, width)).rstrip()  # noqa: E731
    out = [line(top), line(sub), line(["-" * w for w in width]), *(line(r) for r in rows), "",
           _legend(report), _sensitivity_line(report, digits), _ties_line(report)]
    if report.data["zero_filled"]:
        out.append("scored 0 where missing: " + "; ".join(
            f"{k}: {len(v)} queries" for k, v in report.data["zero_filled"].items()))
    return "\n".join(out)


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    return ["| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(map(esc, r)) + " |" for r in rows)]


def format_markdown(report: Report, figures: Sequence[str] = ()) -> str:
    """``report.md``: the table, then per metric every test's p-values, effect sizes and the
    sensitivity, the systems' sources and the figures."""
    d = report.data
    st = d["settings"]
    lines = [f"# Comparison of {len(report.names)} systems", "",
             f"Baseline: **{d['baseline']}**. Metrics: {', '.join(d['metrics'])}. "
             f"{d['n_queries']} evaluated queries, aligned by query id.", ""]
    head, rows = _cells(report, markdown=True, digits=4)
    lines += _md_table(head, rows)
    lines += ["", _legend(report) + ".", "", _sensitivity_line(report, 4) + ".", "", _ties_line(report) + ".", ""]
    if d["zero_filled"]:
        lines += ["Queries missing from a system scored 0 (--missing zero): " + "; ".join(
            f"{k}: {', '.join(v[:10])}{' ...' if len(v) > 10 else ''}" for k, v in d["zero_filled"].items()), ""]
    tests = stats.PAIRED_TESTS
    for c in d["comparisons"]:
        lines += [f"## {c['metric']}", ""]
        if c["vs_baseline"]:
            head = ["system", "diff", "95% CI", *(f"p {t}" for t in tests), *(f"p adj {t}" for t in tests),
                    "d_z", "Hedges g", "W/T/L", "MDD"]
            rows = [[v["system"], f"{v['diff']:+.4f}", f"[{v['diff_ci_low']:+.4f}, {v['diff_ci_high']:+.4f}]",
                     *(f"{v['p'][t]:.4g}" for t in tests),
                     *(f"{v['p_adjusted'][t]:.4g}" + (SIGNIFICANT if t == st["test"] and v["significant"] else "")
                       for t in tests),
                     _num(v["d_z"]), _num(v["hedges_g"]), f"{v['wins']}/{v['ties']}/{v['losses']}",
                     f"{v['mdd']:.4f}"] for v in c["vs_baseline"]]
            lines += _md_table(head, rows) + [""]
        if c["tukey"] and len(report.names) > 2:
            lines += ["Randomized Tukey HSD p-values (family-wise over all pairs):", ""]
            short = [f"S{i + 1}" for i in range(len(report.names))]
            lines += _md_table(["", *short], [[f"S{i + 1} {a}", *(f"{c['tukey'][a][b]:.3g}" for b in report.names)]
                                              for i, a in enumerate(report.names)]) + [""]
    if d["main_effects"]:
        lines += ["## Main effects", "", "Mean over queries of the average of the jobs at each value of a swept "
                  "factor, with its 95% bootstrap CI.", ""]
        for metric, by_factor in d["main_effects"].items():
            for factor, levels in by_factor.items():
                lines += [f"**{metric} by {factor}**", ""]
                lines += _md_table(["value", "mean", "95% CI", "jobs"],
                                   [[lv["value"], f"{lv['mean']:.4f}", f"[{lv['ci_low']:.4f}, {lv['ci_high']:.4f}]",
                                     str(lv["n_systems"])] for lv in levels]) + [""]
    lines += ["## Systems", ""]
    lines += _md_table(["system", "kind", "source", "run id", "overrides"],
                       [[s["name"], s["kind"], s["source"], s["run_id"] or "",
                         " ".join(f"{k}={v}" for k, v in s["overrides"].items() if _is_factor(k))]
                        for s in d["systems"]]) + [""]
    lines += [f"![{f}]({f})" for f in figures]
    return "\n".join(lines).rstrip() + "\n"


def _num(v: float | None) -> str:
    return "inf" if v is None else f"{v:.3f}"


# --------------------------------------------------------------------------- files


def write_report(report: Report, out: str | Path) -> list[Path]:
    """``report.json``, ``report.md`` and the figures in ``out``; returns the files written."""
    from pipeline.report import figures as plots

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    d = report.data
    figures = {
        "forest.png": plots.forest_figure({c["metric"]: c["vs_baseline"] for c in d["comparisons"]}, d["baseline"],
                                          f"Difference to the baseline with its 95% CI ({d['n_queries']} queries)"),
        "per_query_diff.png": plots.per_query_diff_figure(
            {m: {name: x[i] - x[report.names.index(d["baseline"])] for i, name in enumerate(report.names)
                 if name != d["baseline"]} for m, x in report.matrices.items()},
            d["baseline"], f"Per-query differences to the baseline, sorted ({d['n_queries']} queries)"),
    }
    if d["main_effects"]:
        figures["main_effects.png"] = plots.main_effects_figure(d["main_effects"], "Main effects of the swept factors")
    written = []
    for name, figure in figures.items():
        figure.savefig(out / name, dpi=100, **plots.PNG_FAST)
        written.append(out / name)
    d["files"] = sorted(p.name for p in [*written, out / "report.md", out / "report.json"])
    res.write_text(out / "report.md", format_markdown(report, list(figures)))
    res.write_json(out / "report.json", d, indent=1)
    return [out / "report.json", out / "report.md", *written]


def report_for_folders(
    folders: Sequence[str | Path],
    metrics: Sequence[str] = DEFAULT_METRICS,
    baseline: str | None = None,
    out: str | Path | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The comparison report (a JSON-ready dict) of job folders or sweep folders; written to
    ``out`` too when given. ``options`` go to :func:`build_report` (test, correction, alpha,
    n_resamples, n_permutations, seed, missing, delta, main_effects). For the sweep summary:
    ``report_for_folders([sweep_dir], baseline=None)`` compares every job of the sweep."""
    systems = load_systems([str(f) for f in folders], metrics)
    report = build_report(systems, metrics, baseline=baseline, **options)
    if out is not None:
        write_report(report, out)
    return report.data


# --------------------------------------------------------------------------- MLflow


def _log_target(systems: Sequence[System], explicit_uri: str | None) -> tuple[str, str | None]:
    """(store uri, parent run) for ``--log``: the sweep's parent run when every system is a
    job of one sweep whose parent is known; else no parent (a new run in "compare")."""
    sweeps = {(s.sweep, s.sweep_parent_run, s.sweep_store) for s in systems}
    if len(sweeps) == 1:
        sweep, parent, store = next(iter(sweeps))
        if sweep and parent and store and (explicit_uri is None or explicit_uri == store):
            return store, parent
    return explicit_uri or DEFAULT_TRACKING_URI, None


def log_report(report: Report, out: Path, explicit_uri: str | None) -> tuple[str, str, bool]:
    """Put the report folder on an MLflow run; returns (run id, store, whether a sweep parent)."""
    from pipeline import tracking

    uri, parent = _log_target(report.systems, explicit_uri)
    settings = tracking.StoreSettings(uri=uri)
    d = report.data
    names = report.names
    run_name = f"compare: {d['baseline']} vs {len(names) - 1} system{'s' if len(names) > 2 else ''}"
    tags = {"compare.baseline": d["baseline"], "compare.systems": "\n".join(names)[:4000],
            "compare.source_runs": " ".join(s.run_id for s in report.systems if s.run_id)[:4000],
            "mlflow.note.content": (out / "report.md").read_text()[:20000]}
    params = {"metrics": ",".join(d["metrics"]), "baseline": d["baseline"], "n_systems": str(len(names)),
              "n_queries": str(d["n_queries"]), **{k: str(v) for k, v in d["settings"].items()}}
    run_id = tracking.log_report(settings, out, parent_run_id=parent,
                                 artifact_path=f"compare/{out.name}" if parent else None,
                                 run_name=run_name[:250], tags=tags, params=params)
    return run_id, uri, parent is not None


# --------------------------------------------------------------------------- command line


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, status 2 (argparse prints the usage too)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m pipeline.compare",
        description="Compare retrieval systems on the same queries: means with CIs, differences to a baseline "
                    "with CIs and multiplicity-adjusted significance tests, sensitivity, the systems tied with "
                    "the best. See docs/comparing.md.",
    )
    parser.add_argument("systems", nargs="+", metavar="SYSTEM",
                        help="a job folder (or its results/), a sweep folder, a TREC run file (with --qrels), "
                             "mlflow:RUN_ID (a job, or a sweep's parent: all its jobs), "
                             "mlflow-experiment:NAME[:FILTER]")
    parser.add_argument("--qrels", help="qrels for TREC run files (TREC or BEIR .tsv; .gz fine)")
    parser.add_argument("--baseline", help="the system the others are compared with (default: the first)")
    parser.add_argument("--metric", action="append", dest="metrics", metavar="M",
                        help=f"a metric key, repeatable (default: {' '.join(DEFAULT_METRICS)})")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON (nothing else on stdout)")
    parser.add_argument("--out", help="folder for report.md, report.json and figures "
                                      "(default: outputs/compare/<timestamp>)")
    parser.add_argument("--n-resamples", type=positive_int, default=10_000, help="bootstrap resamples (10000)")
    parser.add_argument("--n-permutations", type=positive_int, default=10_000,
                        help="randomization-test sign flips and Tukey HSD permutations (10000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    parser.add_argument("--correction", choices=CORRECTIONS, default="holm",
                        help="multiple-comparison correction over all comparisons of all metrics (holm)")
    parser.add_argument("--test", choices=TESTS, default="fisher",
                        help="the test behind the significance markers and the tie set: fisher (randomization, "
                             "default), t, wilcoxon, sign; the report has all four")
    parser.add_argument("--missing", choices=("error", "zero"), default="error",
                        help="a query one system lacks: an error (default) or a score of 0 (trec_eval -c)")
    parser.add_argument("--delta", type=_positive_float, default=None,
                        help="a difference you care about: its power and the queries it needs")
    parser.add_argument("--gain", choices=("exp", "linear"), default="exp", help="nDCG gain for TREC run files (exp)")
    parser.add_argument("--relevance-level", type=positive_int, default=1,
                        help="relevant grade for TREC run files (1)")
    parser.add_argument("--tracking-uri", default=None,
                        help=f"the MLflow store for mlflow: systems and --log (default {DEFAULT_TRACKING_URI}; "
                             "--log on one sweep folder: the sweep's store)")
    parser.add_argument("--filter", default="", help="MLflow filter string for mlflow-experiment: systems, "
                                                     "e.g. \"params.k = '10'\"")
    parser.add_argument("--log", action="store_true",
                        help="put the report on an MLflow run: the sweep's parent run when comparing one sweep, "
                             "else a new run in experiment 'compare'")
    parser.add_argument("--debug", action="store_true", help="show a traceback on errors")
    return parser


def _default_out() -> Path:
    base = Path("outputs") / "compare" / time.strftime("%Y-%m-%d_%H-%M-%S")
    out, i = base, 1
    while out.exists():
        out, i = base.with_name(f"{base.name}_{i}"), i + 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    if not 0 < args.alpha < 1:
        print(f"error: --alpha must be between 0 and 1, got {args.alpha}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s", stream=sys.stderr)
    metrics = args.metrics or list(DEFAULT_METRICS)
    from pipeline.tracking import TrackingError  # tracking imports mlflow lazily, when used

    try:
        try:
            systems = load_systems(args.systems, metrics, qrels=args.qrels, tracking_uri=args.tracking_uri,
                                   experiment_filter=args.filter, gain=args.gain,
                                   relevance_level=args.relevance_level)
            report = build_report(systems, metrics, baseline=args.baseline, test=args.test,
                                  correction=args.correction, alpha=args.alpha, n_resamples=args.n_resamples,
                                  n_permutations=args.n_permutations, seed=args.seed, missing=args.missing,
                                  delta=args.delta)
        except ValueError as err:  # a computing module's word for bad input
            raise InputError(str(err)) from err
        out = Path(args.out) if args.out else _default_out()
        write_report(report, out)
        info = sys.stderr if args.json else sys.stdout
        logged = None
        if args.log:
            logged = log_report(report, out, args.tracking_uri)
            report.data["mlflow"] = {"run_id": logged[0], "uri": logged[1], "sweep_parent": logged[2]}
            res.write_json(out / "report.json", report.data, indent=1)
    except InputError as err:
        if args.debug:
            raise
        print(str(err), file=sys.stderr)
        return err.exit_code
    except TrackingError as err:
        if args.debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 3
    if args.json:
        print(json.dumps(report.data))
    else:
        print(format_table(report))
    print(f"report: {out.resolve()}", file=info)
    if logged:
        where = "the sweep's parent run" if logged[2] else "a new run in experiment 'compare'"
        print(f"MLflow: report logged to {where} {logged[0]} at {logged[1]}", file=info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
