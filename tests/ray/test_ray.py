"""Ray: sweeps through ``hydra/launcher=ray`` (hydra_plugins/pipeline_ray_launcher) and corpus
encoding on Ray Data (``retriever.encode.engine=ray``, retrievers/dense/ray_encode.py).

One local Ray of 2 CPUs (``ray_cluster``, the session's: tests/e2e_servers.py) serves the tests
that need a running cluster: the in-process encodings use it as this process's Ray, the Ray
sweep joins it by its address.
The SIGINT test lets the command start (and stop) its own Ray. Every Ray process started
here carries a marker in its environment; each test that starts Ray checks that none is left.
"""

from __future__ import annotations

import json
import hashlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from commands import job_in_process, run_command
from e2e_servers import RAY_MARKER as MARKER
from e2e_servers import RAY_WORKER_ENV, assert_nothing_left
from sample_embeddings import copy_sample_embeddings

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "pipeline" / "sample"
#: Two of the golden sweep's four jobs (tests/golden/golden.py SWEEP: reorder none and
#: lost_in_the_middle at k = 5): their recorded numbers are the basic launcher's, which a Ray
#: sweep must reproduce (both reorders; the k = 3 jobs add a wave of jobs, not a check).
GOLDEN_SWEEP = ("reorder=none,lost_in_the_middle", "k=5", "objective=context_utility_at_10")
GOLDEN_JOBS = ("none k5 bm25", "litm k5 bm25")  # their run names (words in any order: a sweep names
#: a job by the settings it varies first)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")]
import ray  # noqa: E402  (the ray extra is part of the test extra: missing, these tests fail)


# ----------------------------------------------------------------------------- helpers


def env(marker: str | None = None, **extra: str) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RAY_ADDRESS", MARKER))}
    full.update(MLFLOW_DISABLE_TELEMETRY="true", PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TQDM_DISABLE="1",
                OMP_NUM_THREADS="1", **extra)
    if marker:
        full[MARKER] = marker
    return full


def pipeline(*args: str, marker: str | None = None, timeout: float = 600, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=ROOT, env=env(marker, **extra),
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error")]


def sample_texts() -> tuple[list[str], list[str]]:
    ids, texts = [], []
    for line in (SAMPLE / "corpus.jsonl").read_text().splitlines():
        doc = json.loads(line)
        ids.append(doc["_id"])
        texts.append(f"{doc.get('title', '')} {doc['text']}".strip())
    return ids, texts


def cache_entries(cache: Path) -> list[Path]:
    """Committed cache entries (their JSON is written last) and embedding arrays."""
    return sorted(p for p in cache.rglob("*") if p.suffix in (".json", ".npy")) if cache.exists() else []


def runs_of(store: Path) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    return [run for exp in client.search_experiments() for run in client.search_runs([exp.experiment_id])]


class HashEncoder:
    """A stand-in for the model in the tests whose claim is Ray's, not the model's (a worker
    that dies and is restarted, shards kept after a failure): each text's vector is drawn from
    a generator seeded by the text's digest, so a row out of place, lost or encoded twice
    shows, as with the model; numpy only, so that an actor starts without loading torch and
    MiniLM (seconds each). The model on Ray: the first encoding test."""

    def cache_key(self) -> str:
        return "hash-384"

    def encode(self, sentences, batch_size=64, **kwargs):
        seeds = [int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "little") for s in sentences]
        return np.stack([np.random.default_rng(seed).standard_normal(384) for seed in seeds]).astype(np.float32)


class DyingEncoder:
    """HashEncoder, whose actor process exits in the middle of its first batch (only the
    first time, with ``always=False``: a flag file says it died once)."""

    def __init__(self, flag: str, always: bool):
        self.flag, self.always, self.model = flag, always, HashEncoder()

    def cache_key(self) -> str:
        return "dying-hash"

    def encode(self, sentences, batch_size=64, **kwargs):
        if self.always or not os.path.exists(self.flag):
            Path(self.flag).touch()
            os._exit(1)  # the worker dies mid-encoding, as after an out-of-memory kill
        return self.model.encode(sentences, batch_size=batch_size, **kwargs)


