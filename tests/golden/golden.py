"""Golden outputs: fixed jobs on the bundled samples, their outputs normalized and compared.

A refactor that changes a number is a bug. These jobs were recorded before the one-process
refactor (``python tests/golden/record.py`` writes ``tests/golden/expected/``); every later
change must reproduce them:

- metrics, curves and every other number to 1e-12 (relative or absolute);
- ``run.trec``, ``context.tsv``, ``per_query.csv``, ``failures.md``, ``definition_card.md``,
  the chunk files and the sweep's summary tables byte for byte, with timings, run ids and
  paths left out. The one exception: the scores column of a run whose ranking comes from a
  neural encoder (``dense``), which another CPU's kernels may change in the last bits; its
  ids and ranks are still compared exactly, its scores to 1e-5;
- the MLflow params and metrics (curves as their steps), minus timings and the params that
  name where things are (paths, the store) or which Python object builds them (``_target_``:
  the module layout is what a refactor moves).

The comparison has two parts (``tests/golden/test_golden.py``):

- **strict**: every number and every value that ``expected/`` holds is produced again, numbers
  to 1e-12 and files byte for byte (:func:`differences`, :func:`file_differences`); a key or a
  file that ``expected/`` holds and the run no longer produces is an error;
- **schema**: a key or a file that the run produces and ``expected/`` does not hold (a new
  metric, a new tag, a new output) is allowed: it is listed (:func:`additions`,
  :func:`new_files`) as a :class:`NewOutputs` warning in the test's output, never an error.
  Adding a metric does not mean recording the golden outputs again.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "tests") not in sys.path:  # tests/commands.py (pytest puts it there; record.py does not)
    sys.path.insert(0, str(REPO / "tests"))
HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "expected"
INPUTS = HERE / "inputs"
SAMPLE_QRELS = REPO / "pipeline" / "sample" / "qrels" / "test.tsv"
RUN_FILE = INPUTS / "sample_run.trec"

#: name -> overrides of one job (``python -m pipeline``, run in-process; in this order: later jobs reuse the cache).
JOBS: dict[str, list[str]] = {
    "bm25": [],
    "dense": ["retriever=dense"],
    "hybrid": ["retriever=hybrid"],
    "run_file": ["retriever=run_file", f"retriever.path={RUN_FILE}"],
    "litm": ["reorder=lost_in_the_middle", "k=5"],
    "attention_optimal": ["reorder=attention_optimal", "attention=u_shape", "k=10"],
    "gain_linear": ["gain=linear"],
    "judged_only": ["judged_only=true", "objective=map_at_10"],
    "chunked_budget": ["dataset=sample_long", "chunker=tokens", "chunker.size=64", "budget=512"],
}
#: The 4-job sweep (``-m``).
SWEEP = ["reorder=none,lost_in_the_middle", "k=3,5", "objective=context_utility_at_10"]
#: name -> arguments of the ``score`` command (``python -m pipeline.cli score``; stdout is JSON).
SCORES: dict[str, list[str]] = {
    "score_exp": [str(SAMPLE_QRELS), str(RUN_FILE), "--json"],
    "score_linear_trec_eval": [str(SAMPLE_QRELS), str(RUN_FILE), "--json", "--gain", "linear",
                               "--tie-break", "docid_desc", "--k", "5,10"],
}

#: Files of a job's results folder compared byte for byte (when the job wrote them).
BYTE_FILES = ("run.trec", "context.tsv", "per_query.csv", "failures.md", "definition_card.md",
              "chunk_run.trec", "chunks.tsv")
#: Jobs whose run.trec scores come from a neural encoder (compared to 1e-5, see above).
ENCODER_JOBS = {"dense"}
#: Params that say where things are or which Python object builds them, not what is computed.
_PLACE_PARAMS = re.compile(r"(^paths\.|^tracking\.(uri|artifact_root)$|^cache_dir$|(^|\.)_target_$|(^|\.)_partial_$"
                           r"|^retriever\.(path|cache_dir)$|(^|\.)cache_dir$)")
#: Record tags that name the machine or the checkout.
_VOLATILE_TAGS = {"git_commit", "mlflow.source.git.commit", "hydra_overrides", "sweep_id", "mlflow.runName",
                  "mlflow.note.content", "mlflow.loggedArtifacts", "job_key", "mlflow.parentRunId",
                  "mlflow.source.name", "mlflow.source.type", "mlflow.user", "mlflow.source.git.repoURL",
                  "best_run_id"}
#: Cost metrics measured in time (issue 36, ``retrievers.cost``): they vary run to run like
#: ``time_*_s``; the index sizes and the cost tags that are not the machine's stay compared.
_TIME_VALUED = re.compile(r"^(time_.*_s|latency_(p\d+|mean)_ms(_ci_(low|high))?|throughput_qps|index_build_s"
                          r"|encode_s|encode_passages_per_s)$")
TOLERANCE = 1e-12


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    e.update(MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
             OPENBLAS_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1",
             PIPELINE_TRACKER_IDLE_S="0")
    return e


@contextlib.contextmanager
def _as_a_fresh_process() -> Iterator[None]:
    """The environment of :func:`env` and one numeric thread (as ``OMP_NUM_THREADS=1`` gives a
    process) for the in-process jobs and commands; the process's own afterwards. Torch is
    loaded first (the dense job needs it anyway) so that its thread count can be put back."""
    import torch

    saved_env, threads = dict(os.environ), torch.get_num_threads()
    os.environ.clear()
    os.environ.update(env())
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        os.environ.clear()
        os.environ.update(saved_env)


def _command(name: str, *argv: str) -> str:
    """``python -m pipeline.cli NAME ARGV`` in this process (tests/commands.py): its stdout."""
    from commands import run_command

    done = run_command(name, *argv, cwd=REPO)
    if done.status != 0:
        raise AssertionError(f"{name} {' '.join(argv)} exited {done.status}:\n{done.stdout[-3000:]}\n"
                             f"{done.stderr[-3000:]}")
    return done.stdout


def _new_store_locks() -> None:
    """In the forked child: none of the parent's lock objects of the store (the in-process jobs
    took ``outputs/mlflow.db.lock`` through them; filelock refuses one inherited across a
    fork), as a new process starts without them."""
    from pipeline.tracking import store

    store._lock_file.cache_clear()


def run_all(root: Path, store: Path | None = None, embeddings: Path | None = None) -> None:
    """Run every golden job, the sweep and the commands under ``root``.

    The jobs and the commands run in this process (tests/commands.py: ``job_in_process``,
    ``run_command``), one after another as the processes ran, so that later jobs reuse the
    on-disk caches of earlier ones (the ranking cache, the embeddings) as they always did; the
    in-memory caches a process keeps (a loaded collection, the encoder) hold nothing that the
    golden outputs record. The sweep is ``python -m pipeline -m`` in a process forked from this
    one (tests/forked.py ``pipeline_child``: ``pipeline/__main__.py`` run there, its exit
    status the process's), the one run whose figures are drawn; the figures of the comparison
    report are not (no PNG is compared: tests/no_figures.py).

    ``store``: a migrated sqlite store (tests/conftest.py ``migrated_store``) copied to where the
    jobs log (``outputs/mlflow.db``) instead of the first job creating one: a store made by
    ``tracking.ensure_store`` either way, and creating it costs seconds. ``embeddings``: the
    sample's embedding cache (tests/sample_embeddings.py, encoded once per test run by
    ``DenseRetriever`` with the dense job's settings) copied into the jobs' cache folder: the dense
    job reads what that encoding gave, as the hybrid job reads the dense job's (the golden
    numbers and ``dense/run.trec`` check that encoding). Without them (record.py) the first job
    creates the store and the dense job encodes."""
    from commands import job_in_process
    from forked import pipeline_child
    from no_figures import figures_off

    root = Path(root)
    outputs = root / "outputs"
    outputs.mkdir(parents=True, exist_ok=True)
    if store is not None:
        shutil.copy(store, outputs / "mlflow.db")
    if embeddings is not None:
        shutil.copytree(embeddings, outputs / "cache", dirs_exist_ok=True)
    common = [f"paths.root={outputs}"]
    with _as_a_fresh_process():
        for name, overrides in JOBS.items():
            job_in_process(*overrides, *common, f"hydra.run.dir={root / 'jobs' / name}")
        sweep = ["-m", *SWEEP, *common, f"hydra.sweep.dir={root / 'sweep'}"]
        proc = pipeline_child(*sweep, env=env(), cwd=REPO, prepare=_new_store_locks).wait(600)
        if proc.returncode != 0:
            raise AssertionError(f"python -m pipeline {' '.join(sweep)} exited {proc.returncode}:\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        for name, args in SCORES.items():
            (root / f"{name}.json").write_text(_command("score", *args))
        # --baseline: the full table of tests against the job it was always against (the first), so its
        # paired statistics stay comparable; without it the reference is the best (issue 32)
        with figures_off():
            compare = _command("compare", str(root / "jobs" / "bm25"), str(root / "jobs" / "dense"),
                               str(root / "jobs" / "hybrid"), "--json", "--out", str(root / "compare"),
                               "--baseline", str(root / "jobs" / "bm25"))
        (root / "compare.json").write_text(compare)


# --------------------------------------------------------------------------- normalizing


#: Keys of a comparison report that name when it ran and the ids of the store and sweep, and its
#: latencies (``latency``: measured in time, they vary run to run like the jobs' ``time_*_s``).
_REPORT_VOLATILE = {"created", "run_id", "sweep", "latency"}


def _scrub(value: Any, root: Path, drop: frozenset[str] | set[str] = frozenset()) -> Any:
    """Paths of this run replaced by placeholders and the keys ``drop`` left out, recursively."""
    if isinstance(value, str):
        return value.replace(str(root), "<ROOT>").replace(str(REPO), "<REPO>")
    if isinstance(value, dict):
        return {k: _scrub(v, root, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_scrub(v, root, drop) for v in value]
    return value


def _no_timings(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if not _TIME_VALUED.match(k)}


def _params(params: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in params.items() if not _PLACE_PARAMS.search(k)}


def _tags(tags: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in tags.items() if k not in _VOLATILE_TAGS and not k.startswith("cost.machine.")}


def _record(results: Path, root: Path) -> dict[str, Any]:
    record = json.loads((results / "record.json").read_text())
    metrics = json.loads((results / "metrics.json").read_text())
    collection = {k: v for k, v in metrics["collection"].items() if k != "source"}
    return _scrub({
        "metrics.json": {"metrics": _no_timings(metrics["metrics"]), "curves": metrics["curves"],
                         "judged_only": metrics.get("judged_only"), "collection": collection},
        "record": {
            "experiment": record["experiment"], "run_name": record["run_name"], "k": record["k"],
            "objective": record["objective"], "ranking_digest": record.get("ranking_digest"),
            "params": _params(record["params"]), "metrics": _no_timings(record["metrics"]),
            "curves": record["curves"], "stepped": record.get("stepped"), "tags": _tags(record["tags"]),
            "dataset": {k: v for k, v in record["dataset"].items() if k != "source"},
            "table_columns": record.get("table_columns"),
        },
    }, root)


def _mlflow_run(client: Any, run_id: str) -> dict[str, Any]:
    run = client.get_run(run_id)
    metrics = _no_timings(dict(run.data.metrics))
    metrics.pop("time_track_s", None)
    stepped = {}
    for key in sorted(run.data.metrics):
        if "/" in key:
            history = client.get_metric_history(run_id, key)
            stepped[key] = {str(m.step): m.value for m in sorted(history, key=lambda m: m.step)}
    return {"status": run.info.status, "run_name": run.info.run_name, "params": _params(dict(run.data.params)),
            "metrics": {k: v for k, v in metrics.items() if "/" not in k}, "stepped": stepped,
            "tags": {k: v for k, v in _tags(dict(run.data.tags)).items() if not k.startswith("mlflow.")}}


def _bytes_of(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _summary_table_csv(text: str) -> str:
    """sweep_table.csv without its run ids and timings."""
    rows = list(csv.reader(io.StringIO(text)))
    keep = [i for i, name in enumerate(rows[0]) if name not in ("run_id", "time_total_s")]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([row[i] for i in keep])
    return out.getvalue()


def _summary_table_md(text: str) -> str:
    """sweep_table.md without its run ids and timings."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("|"):
        return text
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    keep = [i for i, name in enumerate(header) if name not in ("run_id", "time_total_s")]
    out = []
    for line in lines:
        cells = line.strip().strip("|").split("|")
        out.append("|" + "|".join(cells[i] for i in keep if i < len(cells)) + "|")
    return "\n".join(out) + "\n"


