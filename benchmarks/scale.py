"""How the pipeline's cost grows with the corpus: every stage at 10k, 100k and 1M documents.

    python benchmarks/scale.py --sizes 10000,100000,1000000 --queries 1000 --out DIR \\
        [--figure docs/img/scale.png] [--hnsw-max-docs 100000] [--encode-rate auto|DOCS_PER_S]
        [--store-template MIGRATED_DB]

**Corpora.** ``generate`` writes a synthetic BEIR folder (``corpus.jsonl``, ``queries.jsonl``,
``qrels/test.tsv``) from a seeded generator, so the same (size, queries, seed) gives the same
bytes: a vocabulary of ``VOCAB_SIZE`` pseudo-words (consonant-vowel syllables; frequent words
are short) drawn with Zipf's law (p(rank r) proportional to r^-``ZIPF_S``), passages of
MS MARCO-like length (log-normal, mean ~56 words, clipped to 5..250), no titles. Each query
has 3-5 content words (Zipf ranks >= 100) plus one frequent word and 1-4 judged documents
(grades 1-3): a grade-g document has g+1 of the query's content words (at most all of them)
written over random positions of its text, so BM25 finds the judged documents as a real
collection's would.

**Stages.** Each size runs three fresh subprocesses (``--worker``), so no stage inherits
another's memory:

- ``text``: ``load`` (``pipeline.io.collection.load_beir``), ``bm25_index`` and ``bm25_search``
  (``retrievers.bm25.BM25Retriever`` with ``conf/retriever/bm25.yaml``'s settings, depth
  100), ``score`` (``pipeline.metrics.evaluate``, K = 1..100), ``write`` (``run.trec``
  through ``pipeline.io.formats.write_run`` and ``metrics.json``) and ``track`` (one MLflow run
  through ``pipeline.tracking.log_run``: params, metrics, curves, the results folder as
  artifacts, into a sqlite store in a temporary folder, created before the stage as a sweep
  creates it before its jobs; mlflow's imports are made before the stage, as for every stage).
- ``dense``: ``dense_exact`` (``DenseRetriever(index="exact")``: numpy matrix products,
  1,000 queries x n, top 100), ``hnsw_build`` and ``hnsw_search`` (faiss ``IndexHNSWFlat``
  with ``conf/retriever/dense.yaml``'s ``hnsw_m``, ``hnsw_ef_construction``,
  ``hnsw_ef_search``, ``hnsw_target_recall``: ``hnsw_search`` includes the calibration that
  raises efSearch until 100 of the queries reach the target recall) on random unit vectors of dimension 384 (MiniLM's): a stand-in encoder
  returns seeded Gaussian vectors, so encoding is not part of any stage. Its cost is reported
  apart as n / rate (``--encode-rate``: ``auto`` measures MiniLM on the bundled sample's
  passages on this machine's CPU, takes words per CPU-second times torch's threads, and
  converts that to documents of the corpus's mean length). HNSW recall@100 = the mean over queries of |HNSW top 100 & exact top 100| / 100;
  also reported for the ``--ef-sweep`` values of ``efSearch``. The HNSW graph is built only
  up to ``--hnsw-max-docs`` (its build on random 384-d vectors grew like n^1.5 from 10k to
  100k, which puts 1M at about two hours on 2 cores).
- ``job``: a real ``python -m pipeline dataset=beir retriever=bm25 k=10 k_max=100
  tracking=local`` (load -> index -> search -> place -> score -> write -> track into a fresh
  sqlite store), its wall time from start to exit (imports included), its own stage timings
  (``time_*_s`` of its record and the store), and its memory.

``--store-template DB`` (the test suite's smoke run, tests/benchmarks/test_scale.py): the text
worker and the job track into copies of ``DB``, a store that ``pipeline.tracking.ensure_store``
made, instead of creating (migrating) their own: seconds of CPU in each. No stage changes; the
job's time then leaves out creating its store (``job.store`` in ``scale.json`` says which).

Chunking is not measured here: the default job (`chunker=none`) has no chunking stage, and
`benchmarks/chunking.py` times the chunkers against semantic-text-splitter itself.

**Measurement.** Wall time is ``time.perf_counter`` around the stage's call (imports made
before); CPU time is the user + system time over the same call of the process (all
threads) and of any children it waited for, from ``getrusage``, which a loaded machine
inflates far less than wall time.
Memory is the peak resident set size (RSS) during the stage: the larger of the process's
own peak (the worker resets the kernel's high-water mark before each stage, ``echo 5 >
/proc/self/clear_refs``, Linux >= 4.0, and reads ``VmHWM`` from ``/proc/self/status``
after it) and the largest sum of ``VmRSS`` over the process and its children, sampled
every 0.05 s. The peak is absolute: it includes the interpreter, the imports and what earlier stages
of the same worker still hold (the collection, during BM25 and scoring), as a job would
hold them; ``growth`` is the peak minus the RSS at the stage's start. The job's memory is
the largest ``VmHWM`` of the job process, and the largest sum of ``VmRSS`` over the job and
any children, sampled every 0.1 s (the job starts none: one process per command).

**Growth exponents.** For each stage, alpha is the least-squares slope of log(wall time)
(and of log(CPU time), and of log(peak RSS)) against log(n) over the sizes measured: cost
proportional to n^alpha. The peak includes the interpreter's fixed ~100 MiB, which pulls
the memory exponent of small stages towards 0. The goal is judged on wall time and memory.

**Goals** (checked at the largest size): no stage's time or memory grows faster than
n^1.15; the BM25 job runs in under 3 minutes with a peak under 6 GB; the job's peak RSS is
at most 4x the corpus text (UTF-8 bytes of the document texts): the one-process refactor
accepted the rise from the 3x of a job whose BM25 tokenized in a forked child.

Writes ``DIR/scale.json`` (every number), ``DIR/scale.md`` (the table) and the figure
(``--figure``, default ``DIR/scale.png``): time and peak memory against n, log-log, one line
per stage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# ----------------------------------------------------------------------------- generator

VOCAB_SIZE = 1_000_000
ZIPF_S = 1.0  # Zipf's law: frequency of the word of rank r proportional to r^-s
LENGTH_MU, LENGTH_SIGMA = math.log(56.0) - 0.45**2 / 2, 0.45  # log-normal words per passage, mean 56
MIN_WORDS, MAX_WORDS = 5, 250
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"
SYLLABLES = [c + v for c in _CONSONANTS for v in _VOWELS]  # 70
DIM = 384  # all-MiniLM-L6-v2's embedding size
DEPTH = 100
_CHUNK_DOCS = 20_000
GOAL_ALPHA, GOAL_JOB_S, GOAL_JOB_BYTES, GOAL_TEXT_RATIO = 1.15, 180.0, 6e9, 4.0


def word(rank: int) -> str:
    """The pseudo-word of 0-based frequency rank ``rank``: bijective base-70 in syllables,
    so ranks 0..69 are one syllable, the next 4,900 two, and so on (frequent words are short)."""
    parts = []
    rank += 1
    while rank > 0:
        rank, digit = divmod(rank - 1, len(SYLLABLES))
        parts.append(SYLLABLES[digit])
    return "".join(reversed(parts))


_VOCAB: list[str] | None = None
_CDF: np.ndarray | None = None


def vocabulary() -> tuple[list[str], np.ndarray]:
    """The words by rank and the cumulative Zipf distribution over them."""
    global _VOCAB, _CDF
    if _VOCAB is None or _CDF is None:
        # ``word(r)`` for every rank, built a syllable count at a time: the words of L + 1
        # syllables are those of L followed by each syllable, in order (bijective base 70
        # orders words of one length lexicographically). Same list, a seventh of the time.
        words, level = list(SYLLABLES), list(SYLLABLES)
        while len(words) < VOCAB_SIZE:
            left = VOCAB_SIZE - len(words)
            level = [w + s for w in level[: -(-left // len(SYLLABLES))] for s in SYLLABLES][:left]
            words += level
        _VOCAB = words[:VOCAB_SIZE]
        weights = np.arange(1, VOCAB_SIZE + 1, dtype=np.float64) ** -ZIPF_S
        _CDF = np.cumsum(weights) / weights.sum()
    return _VOCAB, _CDF


def _zipf_ranks(rng: np.random.Generator, size: int, min_rank: int = 0) -> np.ndarray:
    _, cdf = vocabulary()
    low = cdf[min_rank - 1] if min_rank > 0 else 0.0
    u = low + (1.0 - low) * rng.random(size)
    return np.minimum(np.searchsorted(cdf, u, side="right"), VOCAB_SIZE - 1)


def generate(folder: Path, n_docs: int, n_queries: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Write a BEIR folder of ``n_docs`` passages and ``n_queries`` judged queries; returns
    its manifest (also written as ``manifest.json``). Same arguments, same bytes."""
    if n_docs < 4 * n_queries:
        raise ValueError(f"need at least 4 documents per query, got {n_docs} for {n_queries}")
    vocab, _ = vocabulary()
    rng = np.random.default_rng([seed, n_docs, n_queries])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)

    # Queries first: their words are planted in their judged documents.
    n_rel = rng.integers(1, 5, size=n_queries)
    judged = rng.choice(n_docs, size=int(n_rel.sum()), replace=False)
    grades = rng.integers(1, 4, size=len(judged))
    plant: dict[int, list[int]] = {}
    qrels_lines, query_lines = ["query-id\tcorpus-id\tscore\n"], []
    at = 0
    for q in range(n_queries):
        content = _zipf_ranks(rng, int(rng.integers(3, 6)), min_rank=100).tolist()
        common = int(_zipf_ranks(rng, 1)[0])
        words = [vocab[r] for r in content] + [vocab[common]]
        order = rng.permutation(len(words))
        query_lines.append(json.dumps({"_id": f"q{q}", "text": " ".join(words[i] for i in order)}) + "\n")
        for d, g in zip(judged[at : at + n_rel[q]].tolist(), grades[at : at + n_rel[q]].tolist()):
            plant[d] = content[: g + 1]
            qrels_lines.append(f"q{q}\tdoc{d}\t{g}\n")
        at += int(n_rel[q])
    (folder / "queries.jsonl").write_text("".join(query_lines), encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("".join(qrels_lines), encoding="utf-8")

    text_bytes = n_words = 0
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for start in range(0, n_docs, _CHUNK_DOCS):
            stop = min(n_docs, start + _CHUNK_DOCS)
            lengths = np.clip(np.rint(rng.lognormal(LENGTH_MU, LENGTH_SIGMA, stop - start)), MIN_WORDS, MAX_WORDS)
            lengths = lengths.astype(np.int64)
            ends = np.cumsum(lengths)
            ranks = _zipf_ranks(rng, int(ends[-1]))
            for d in sorted(k for k in plant if start <= k < stop):
                first = int(ends[d - start] - lengths[d - start])
                spots = rng.choice(int(lengths[d - start]), size=len(plant[d]), replace=False)
                ranks[first + spots] = plant[d]
            tokens = [vocab[r] for r in ranks.tolist()]
            lines = []
            begin = 0
            for i, end in enumerate(ends.tolist()):
                text = " ".join(tokens[begin:end])
                begin = end
                text_bytes += len(text)  # ASCII: characters are bytes
                lines.append(f'{{"_id": "doc{start + i}", "title": "", "text": "{text}"}}\n')
            n_words += int(ends[-1])
            fh.write("".join(lines))
    manifest = {"n_docs": n_docs, "n_queries": n_queries, "seed": seed, "vocab_size": VOCAB_SIZE, "zipf_s": ZIPF_S,
                "n_judgments": int(n_rel.sum()), "mean_words": n_words / n_docs, "text_bytes": text_bytes,
                "corpus_file_bytes": (folder / "corpus.jsonl").stat().st_size}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def folder_digest(folder: Path) -> str:
    """sha256 over the generated files' names and bytes."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------- measuring


def _status_kib(field: str, pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _cpu_s(who: int) -> float:
    """User + system CPU seconds of this process (all its threads) or of its waited-for children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class Stages:
    """Times each stage and measures its peak RSS (see the module docstring)."""

    def __init__(self) -> None:
        self.results: dict[str, dict[str, float]] = {}

    def run(self, name: str, fn: Any) -> Any:
        with open("/proc/self/clear_refs", "w") as fh:  # reset VmHWM to the current RSS
            fh.write("5")
        start_rss = _status_kib("VmRSS")
        tree = {"peak": 0, "done": False}

        def sample() -> None:  # this process and any children
            while not tree["done"]:
                tree["peak"] = max(tree["peak"], _tree_rss_kib(os.getpid())[1])
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        c0 = _cpu_s(resource.RUSAGE_SELF) + _cpu_s(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        try:
            out = fn()
        finally:
            tree["done"] = True
        seconds = time.perf_counter() - t0
        cpu = _cpu_s(resource.RUSAGE_SELF) + _cpu_s(resource.RUSAGE_CHILDREN) - c0
        sampler.join()
        peak = max(_status_kib("VmHWM"), tree["peak"])
        self.results[name] = {"time_s": seconds, "cpu_s": cpu, "peak_rss_bytes": peak * 1024,
                              "growth_bytes": max(0, peak - start_rss) * 1024}
        print(f"  {name:<12} {seconds:8.2f} s  cpu {cpu:8.2f} s  peak {peak / 2**20:6.2f} GiB",
              file=sys.stderr, flush=True)
        return out


def _retriever_settings(name: str) -> dict[str, Any]:
    import yaml

    cfg = yaml.safe_load((ROOT / "conf" / "retriever" / f"{name}.yaml").read_text())
    return {k: v for k, v in cfg.items() if not k.startswith("_") and k != "cache_dir"}


class RandomEncoder:
    """A stand-in for the model: seeded unit Gaussian vectors, one per text. Texts are
    ``<role>:<i>``; the vectors depend only on the role and the count (texts come in order)."""

    def __init__(self, seed: int, dim: int = DIM):
        self.seed, self.dim = seed, dim
        self._vectors: dict[int, np.ndarray] = {}

    def cache_key(self) -> str:
        return f"random-unit-{self.dim}-{self.seed}"

    def encode(self, sentences: list[str], batch_size: int = 0, **kwargs: Any) -> np.ndarray:
        """Text ``<role>:<i>`` gets row i of the role's stream, whatever batch it comes in (the
        retriever encodes in batches, longest text first): row i does not depend on how many rows
        are drawn, so these are the vectors one call over all texts in order would give."""
        role = 0 if sentences[0].startswith("d") else 1
        rows = np.fromiter((int(s.split(":", 1)[1]) for s in sentences), np.int64, len(sentences))
        have = self._vectors.get(role)
        if have is None or len(have) <= rows.max():
            n = max(int(rows.max()) + 1, 2 * (0 if have is None else len(have)))
            have = self._vectors[role] = random_unit_vectors(n, self.dim, [self.seed, role])
        return have[rows]


def random_unit_vectors(n: int, dim: int, seed: Any) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), np.float32)
    for s in range(0, n, 65536):
        block = rng.standard_normal((min(n, s + 65536) - s, dim), dtype=np.float32)
        out[s : s + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def worker_text(folder: Path, work: Path, store_template: Path | None = None) -> dict[str, Any]:
    from pipeline import tracking
    from pipeline.io import results as res
    from pipeline.io.collection import load_beir
    from pipeline.io.formats import write_run
    from pipeline.metrics import CURVES, evaluate
    from retrievers.bm25 import BM25Retriever

    stages = Stages()
    collection = stages.run("load", lambda: load_beir(folder))
    bm25 = BM25Retriever(**_retriever_settings("bm25"))
    stages.run("bm25_index", lambda: bm25.index(collection.doc_ids, collection.doc_texts))
    ranking = stages.run("bm25_search", lambda: bm25.search(collection.query_ids, collection.query_texts, DEPTH))
    ev = stages.run("score", lambda: evaluate(ranking.doc_idx, collection.qrels, DEPTH))
    means = ev.means([1, 3, 5, 10, 20, 50, 100])
    results = work / "results"

    def write() -> None:
        results.mkdir(parents=True, exist_ok=True)
        write_run(results / "run.trec", collection.query_ids, collection.doc_ids, ranking.doc_idx, ranking.scores,
                  tag="bm25")
        res.write_json(results / "metrics.json", {"metrics": means,
                                                  "curves": {f: ev.curve(f).tolist() for f in CURVES if f in ev.families()}})

    stages.run("write", write)
    import mlflow.entities  # noqa: F401  (the imports are not the stage)
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    settings = tracking.StoreSettings(uri=f"sqlite:///{work / 'mlflow.db'}", artifact_root=str(work / "artifacts"))
    if store_template is not None:  # --store-template: a copy of a migrated store, not a new one
        shutil.copy(store_template, work / "mlflow.db")
    tracking.ensure_store(settings)  # created once per store (a sweep does it before its jobs), not per job
    record = tracking.RunRecord(
        experiment="scale", run_name=f"bm25-{collection.n_docs}", params={"n_docs": str(collection.n_docs)},
        metrics=means, curves={f"curve/{f}": ev.curve(f).tolist() for f in CURVES if f in ev.families()},
        tags={}, artifacts_dir=results,
        dataset={"name": collection.name, "digest": collection.digest, "source": str(folder)})
    stages.run("track", lambda: tracking.log_run(settings, record))
    return {"stages": stages.results, "ndcg_at_10": means["ndcg_at_10"], "recall_at_100": means["recall_at_100"]}


def worker_dense(n_docs: int, n_queries: int, seed: int, hnsw: bool, ef_sweep: list[int]) -> dict[str, Any]:
    from retrievers.dense import DenseRetriever

    settings = {k: v for k, v in _retriever_settings("dense").items()
                if k in ("normalize", "hnsw_m", "hnsw_ef_construction", "hnsw_ef_search", "hnsw_target_recall",
                         "hnsw_calibration_queries")}
    encoder = RandomEncoder(seed)
    doc_ids, doc_texts = [f"d{i}" for i in range(n_docs)], [f"d:{i}" for i in range(n_docs)]
    q_ids, q_texts = [f"q{i}" for i in range(n_queries)], [f"q:{i}" for i in range(n_queries)]
    stages = Stages()
    exact = DenseRetriever(**settings, index="exact", encoder=encoder)
    exact.index(doc_ids, doc_texts)  # the stand-in "encoding": not a stage
    truth = stages.run("dense_exact", lambda: exact.search(q_ids, q_texts, DEPTH)).doc_idx
    out: dict[str, Any] = {"hnsw": {"M": settings["hnsw_m"], "ef_construction": settings["hnsw_ef_construction"],
                                    "ef_search": settings["hnsw_ef_search"],
                                    "target_recall": settings.get("hnsw_target_recall"),
                                    "calibration_queries": settings.get("hnsw_calibration_queries")}}
    if hnsw:
        approx = DenseRetriever(**settings, index="hnsw", encoder=encoder)
        stages.run("hnsw_build", lambda: approx.index_embeddings(exact.doc_embeddings))  # the same vectors
        found = stages.run("hnsw_search", lambda: approx.search(q_ids, q_texts, DEPTH)).doc_idx
        out["hnsw"]["recall_at_100"] = recall(found, truth)
        out["hnsw"]["calibration"] = approx.hnsw_calibration  # the efSearch the default chose, its sample recall
        sweep = {}
        approx.hnsw_target_recall = None  # each efSearch as it is
        for ef in ef_sweep:
            approx.hnsw_ef_search = ef
            t0 = time.perf_counter()
            found = approx.search(q_ids, q_texts, DEPTH).doc_idx
            sweep[str(ef)] = {"recall_at_100": recall(found, truth), "time_s": time.perf_counter() - t0}
        out["hnsw"]["ef_sweep"] = sweep
    out["stages"] = stages.results
    return out


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean over queries of |found & truth| / |truth|: the dense retriever's own measure
    (``retrievers.dense.recall_against``, which its HNSW calibration uses)."""
    from retrievers.dense import recall_against

    return recall_against(found, truth)


def _tree_rss_kib(pid: int) -> tuple[int, int]:
    """(VmHWM of ``pid``, sum of VmRSS over ``pid`` and its descendants), in KiB."""
    hwm = _status_kib("VmHWM", pid)
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += _status_kib("VmRSS", p)
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except (OSError, KeyError):
            pass
    return hwm, total


def run_job(folder: Path, work: Path, store_template: Path | None = None) -> dict[str, Any]:
    """A real BM25 job on ``folder``, tracked into a new sqlite store under ``work`` (into a
    copy of ``store_template``, a migrated store, when given: ``--store-template``)."""
    if store_template is not None:
        work.mkdir(parents=True, exist_ok=True)
        shutil.copy(store_template, work / "mlflow.db")
    args = [sys.executable, "-m", "pipeline", "dataset=beir", f"dataset.path={folder}", "retriever=bm25",
            "k=10", "k_max=100", "tracking=local", f"paths.root={work}", f"hydra.run.dir={work / 'run'}"]
    peak = {"hwm": 0, "tree": 0}
    env = dict(os.environ)
    c0 = _cpu_s(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    def poll() -> None:
        while proc.poll() is None:
            try:
                hwm, tree = _tree_rss_kib(proc.pid)
            except (OSError, KeyError):
                break
            peak["hwm"], peak["tree"] = max(peak["hwm"], hwm), max(peak["tree"], tree)
            time.sleep(0.1)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    cpu = _cpu_s(resource.RUSAGE_CHILDREN) - c0
    watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"the job failed ({proc.returncode}):\n{stderr[-3000:]}")
    record = json.loads((work / "run" / "results" / "record.json").read_text())
    timings = {k: v for k, v in record["metrics"].items() if k.startswith("time_")}
    with sqlite3.connect(work / "mlflow.db") as db:
        row = db.execute("select value from metrics where key = 'time_track_s'").fetchone()
    if row:
        timings["time_track_s"] = float(row[0])
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": peak["hwm"] * 1024, "peak_tree_rss_bytes": peak["tree"] * 1024,
            "timings": timings, "ndcg_at_10": record["metrics"]["ndcg_at_10"],
            "store": "new" if store_template is None else "copy of a migrated store (--store-template)"}


def _worker(kind: str, argv: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, *argv]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {kind} failed ({proc.returncode}): {' '.join(cmd)}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_encode_rate(mean_words: float) -> dict[str, float]:
    """MiniLM (bundled) on the bundled sample's passages, CPU: documents/s at the benchmark's
    mean passage length, from words/s (transformer cost grows with tokens). The rate used is
    from CPU time divided by torch's threads (what the cores give when nothing else runs);
    the wall-clock rate is reported beside it."""
    code = (
        "import json,resource,time,sys; sys.path.insert(0, %r)\n"
        "import torch\nfrom pipeline.io.collection import load_sample\nfrom retrievers.dense import DenseRetriever\n"
        "texts = load_sample().doc_texts\nr = DenseRetriever(device='cpu')\nr.encode(texts[:8])\n"
        "cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])\n"
        "c = cpu(); t = time.perf_counter(); r.encode(texts); s = time.perf_counter() - t; c = cpu() - c\n"
        "print(json.dumps({'docs': len(texts), 'words': sum(len(x.split()) for x in texts), 'seconds': s,"
        " 'cpu_s': c, 'threads': torch.get_num_threads()}))"
    ) % str(ROOT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, check=True)
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    words_per_s = m["words"] / (m["cpu_s"] / m["threads"])
    return {"sample_docs": m["docs"], "sample_mean_words": m["words"] / m["docs"], "threads": m["threads"],
            "wall_words_per_s": m["words"] / m["seconds"], "words_per_s": words_per_s,
            "docs_per_s": words_per_s / mean_words,
            "source": "measured: all-MiniLM-L6-v2 on the bundled sample, CPU time / torch threads"}


# ----------------------------------------------------------------------------- reporting

STAGE_ORDER = ["load", "bm25_index", "bm25_search", "score", "write", "track",
               "dense_exact", "hnsw_build", "hnsw_search"]


def fit_alpha(ns: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(value) on log(n); None with fewer than two positive points."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(ns, values) if v and v > 0]
    if len(pts) < 2:
        return None
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    fits: dict[str, dict[str, float | None]] = {}
    for stage in STAGE_ORDER:
        have = [r for r in rows if stage in r["stages"]]
        ns = [r["n_docs"] for r in have]
        fits[stage] = {
            "time": fit_alpha(ns, [r["stages"][stage]["time_s"] for r in have]),
            "cpu": fit_alpha(ns, [r["stages"][stage].get("cpu_s", 0) for r in have]),
            "memory": fit_alpha(ns, [r["stages"][stage]["peak_rss_bytes"] for r in have]),
        }
    jobs = [r for r in rows if "job" in r]
    if jobs:
        fits["job"] = {"time": fit_alpha([r["n_docs"] for r in jobs], [r["job"]["wall_s"] for r in jobs]),
                       "cpu": fit_alpha([r["n_docs"] for r in jobs], [r["job"].get("cpu_s", 0) for r in jobs]),
                       "memory": fit_alpha([r["n_docs"] for r in jobs], [r["job"]["peak_rss_bytes"] for r in jobs])}
    big = rows[-1]
    worst = max(((s, k, a) for s, f in fits.items() for k, a in f.items()
                 if a is not None and s != "job" and k in ("time", "memory")),
                key=lambda t: t[2], default=None)
    goals: dict[str, Any] = {"sizes": [r["n_docs"] for r in rows]}
    if len(rows) >= 2 and worst is not None:
        goals["max_alpha"] = {"stage": worst[0], "of": worst[1], "alpha": worst[2], "goal": GOAL_ALPHA,
                              "met": worst[2] <= GOAL_ALPHA}
    if "job" in big:
        job = big["job"]
        peak = max(job["peak_rss_bytes"], job["peak_tree_rss_bytes"])
        goals["job"] = {"n_docs": big["n_docs"], "wall_s": job["wall_s"], "cpu_s": job.get("cpu_s"),
                        "peak_bytes": peak, "met": job["wall_s"] < GOAL_JOB_S and peak < GOAL_JOB_BYTES}
        goals["memory_vs_text"] = {"n_docs": big["n_docs"], "ratio": peak / big["manifest"]["text_bytes"],
                                   "goal": GOAL_TEXT_RATIO, "met": peak / big["manifest"]["text_bytes"] <= GOAL_TEXT_RATIO}
    return {"alpha": fits, "goals": goals}


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f}"


def table(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    sizes = [r["n_docs"] for r in rows]
    head = ("| stage | " + " | ".join(f"{n:,} docs: wall s / CPU s / peak MiB" for n in sizes)
            + " | alpha wall | alpha CPU | alpha memory |")
    lines = [head, "|" + "---|" * (len(sizes) + 4)]
    fmt = lambda a: "" if a is None else f"{a:.2f}"  # noqa: E731
    cpu = lambda st: f"{st['cpu_s']:.2f}" if "cpu_s" in st else "-"  # noqa: E731
    for stage in STAGE_ORDER:
        cells = []
        for r in rows:
            st = r["stages"].get(stage)
            cells.append(f"{st['time_s']:.2f} / {cpu(st)} / {_mib(st['peak_rss_bytes'])}" if st else "not run")
        fit = summary["alpha"][stage]
        lines.append(f"| {stage} | " + " | ".join(cells)
                     + f" | {fmt(fit['time'])} | {fmt(fit['cpu'])} | {fmt(fit['memory'])} |")
    if all("job" in r for r in rows):
        cells = [f"{r['job']['wall_s']:.2f} / {cpu(r['job'])} / "
                 f"{_mib(max(r['job']['peak_rss_bytes'], r['job']['peak_tree_rss_bytes']))}" for r in rows]
        fit = summary["alpha"]["job"]
        lines.append("| **BM25 job** (`python -m pipeline`, start to exit) | " + " | ".join(cells)
                     + f" | {fmt(fit['time'])} | {fmt(fit.get('cpu'))} | {fmt(fit['memory'])} |")
    lines.append("| corpus text MiB | " + " | ".join(_mib(r["manifest"]["text_bytes"]) for r in rows) + " | | | |")
    lines.append("| encoding (MiniLM, CPU), estimated s | "
                 + " | ".join(f"{r['encode_estimate_s']:,.0f}" for r in rows) + " | | | |")
    lines.append("| HNSW recall@100 (all queries) | " + " | ".join(
        f"{r['hnsw']['recall_at_100']:.5f}" if "recall_at_100" in r["hnsw"] else "not measured" for r in rows) + " | | | |")
    lines.append("| HNSW efSearch chosen by the calibration | " + " | ".join(
        f"{r['hnsw']['calibration']['ef_search']:,}" if r["hnsw"].get("calibration") else "-" for r in rows) + " | | | |")
    return "\n".join(lines)


def figure(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_c, ax_m) = plt.subplots(1, 3, figsize=(16, 5))
    series = STAGE_ORDER + (["job"] if any("job" in r for r in rows) else [])
    for stage in series:
        pts = [(r["n_docs"], r["job"] if stage == "job" else r["stages"][stage]) for r in rows
               if (stage == "job" and "job" in r) or stage in r["stages"]]
        if not pts:
            continue
        ns = [n for n, _ in pts]
        times = [s["wall_s"] if stage == "job" else s["time_s"] for _, s in pts]
        cpus = [s.get("cpu_s", np.nan) for _, s in pts]
        mem = [max(s["peak_rss_bytes"], s.get("peak_tree_rss_bytes", 0)) / 2**20 for _, s in pts]
        style = dict(marker="o", linewidth=2.5, color="black") if stage == "job" else dict(marker="o")
        label = "BM25 job (python -m pipeline)" if stage == "job" else stage
        ax_t.plot(ns, times, label=label, **style)
        ax_c.plot(ns, cpus, label=label, **style)
        ax_m.plot(ns, mem, label=label, **style)
    ns = np.array([r["n_docs"] for r in rows], float)
    for ax in (ax_t, ax_c):
        ax.plot(ns, ns / ns[0] * 0.5, linestyle=":", color="grey", label="slope 1 (reference)")
    ax_t.set(xscale="log", yscale="log", xlabel="documents", ylabel="wall time (s)", title="wall time per stage")
    ax_c.set(xscale="log", yscale="log", xlabel="documents", ylabel="CPU time (s)",
             title="CPU time per stage (user + system)")
    ax_m.set(xscale="log", yscale="log", xlabel="documents", ylabel="peak RSS (MiB)",
             title="peak memory of the stage (its process and children)")
    for ax in (ax_t, ax_c, ax_m):
        ax.grid(True, which="both", alpha=0.3)
    ax_c.legend(fontsize=7, ncol=2)
    fig.suptitle("benchmarks/scale.py: 1,000 queries, depth 100, random 384-d vectors for dense")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- main


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted(int(s.replace("_", "")) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes must be integers separated by commas, got {text!r}") from None
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"--sizes must be positive, got {text!r}")
    return sizes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=_sizes, default=_sizes("10000,100000,1000000"))
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="where scale.json, scale.md (and the figure) go")
    p.add_argument("--figure", type=Path, default=None, help="default: OUT/scale.png")
    p.add_argument("--data", type=Path, default=None,
                   help="keep the generated corpora here (reused when their manifest matches); default: a temp dir")
    p.add_argument("--hnsw-max-docs", type=int, default=100_000, help="build the HNSW graph up to this size")
    p.add_argument("--ef-sweep", default="128,256,512,1024", help="efSearch values whose recall is also reported")
    p.add_argument("--encode-rate", default="auto", help="MiniLM documents/s on CPU, or auto (measure it)")
    p.add_argument("--no-job", action="store_true", help="skip the real `python -m pipeline` job")
    p.add_argument("--store-template", type=Path, default=None, metavar="DB",
                   help="a migrated sqlite MLflow store to copy where the text worker and the job would create "
                        "theirs (the test suite's smoke run): the job's time then leaves out creating its store")
    p.add_argument("--report-only", nargs="+", type=Path, metavar="JSON",
                   help="no runs: combine the rows of these scale.json files (e.g. sizes run apart) into one report")
    p.add_argument("--worker", choices=["text", "dense"], help=argparse.SUPPRESS)
    p.add_argument("worker_args", nargs="*", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--worker"]:  # a stage process: print its JSON and leave
        print(json.dumps(_stage_process(argv[1], argv[2:])))
        return 0
    args = build_parser().parse_args(argv)
    problem = _check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        return _combine(args)
    tmp = Path(tempfile.mkdtemp(prefix="scale-"))
    rows: list[dict[str, Any]] = []
    encode: dict[str, Any] | None = None
    if args.rate_given is not None:
        encode = {"docs_per_s": args.rate_given, "source": "--encode-rate"}
    try:
        for n in args.sizes:
            row = _measure_size(args, n, args.data or tmp / "data", tmp)
            if encode is None:
                encode = measure_encode_rate(row["manifest"]["mean_words"])
            row["encode_estimate_s"] = n / encode["docs_per_s"]
            if not args.no_job:
                row["job"] = run_job(row.pop("folder"), tmp / f"job-{n}", args.store_template)
                print(f"  job          {row['job']['wall_s']:8.2f} s  peak "
                      f"{row['job']['peak_rss_bytes'] / 2**30:6.2f} GiB", file=sys.stderr, flush=True)
            row.pop("folder", None)
            rows.append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _report(args, rows, encode)


def _stage_process(kind: str, rest: list[str]) -> dict[str, Any]:
    """What a ``--worker`` process measures (``_worker`` starts it)."""
    if kind == "text":
        return worker_text(Path(rest[0]), Path(rest[1]), Path(rest[2]) if len(rest) > 2 else None)
    return worker_dense(int(rest[0]), int(rest[1]), int(rest[2]), rest[3] == "1",
                        [int(e) for e in rest[4].split(",") if e])


def _check(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, or None; sets ``args.ef_values`` and ``args.rate_given``."""
    if args.queries < 1:
        return f"--queries must be >= 1, got {args.queries}"
    if args.sizes[0] < 4 * args.queries:
        return f"--sizes: every size needs at least 4 documents per query ({4 * args.queries})"
    try:
        args.ef_values = [int(e) for e in args.ef_sweep.split(",") if e.strip()]
        args.rate_given = None if args.encode_rate == "auto" else float(args.encode_rate)
    except ValueError:
        return f"--ef-sweep and --encode-rate must be numbers, got {args.ef_sweep!r}, {args.encode_rate!r}"
    if args.store_template is not None:
        if not args.store_template.is_file():
            return f"--store-template: no such file {args.store_template}"
        args.store_template = args.store_template.resolve()
    return None


def _measure_size(args: argparse.Namespace, n: int, data_root: Path, tmp: Path) -> dict[str, Any]:
    """The generated corpus of ``n`` documents (made unless ``data_root`` has it) and its stages,
    each worker a fresh process; ``folder`` is the corpus's (for the job)."""
    print(f"{n:,} documents", file=sys.stderr, flush=True)
    folder = data_root / f"n{n}-q{args.queries}-s{args.seed}"
    manifest_path = folder / "manifest.json"
    t0 = time.perf_counter()
    if manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        gen_s = None
    else:
        manifest = generate(folder, n, args.queries, args.seed)
        gen_s = time.perf_counter() - t0
    row: dict[str, Any] = {"n_docs": n, "n_queries": args.queries, "manifest": manifest,
                           "generate_s": gen_s, "stages": {}}
    template = [str(args.store_template)] if args.store_template else []
    text = _worker("text", [str(folder), str(tmp / f"work-{n}"), *template])
    row["stages"].update(text.pop("stages"))
    row["bm25"] = text
    build = n <= args.hnsw_max_docs
    dense = _worker("dense", [str(n), str(args.queries), str(args.seed), "1" if build else "0",
                              ",".join(map(str, args.ef_values))])
    row["stages"].update(dense.pop("stages"))
    row["hnsw"] = dense["hnsw"]
    row["folder"] = folder
    return row


def _combine(args: argparse.Namespace) -> int:
    """One report from several runs' rows (a later file's row replaces an earlier one of the
    same size); a measured encoding rate wins over a given one and re-prices every row."""
    by_size: dict[int, dict[str, Any]] = {}
    encode: dict[str, Any] | None = None
    for path in args.report_only:
        try:
            previous = json.loads(path.read_text())
            rows = previous["rows"]
        except (OSError, ValueError, KeyError) as err:
            print(f"error: {path}: not a scale.json report ({err})", file=sys.stderr)
            return 2
        rate = previous.get("encode_rate")
        if rate and (encode is None or encode.get("source") == "--encode-rate"):
            encode = rate
        by_size.update({row["n_docs"]: row for row in rows})
    rows = [by_size[n] for n in sorted(by_size)]
    if encode:
        for row in rows:
            row["encode_estimate_s"] = row["n_docs"] / encode["docs_per_s"]
    return _report(args, rows, encode)


def _report(args: argparse.Namespace, rows: list[dict[str, Any]], encode: dict[str, Any] | None) -> int:
    summary = summarize(rows)
    report = {"rows": rows, "encode_rate": encode, **summary, "chunking": "not measured: the pipeline has no chunker yet",
              "machine": {"cpus": os.cpu_count(), "loadavg_at_end": os.getloadavg()}}
    (args.out / "scale.json").write_text(json.dumps(report, indent=1) + "\n")
    md = table(rows, summary)
    (args.out / "scale.md").write_text(md + "\n")
    figure(rows, args.figure or args.out / "scale.png")
    print(md)
    print(json.dumps(summary["goals"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