# ----------------------------------------------------------------------------- the shared Ray
# ``ray_cluster`` is the session's (tests/e2e_servers.py): a local Ray of 2 CPUs driven by this
# process, its processes marked, shut down after this file's last test that uses it with none
# left. DyingEncoder and its kin travel to its actors by value:
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


# ----------------------------------------------------------------------------- sweeps


def store_at(root: Path, migrated: Path) -> Path:
    """``root/mlflow.db`` (the store of ``paths.root=root``), a copy of ``migrated`` (the
    session's migrated store, tests/conftest.py: a sweep that creates its store spends seconds)."""
    root.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(migrated, root / "mlflow.db"))


def test_a_ray_sweep_logs_each_job_once_under_one_parent_with_the_basic_launchers_numbers(ray_cluster, tmp_path,
                                                                                          migrated_store):
    """Two jobs of the golden sweep (tests/golden: as the basic launcher ran them), on Ray: the
    same numbers, each job logged once under one parent.

    Each job asks for both CPUs of the cluster (``remote.num_cpus=2``), so they run one after
    the other, and Ray gives the second the first's worker: a job worker imports the pipeline
    and MLflow (~4.5 s of CPU) once, and the check covers a worker that runs a second job
    (what every sweep larger than its cluster does) logging it under the same parent, not
    the first job's run. Processes writing one sqlite store at once: tests/pipeline/
    test_app_sweeps.py (joblib, n_jobs=2)."""
    sweep = [*GOLDEN_SWEEP, "hydra.sweep.dir=${paths.root}/sweep", "hydra.launcher.ray.remote.num_cpus=2"]
    store_at(tmp_path / "ray", migrated_store)
    on_ray = pipeline("-m", "hydra/launcher=ray", f"hydra.launcher.ray.init.address={ray_cluster}", *sweep,
                      f"paths.root={tmp_path / 'ray'}")
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]

    runs = runs_of(tmp_path / "ray" / "mlflow.db")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 2 and {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    keys = [r.data.tags["job_key"] for r in children]
    records = [json.loads(p.read_text())["job_key"] for p in (tmp_path / "ray" / "sweep").glob("*/results/record.json")]
    assert sorted(keys) == sorted(records) and len(set(keys)) == 2  # each job exactly once
    assert all(r.info.status == "FINISHED" for r in children)

    # The basic launcher's numbers: the golden sweep's (every metric but the timings, to 1e-12).
    golden = json.loads((ROOT / "tests" / "golden" / "expected" / "numbers.json").read_text())
    def job(run_name: str) -> str:
        return " ".join(sorted(run_name.split()))

    expected = {job(golden[f"sweep_{i}"]["record"]["run_name"]): golden[f"sweep_{i}"]["metrics.json"]["metrics"]
                for i in range(4) if golden[f"sweep_{i}"]["record"]["run_name"] in GOLDEN_JOBS}
    assert len(expected) == 2
    got = {}
    for results in (tmp_path / "ray" / "sweep").glob("*/results"):
        got[job(json.loads((results / "record.json").read_text())["run_name"])] = json.loads(
            (results / "metrics.json").read_text())["metrics"]
    assert sorted(got) == sorted(expected) and len(got) == 2
    for job, metrics in expected.items():
        numbers = sorted(metrics)
        assert len(numbers) > 40 and set(numbers) <= set(got[job]), job
        np.testing.assert_allclose([got[job][k] for k in numbers], [metrics[k] for k in numbers], rtol=1e-12,
                                   err_msg=job)
    assert "summary" in on_ray.stdout and "best" in on_ray.stdout  # the sweep's end, in the launching process


def test_sigint_mid_sweep_then_sync_logs_each_finished_job_once_and_leaves_no_ray_process(tmp_path, migrated_store):
    marker = f"ray-sigint-{uuid.uuid4().hex}"
    sweep_dir = tmp_path / "sweep"
    store_at(tmp_path, migrated_store)
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "-m", "hydra/launcher=ray", "k=1,2,3,4,5,6,7,8",
                             "hydra.launcher.ray.init.num_cpus=1", f"paths.root={tmp_path}",
                             f"hydra.sweep.dir={sweep_dir}"], cwd=ROOT, env=env(marker, **RAY_WORKER_ENV),
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not list(sweep_dir.glob("*/results/mlflow_run.json")):  # a job logged itself
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no job finished within 300 s"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert_nothing_left(marker, "an interrupted Ray sweep")

    finished = {json.loads(p.read_text())["job_key"] for p in sweep_dir.glob("*/results/record.json")}
    assert 1 <= len(finished) < 8, "the interrupt came after the last job or before the first"
    # The sync is the command's code, in this process (tests/commands.py; tests/test_processes.py
    # runs it as a process).
    synced = run_command("sync", str(sweep_dir), env=env())
    assert synced.returncode == 0, synced.stderr[-3000:]
    runs = runs_of(tmp_path / "mlflow.db")
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    keys = [r.data.tags["job_key"] for r in children]
    assert sorted(keys) == sorted(finished), "each finished job exactly once, nothing else"
    assert all(r.info.status == "FINISHED" for r in children)