def collect(root: Path) -> dict[str, Any]:
    """Everything the golden jobs produced under ``root``, normalized: ``{"numbers": ...,
    "files": {name: text}}``."""
    from mlflow import MlflowClient

    root = Path(root)
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'outputs' / 'mlflow.db'}")
    numbers: dict[str, Any] = {}
    files: dict[str, str] = {}
    job_dirs = {name: root / "jobs" / name for name in JOBS}
    sweep_jobs = sorted((p for p in (root / "sweep").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    job_dirs.update({f"sweep_{p.name}": p for p in sweep_jobs})
    for name, job in job_dirs.items():
        results = job / "results"
        entry = _record(results, root)
        marker = json.loads((results / "mlflow_run.json").read_text())
        entry["mlflow"] = _mlflow_run(client, marker["run_id"])
        numbers[name] = entry
        for file in BYTE_FILES:
            if (results / file).is_file():
                files[f"{name}/{file}"] = _bytes_of(results / file)
    summary = root / "sweep" / "summary"
    files["sweep/summary/sweep_table.csv"] = _scrub(_summary_table_csv(_bytes_of(summary / "sweep_table.csv")), root)
    files["sweep/summary/sweep_table.md"] = _scrub(_summary_table_md(_bytes_of(summary / "sweep_table.md")), root)
    report = json.loads((summary / "compare" / "report.json").read_text())
    numbers["sweep_compare_report"] = _scrub(report, root, _REPORT_VOLATILE)
    sweep_info = json.loads((root / "sweep" / "mlflow_sweep.json").read_text())
    parent = _mlflow_run(client, sweep_info["parent_run_id"])
    parent["tags"] = {k: v for k, v in parent["tags"].items() if k != "sweep_parent"}
    numbers["sweep_parent"] = parent
    for name in SCORES:
        numbers[name] = _scrub(json.loads((root / f"{name}.json").read_text()), root)
    numbers["compare"] = _scrub(json.loads((root / "compare.json").read_text()), root, _REPORT_VOLATILE)
    return {"numbers": numbers, "files": files}


# --------------------------------------------------------------------------- comparing


class NewOutputs(UserWarning):
    """Keys or files the golden jobs produce that ``expected/`` does not hold: allowed, listed."""


def differences(expected: Any, actual: Any, where: str = "", tol: float = TOLERANCE) -> list[str]:
    """Where ``actual`` does not reproduce ``expected`` (the strict part): a value that differs
    (numbers to ``tol``, everything else exactly) or a key of ``expected`` that ``actual``
    lacks. A key only ``actual`` has is not a difference (:func:`additions` lists it)."""
    out: list[str] = []
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(expected, key=str):
            if key not in actual:
                out.append(f"{where}/{key}: missing (expected {str(expected[key])[:80]})")
            else:
                out += differences(expected[key], actual[key], f"{where}/{key}", tol)
    elif isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            out.append(f"{where}: {len(actual)} items, expected {len(expected)}")
        else:
            for i, (e, a) in enumerate(zip(expected, actual)):
                out += differences(e, a, f"{where}[{i}]", tol)
    elif _number(expected) and _number(actual):
        e, a = float(expected), float(actual)
        if not (math.isnan(e) and math.isnan(a)) and not math.isclose(e, a, rel_tol=tol, abs_tol=tol):
            out.append(f"{where}: {a!r}, expected {e!r}")
    elif expected != actual:
        out.append(f"{where}: {str(actual)[:120]!r}, expected {str(expected)[:120]!r}")
    return out


def additions(expected: Any, actual: Any, where: str = "") -> list[str]:
    """The keys ``actual`` has and ``expected`` does not (the schema part: allowed, listed), as
    paths (``bm25/record/metrics/new_metric_at_10``), at any depth of dicts common to both."""
    if not (isinstance(expected, dict) and isinstance(actual, dict)):
        return []
    out = [f"{where}/{key}" for key in sorted(set(actual) - set(expected), key=str)]
    for key in sorted(set(actual) & set(expected), key=str):
        out += additions(expected[key], actual[key], f"{where}/{key}")
    return out


def new_files(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    """The files produced that ``expected/`` does not hold (allowed, listed)."""
    return sorted(set(actual) - set(expected))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def file_differences(name: str, expected: str, actual: str) -> list[str]:
    job = name.split("/", 1)[0]
    if name.endswith("/run.trec") and job in ENCODER_JOBS:
        e_rows = [line.split() for line in expected.splitlines()]
        a_rows = [line.split() for line in actual.splitlines()]
        if [r[:4] + r[5:] for r in e_rows] != [r[:4] + r[5:] for r in a_rows]:
            return [f"{name}: the ranking differs"]
        return [f"{name}: score {a[4]}, expected {e[4]} ({' '.join(e[:4])})" for e, a in zip(e_rows, a_rows)
                if not math.isclose(float(e[4]), float(a[4]), rel_tol=1e-5, abs_tol=1e-6)][:10]
    if expected != actual:
        e_lines, a_lines = expected.splitlines(), actual.splitlines()
        for i, (e, a) in enumerate(zip(e_lines, a_lines), start=1):
            if e != a:
                return [f"{name}: line {i} is {a[:160]!r}, expected {e[:160]!r}"]
        return [f"{name}: {len(a_lines)} lines, expected {len(e_lines)}"]
    return []


def save(collected: dict[str, Any], folder: Path = EXPECTED) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "numbers.json").write_text(json.dumps(collected["numbers"], indent=1, sort_keys=True) + "\n")
    for name, text in collected["files"].items():
        path = folder / "files" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def load(folder: Path = EXPECTED) -> dict[str, Any]:
    numbers = json.loads((folder / "numbers.json").read_text())
    files = {str(p.relative_to(folder / "files")): p.read_text(encoding="utf-8")
             for p in sorted((folder / "files").rglob("*")) if p.is_file()}
    return {"numbers": numbers, "files": files}