# ----------------------------------------------------------------------------- encoding


@pytest.fixture(scope="module")
def local_embeddings(sample_embeddings, tmp_path_factory) -> np.ndarray:
    """The sample's documents encoded by the model in-process, without Ray: what the model's
    encoding on Ray must equal. Read from the run's shared cache of the sample
    (tests/sample_embeddings.py), which ``DenseRetriever`` wrote encoding them in-process."""
    from retrievers.dense import DenseRetriever

    ids, texts = sample_texts()
    dense = DenseRetriever(cache_dir=copy_sample_embeddings(sample_embeddings, tmp_path_factory.mktemp("local")),
                           show_progress_bar=False)
    dense.index(ids, texts)
    assert dense.last_cache_hits["docs"] is True  # the shared cache's in-process encoding, not this one's
    return dense.doc_embeddings


@pytest.fixture(scope="module")
def hash_embeddings() -> np.ndarray:
    """The sample's documents encoded by HashEncoder in this process: what the encodings of
    the worker-death tests must equal."""
    from retrievers.dense import DenseRetriever

    return DenseRetriever(cache_dir=None, encoder=HashEncoder()).encode(sample_texts()[1])


def test_encoding_on_ray_equals_in_process_and_a_later_local_job_reads_its_cache(ray_cluster, tmp_path,
                                                                                   local_embeddings, sample_embeddings):
    """One job encodes the sample on Ray, a local retriever then reads its cache (the engine is
    not part of the key): the embeddings equal an in-process encoding, and the job's nDCG@10
    equals the golden dense job's (tests/golden, recorded with in-process encoding). The
    queries, which a job always encodes in its own process, come from the run's shared cache
    (in-process encoding, tests/sample_embeddings.py): the job's cache starts with them only.
    One actor loads the model (torch and MiniLM: seconds of CPU for each actor); a pool of two
    actors runs in the dying worker's test below (HashEncoder)."""
    from retrievers.dense import DenseRetriever

    ids, texts = sample_texts()
    cache = copy_sample_embeddings(sample_embeddings, tmp_path / "cache", roles=("queries",))
    assert [p.suffix for p in cache_entries(cache)] == [".json", ".npy"]  # one entry: the documents are Ray's to encode

    def ndcg(engine: str) -> float:  # a job in this process (tests/commands.py), without its figures
        return job_in_process("retriever=dense", f"retriever.encode.engine={engine}", "retriever.encode.concurrency=1",
                              "retriever.encode.batch_size=16", f"paths.root={tmp_path / engine}", f"cache_dir={cache}",
                              "tracking=none").objective

    golden = json.loads((ROOT / "tests" / "golden" / "expected" / "numbers.json").read_text())
    on_ray_ndcg = ndcg("ray")
    assert on_ray_ndcg == pytest.approx(golden["dense"]["metrics.json"]["metrics"]["ndcg_at_10"], abs=1e-9)

    again = DenseRetriever(cache_dir=cache)  # engine local: a cache hit on what Ray wrote
    again.index(ids, texts)
    assert again.last_cache_hits["docs"] is True
    local = local_embeddings
    assert again.doc_embeddings.shape == local.shape == (171, 384)
    assert float(np.abs(again.doc_embeddings - local).max()) <= 1e-5
    assert ndcg("local") == pytest.approx(on_ray_ndcg, abs=1e-12)  # the Ray job's caches, read by a local job


def test_an_encoding_worker_that_dies_once_is_retried(ray_cluster, tmp_path, hash_embeddings):
    """A pool of two actors, one of which dies in its first batch (both, if the second starts
    one before the first has died): the actor is restarted, its batch retried, and every row
    comes back once, in the texts' order, whichever actor encoded it."""
    from retrievers.dense import DenseRetriever

    ids, texts = sample_texts()
    flag = tmp_path / "died"
    dense = DenseRetriever(cache_dir=tmp_path / "cache", encoder=DyingEncoder(str(flag), always=False),
                           encode={"engine": "ray", "concurrency": 2, "batch_size": 32, "max_retries": 2})
    dense.index(ids, texts)
    assert flag.exists(), "the worker did not die: the test tests nothing"
    local = hash_embeddings
    assert dense.doc_embeddings.shape == local.shape == (171, 384)
    assert float(np.abs(dense.doc_embeddings - local).max()) <= 1e-5


def test_an_encoding_worker_that_keeps_dying_fails_in_one_line_and_caches_nothing(ray_cluster, tmp_path):
    from retrievers.dense import DenseRetriever, RayFailed

    ids, texts = sample_texts()
    dense = DenseRetriever(cache_dir=tmp_path / "cache", encoder=DyingEncoder(str(tmp_path / "died"), always=True),
                           encode={"engine": "ray", "concurrency": 1, "max_retries": 1})
    with pytest.raises(RayFailed) as failed:
        dense.index(ids, texts)
    assert failed.value.exit_code == 3 and "\n" not in str(failed.value) and "nothing was cached" in str(failed.value)
    assert cache_entries(tmp_path / "cache") == []


class PoisonedEncoder(DyingEncoder):
    """HashEncoder, whose actor dies on any batch holding one of ``poison`` (every time)."""

    def __init__(self, poison: list[str]):
        super().__init__("", always=False)
        self.poison = set(poison)

    def cache_key(self) -> str:
        return "poisoned-hash"

    def encode(self, sentences, batch_size=64, **kwargs):
        if self.poison & set(sentences):
            os._exit(1)
        return self.model.encode(sentences, batch_size=batch_size, **kwargs)


class Counting(PoisonedEncoder):
    """The same model (the same cache key), in this process, counting the texts it encodes."""

    def __init__(self):
        super().__init__([])
        self.n = 0

    def encode(self, sentences, batch_size=64, **kwargs):
        self.n += len(sentences)
        return super().encode(sentences, batch_size, **kwargs)


def test_a_failed_ray_encoding_keeps_its_complete_shards_and_a_local_rerun_encodes_the_rest(ray_cluster, tmp_path,
                                                                                           hash_embeddings):
    from retrievers.dense import DenseRetriever, RayFailed

    ids, texts = sample_texts()
    cache = tmp_path / "cache"
    dense = DenseRetriever(cache_dir=cache, encoder=PoisonedEncoder(texts[-5:]),
                           encode={"engine": "ray", "concurrency": 1, "batch_size": 16, "max_retries": 0,
                                   "shard_size": 32})
    with pytest.raises(RayFailed) as failed:
        dense.index(ids, texts)
    shards = sorted((cache / "texts").glob("*/*.json"))
    kept = sum(json.loads(p.read_text())["n"] for p in shards)
    assert 0 < kept <= 160 and kept % 32 == 0, "no shard was kept: the test tests nothing"
    assert f"{kept} of them cached in {len(shards)} shard(s)" in str(failed.value)
    counting = Counting()
    rerun = DenseRetriever(cache_dir=cache, encoder=counting)  # engine local: the same shards
    rerun.index(ids, texts)
    assert counting.n == rerun.text_cache_stats["docs"]["encoded"] == 171 - kept
    local = hash_embeddings
    assert rerun.doc_embeddings.shape == local.shape
    assert float(np.abs(rerun.doc_embeddings - local).max()) <= 1e-5


# ----------------------------------------------------------------------------- bad input


def test_an_unreachable_ray_address_is_one_line_exit_3_and_nothing_cached(tmp_path):
    # The job in this process (tests/commands.py): its error, and the line and status that
    # `python -m pipeline` gives for it (pipeline.errors.exit_line); the sweep below is a
    # process, its exit status 3 and its one line as `python -m pipeline` prints them.
    from pipeline.errors import exit_line
    from retrievers.dense import RayFailed

    assert not ray.is_initialized(), "this process is connected to Ray: the job would use it, not the address"
    address = f"ray://127.0.0.1:{closed_port()}"
    with pytest.raises(RayFailed) as failed:
        job_in_process("retriever=dense", "retriever.encode.engine=ray", f"retriever.encode.address={address}",
                       f"paths.root={tmp_path}", "tracking=none")
    line, status = exit_line(failed.value)
    assert status == 3 and "\n" not in line and line.startswith("error: "), line
    assert "cannot reach the Ray cluster" in line and address in line, line
    assert cache_entries(tmp_path / "cache") == []

    swept = pipeline("-m", "hydra/launcher=ray", f"hydra.launcher.ray.init.address=127.0.0.1:{closed_port()}",
                     "k=3,5", f"paths.root={tmp_path}", "tracking=none", timeout=300)
    assert swept.returncode == 3, swept.stderr[-3000:]
    assert len(error_lines(swept.stderr)) == 1 and "Traceback" not in swept.stderr, swept.stderr


def test_without_the_ray_extra_each_entry_names_it_in_one_line_exit_2(tmp_path):
    hidden = tmp_path / "hidden"  # a `ray` package that cannot be imported, first on the path
    (hidden / "ray").mkdir(parents=True)
    (hidden / "ray" / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    path = os.pathsep.join(p for p in (str(hidden), os.environ.get("PYTHONPATH", "")) if p)
    sweep = pipeline("-m", "hydra/launcher=ray", "k=3,5", f"paths.root={tmp_path / 'out'}", PYTHONPATH=path,
                     timeout=300)
    assert sweep.returncode == 2, sweep.stderr[-3000:]
    assert sweep.stderr.strip().splitlines() == [sweep.stderr.strip()] and '.[ray]' in sweep.stderr
    assert not (tmp_path / "out").exists()  # refused before the sweep started: no parent run, no folder

    job = pipeline("retriever=dense", "retriever.encode.engine=ray", f"paths.root={tmp_path / 'job'}",
                   "tracking=none", PYTHONPATH=path, timeout=300)
    assert job.returncode == 2, job.stderr[-3000:]
    lines = error_lines(job.stderr)
    assert len(lines) == 1 and '.[ray]' in lines[0] and "Traceback" not in job.stderr, job.stderr


# ----------------------------------------------------------------------------- settings and progress


def test_encode_settings_refuse_bad_values():
    from retrievers.dense import EncodeSettings

    assert EncodeSettings.of(None).engine == "local"
    assert EncodeSettings.of({"engine": "ray", "num_gpus": 1}).actor_device("cpu") == "cuda"
    for bad in ({"engine": "spark"}, {"concurrency": 0}, {"batch_size": "many"}, {"num_cpus": 0, "num_gpus": 0},
                {"max_retries": -1}, {"engine": "ray", "workers": 2}):
        with pytest.raises(ValueError):
            EncodeSettings.of(bad)


def test_each_shard_is_handed_on_once_complete_and_counted_by_the_progress(caplog):
    # Ray Data returns batches in any order: a shard goes to the cache as soon as all its rows
    # are back, once; the progress counts every row (a line per tenth in a log).
    from pipeline.io.progress import Progress
    from retrievers.dense.ray_encode import Shards, collect, shard_blocks

    import pyarrow as pa

    texts = [f"text {'x' * (i % 7)} {i}" for i in range(171)]
    blocks = shard_blocks(pa, texts, 50, 20)  # shards of 50, blocks within a shard, longest first
    assert [len(b) for b in blocks] == [20, 20, 10] * 3 + [20, 1]
    assert sorted(r for b in blocks[:3] for r in b["row"].to_pylist()) == list(range(50))
    batches = [{"row": np.asarray(b["row"].to_pylist(), np.int64),
                "embedding": np.asarray([[float(r), 1.0] for r in b["row"].to_pylist()], np.float32)}
               for b in blocks]
    order = [3, 0, 4, 1, 9, 2, 5, 10, 6, 7, 8]  # out of order: shard 0 completes with the 6th batch, shard 3 before shard 2
    handed: list[tuple[int, list[float]]] = []
    progress = Progress("encoding on Ray", 171, "passages", terminal=False, quiet_s=0)
    with caplog.at_level(logging.INFO, logger="pipeline.io.progress"):
        out = collect(iter([batches[i] for i in order]), 171, progress,
                      Shards(171, 50, lambda start, emb: handed.append((start, emb[:, 0].tolist()))))
    assert [start for start, _ in handed] == [0, 50, 150, 100]
    assert all(rows == [float(start + i) for i in range(len(rows))] for start, rows in handed)
    assert [len(rows) for _, rows in handed] == [50, 50, 21, 50]
    np.testing.assert_array_equal(out[:, 0], np.arange(171, dtype=np.float32))
    percents = [int(r.getMessage().split(": ")[1].split("%")[0]) for r in caplog.records]
    assert progress.done == 171 and percents == sorted(percents) and len(percents) >= 5


def test_the_runtime_we_start_leaves_out_rays_token_notice_only(monkeypatch):
    """Issue 37: "Token authentication is enabled ..." on every sweep. ``ray.init`` here logs
    Ray's two messages through Ray's own logger (as Ray 2.60 does when it starts a local
    runtime); the notice is left out, the warning that authentication is off is not, and the
    filter is gone after the start."""
    from pipeline.io import ray_runtime

    logger = logging.getLogger(ray_runtime.TOKEN_LOGGER)
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    notice = (f"{ray_runtime.TOKEN_NOTICE}. Set RAY_AUTH_MODE=disabled to opt out. For more information, see "
              "https://docs.ray.io/en/latest/ray-security/token-auth.html")
    off = "Token authentication is disabled for this Ray cluster. Anyone with network access ..."

    class FakeRay:
        started = False

        def is_initialized(self) -> bool:
            return self.started

        def init(self, address=None, **_):
            logger.warning(notice)
            logger.warning(off)
            self.started = True

        def shutdown(self) -> None:
            self.started = False

    monkeypatch.setattr(ray_runtime, "import_ray", lambda what: FakeRay())
    logger.addHandler(handler)
    try:
        with ray_runtime.ray_runtime(None, "test") as fake:
            assert fake.started
        logger.warning(notice)  # outside our start: Ray's logger is as it was
    finally:
        logger.removeHandler(handler)
    assert seen == [off, notice]
