"""Encoding a corpus on Ray: ``retriever.encode.engine=ray``.

The texts go to Ray Data in blocks; ``map_batches`` runs a pool of actors that each load the
configured model once (:class:`EncoderActor`) and encode batches on their CPU or GPU. The
embeddings come back to the job's process, which checks that every text has exactly one row
before the retriever caches them (under the same key as a local encoding: the engine is not
part of it, so a later local job reads them). A failure leaves nothing in the cache.

Ray itself (``pipeline.io.ray_runtime``, shared with the Ray launcher): a job that finds Ray
connected (a job of ``hydra/launcher=ray``) uses that cluster; otherwise ``ray_runtime`` starts
Ray on this machine (``address`` null) or joins a cluster (``auto``, ``HOST:6379``,
``ray://HOST:10001``), and shuts down or disconnects when the encoding is done. A cluster that
cannot be reached, or a worker that keeps dying after ``max_retries`` restarts, is
``RayFailed``: one line, exit status 3.

``ray`` is imported only by the functions that need it (the ``ray`` extra).
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.progress import Progress
from pipeline.io.ray_runtime import RayFailed, import_ray, quiet_token_notice, ray_runtime
from retrievers.dense.model import encode_texts, stderr_is_terminal

log = logging.getLogger(__name__)

#: ``RayFailed``, ``import_ray``, ``quiet_token_notice`` and ``ray_runtime`` are ``pipeline.io.ray_runtime``'s,
#: named here for code that imported them from this module.
__all__ = ["ENGINES", "MAX_BLOCK_ROWS", "EncodeSettings", "EncoderActor", "RayFailed", "Shards", "actor_count", "collect",
           "encode_on_ray", "from_blocks", "import_ray", "kept", "one_line", "quiet_token_notice", "ray_runtime", "run_encoding",
           "shard_blocks"]

ENGINES = ("local", "ray")
#: Rows per Ray Data block at most: blocks are what the actors take turns on.
MAX_BLOCK_ROWS = 8192


@dataclass(frozen=True)
class EncodeSettings:
    """``retriever.encode``: where the corpus is encoded (none of it is part of a cache key)."""

    engine: str = "local"  # local | ray
    address: str | None = None  # null: start Ray here; auto | HOST:6379 | ray://HOST:10001
    num_cpus: float = 1.0  # per actor
    num_gpus: float = 0.0  # per actor (a GPU each: 1; two actors a GPU: 0.5)
    batch_size: int | None = None  # null: the retriever's batch_size
    concurrency: int | None = None  # actors; null: as many as the cluster's CPUs (GPUs) allow
    max_retries: int = 3  # restarts of a dead actor (and retries of its batch) before the job fails
    device: str | None = None  # the actors' device; null: cuda with num_gpus > 0, else retriever.device
    #: texts per shard of the text cache, written as each is complete (either engine); not in
    #: the YAML (``+retriever.encode.shard_size=N`` sets it), so that a job's params stay as they were
    shard_size: int = 1024

    NUMBERS = (("num_cpus", float), ("num_gpus", float), ("batch_size", int), ("concurrency", int),
               ("max_retries", int), ("shard_size", int))

    @classmethod
    def of(cls, node: Mapping[str, Any] | None) -> EncodeSettings:
        """From the config node (a DictConfig or a dict); ValueError names a bad value."""
        values = dict(node or {})
        unknown = sorted(set(values) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown encode setting(s) {', '.join(unknown)}; "
                             f"known: {', '.join(cls.__dataclass_fields__)}")
        try:
            settings = cls(**{**values, **{k: _number(values[k], k, kind) for k, kind in cls.NUMBERS if k in values}})
        except TypeError as err:
            raise ValueError(str(err)) from None
        if settings.engine not in ENGINES:
            raise ValueError(f"unknown encode engine {settings.engine!r}; choose one of {', '.join(ENGINES)}")
        if settings.num_cpus < 0 or settings.num_gpus < 0 or settings.num_cpus + settings.num_gpus <= 0:
            raise ValueError(f"encode.num_cpus and num_gpus must be >= 0 and not both 0, got "
                             f"{settings.num_cpus} and {settings.num_gpus}")
        for name in ("batch_size", "concurrency"):
            if getattr(settings, name) is not None and int(getattr(settings, name)) < 1:
                raise ValueError(f"encode.{name} must be >= 1 or null, got {getattr(settings, name)}")
        if int(settings.shard_size) < 1:
            raise ValueError(f"encode.shard_size must be >= 1, got {settings.shard_size}")
        if int(settings.max_retries) < 0:
            raise ValueError(f"encode.max_retries must be >= 0, got {settings.max_retries}")
        return settings

    def actor_device(self, retriever_device: str) -> str:
        if self.device is not None:
            return self.device
        return "cuda" if self.num_gpus > 0 else retriever_device


def _number(value: Any, name: str, kind: type) -> Any:
    if value is None and name in ("batch_size", "concurrency"):
        return None
    try:
        if isinstance(value, bool) or (kind is int and float(value) != int(float(value))):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"encode.{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}") from None


class EncoderActor:
    """A Ray Data actor: loads the encoder once (``make_encoder()``), then embeds batches
    (unnormalized float32, as :func:`retrievers.dense.model.encode_texts`)."""

    def __init__(self, make_encoder: Callable[[], Any], batch_size: int):
        self.encoder = make_encoder()
        self.batch_size = batch_size

    def __call__(self, batch: dict[str, NDArray]) -> dict[str, NDArray]:
        texts = [str(t) for t in batch["text"]]
        emb = encode_texts(self.encoder, texts, self.batch_size)
        if emb.ndim != 2 or emb.shape[0] != len(texts):
            raise ValueError(f"encoder returned shape {emb.shape} for {len(texts)} texts")
        return {"row": np.asarray(batch["row"], np.int64), "embedding": emb}


def actor_count(ray: Any, settings: EncodeSettings, n_texts: int, batch_size: int) -> int:
    """``concurrency``, or as many actors as the cluster's CPUs (GPUs) hold, never more than
    there are batches."""
    if settings.concurrency is not None:
        wanted = int(settings.concurrency)
    else:
        resources = ray.cluster_resources()
        wanted = int(resources.get("GPU", 0) // settings.num_gpus) if settings.num_gpus > 0 \
            else int(resources.get("CPU", 1) // settings.num_cpus)
    return max(1, min(wanted, math.ceil(n_texts / batch_size)))


class Shards:
    """Which rows of the texts each shard holds (``shard_size`` consecutive rows), and how many
    of each are still to come: ``on_shard(start, embeddings)`` gets a shard once it is complete."""

    def __init__(self, n_texts: int, size: int, on_shard: Callable[[int, NDArray[np.float32]], None] | None):
        self.size, self.on_shard = max(1, size), on_shard
        self.left = np.full(math.ceil(n_texts / self.size), self.size, np.int64)
        if n_texts % self.size:
            self.left[-1] = n_texts % self.size

    def add(self, rows: NDArray[np.int64], out: NDArray[np.float32]) -> None:
        shards = rows // self.size
        np.subtract.at(self.left, shards, 1)
        if self.on_shard is None:
            return
        for shard in np.unique(shards[self.left[shards] == 0]).tolist():
            start = shard * self.size
            self.on_shard(start, out[start : start + self.size])


def collect(batches: Iterator[dict[str, NDArray]], n_texts: int, progress: Progress | None,
            shards: Shards | None = None) -> NDArray[np.float32]:
    """The rows of ``batches`` in text order, each complete shard handed on as it completes.
    RayFailed unless every text has exactly one row (a retried batch that came back twice,
    or a lost one, is never cached)."""
    out: NDArray[np.float32] | None = None
    seen = np.zeros(n_texts, np.int64)
    for batch in batches:
        rows, emb = np.asarray(batch["row"], np.int64), np.asarray(batch["embedding"], np.float32)
        if emb.ndim != 2 or emb.shape[0] != rows.shape[0] or rows.min(initial=0) < 0 or rows.max(initial=0) >= n_texts:
            raise RayFailed(f"encoding on Ray returned {emb.shape} embeddings for rows "
                            f"{rows.min(initial=0)}..{rows.max(initial=0)} of {n_texts} texts")
        if out is None:
            out = np.zeros((n_texts, emb.shape[1]), np.float32)
        elif emb.shape[1] != out.shape[1]:
            raise RayFailed(f"encoding on Ray returned embeddings of dim {emb.shape[1]} and {out.shape[1]}")
        out[rows] = emb
        np.add.at(seen, rows, 1)
        if (seen[rows] > 1).any():
            raise RayFailed(f"encoding on Ray returned several embeddings for {int((seen > 1).sum())} of "
                            f"{n_texts} texts")
        if shards is not None:
            shards.add(rows, out)
        if progress is not None:
            progress.update(len(rows))
    if out is None or (seen != 1).any():
        lost, twice = int((seen == 0).sum()), int((seen > 1).sum())
        raise RayFailed(f"encoding on Ray returned no embedding for {lost} and several for {twice} of "
                        f"{n_texts} texts")
    return out


def encode_on_ray(texts: Sequence[str], make_encoder: Callable[[], Any], settings: EncodeSettings,
                  batch_size: int, label: str = "encoding on Ray", *, progress: Progress | None = None,
                  on_shard: Callable[[int, NDArray[np.float32]], None] | None = None) -> NDArray[np.float32]:
    """``make_encoder()``'s embeddings of ``texts`` (float32, unnormalized, in order), computed
    by a pool of Ray Data actors. ``make_encoder`` is pickled to every actor. ``progress``
    counts the texts as they come back; ``on_shard(start, embeddings)`` gets each shard of
    ``settings.shard_size`` texts (rows ``start`` on) as soon as all its rows are back, so
    that the caller caches it before the rest is done."""
    if not texts:
        return np.zeros((0, 0), np.float32)
    with ray_runtime(settings.address, "retriever.encode.engine=ray", include_dashboard=False,
                     log_to_driver=True) as ray:
        if progress is not None:
            return run_encoding(ray, list(texts), make_encoder, settings, int(settings.batch_size or batch_size),
                                label, progress, on_shard)
        with Progress(label, len(texts), "passages", logger=log, terminal=False) as own:
            return run_encoding(ray, list(texts), make_encoder, settings, int(settings.batch_size or batch_size),
                                label, own, on_shard)


def shard_blocks(pa: Any, texts: list[str], shard_size: int, block: int) -> list[Any]:
    """Arrow blocks of (row, text): each shard's rows longest first (as sentence-transformers
    orders one call's texts, so that a batch pads to texts of about its own length), cut into
    blocks of at most ``block`` rows that never span two shards, shard after shard: the first
    shards complete (and are cached) first."""
    blocks = []
    for first in range(0, len(texts), shard_size):
        shard = texts[first : first + shard_size]
        order = first + np.argsort([-len(t) for t in shard], kind="stable").astype(np.int64)
        table = pa.table({"row": order, "text": pa.array([texts[i] for i in order], pa.string())})
        blocks += [table.slice(start, block) for start in range(0, len(shard), block)]
    return blocks


def run_encoding(ray: Any, texts: list[str], make_encoder: Callable[[], Any], settings: EncodeSettings,
                 batch_size: int, label: str, progress: Progress | None = None,
                 on_shard: Callable[[int, NDArray[np.float32]], None] | None = None) -> NDArray[np.float32]:
    """The Ray Data pipeline of :func:`encode_on_ray` on a connected ``ray``."""
    import pyarrow as pa
    from ray.data import DataContext

    context = DataContext.get_current()
    context.enable_progress_bars = stderr_is_terminal()
    actors = actor_count(ray, settings, len(texts), batch_size)
    block = max(batch_size, min(MAX_BLOCK_ROWS, math.ceil(len(texts) / (4 * actors))))
    blocks = shard_blocks(pa, texts, int(settings.shard_size), block)
    log.info("%s: %d texts in %d blocks, %d actor(s) (num_cpus %g, num_gpus %g), batches of %d", label, len(texts),
             len(blocks), actors, settings.num_cpus, settings.num_gpus, batch_size)
    retries = int(settings.max_retries)
    with warnings.catch_warnings():
        # Ray Data restarts a dead actor forever unless told: a model that kills its worker on
        # every batch would never end. Ray 2.60 deprecates passing these as remote arguments.
        warnings.simplefilter("ignore", DeprecationWarning)
        dataset = from_blocks(ray, blocks).map_batches(
            EncoderActor, fn_constructor_kwargs={"make_encoder": make_encoder, "batch_size": batch_size},
            batch_size=batch_size, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=actors),
            num_cpus=settings.num_cpus or None, num_gpus=settings.num_gpus or None, max_restarts=retries,
            max_task_retries=retries)
    try:
        return collect(dataset.iter_batches(batch_size=None, batch_format="numpy"), len(texts), progress,
                       Shards(len(texts), int(settings.shard_size), on_shard))
    except RayFailed as err:
        raise RayFailed(f"{err}; {kept(progress)}") from None
    except (ray.exceptions.RayError, ray.exceptions.RaySystemError) as err:
        raise RayFailed(f"encoding on Ray failed after {retries} retries: {one_line(err)}; {kept(progress)}") \
            from None
    except Exception as err:  # Ray Data wraps the actors' errors in its own exceptions
        raise RayFailed(f"encoding on Ray failed: {one_line(err)}; {kept(progress)}") from None


def from_blocks(ray: Any, blocks: list[Any]) -> Any:
    """A Ray dataset of ``blocks`` as they are. ``ray.data.from_blocks`` reads each block's
    row count and schema here, in the driver; ``from_arrow`` sends every block to a Ray task
    for them, and each worker that runs one imports Ray Data first (a second or more of CPU
    each, for numbers this process has). ``from_arrow`` where Ray lacks ``from_blocks``."""
    make = getattr(ray.data, "from_blocks", None) or ray.data.from_arrow
    return make(blocks)


def kept(progress: Progress | None) -> str:
    """What a failed encoding left in the cache, as its progress's note says (or: nothing)."""
    note = progress.note() if progress is not None and callable(progress.note) else ""
    if not note or note.startswith("0 of them"):
        return "nothing was cached"
    return note


def one_line(err: BaseException) -> str:
    """The first line that says something about ``err`` (Ray's messages start with a traceback)."""
    cause = getattr(err, "cause", None) or err.__cause__
    if isinstance(cause, InputError):
        return str(cause).removeprefix("error: ")
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Traceback", "File ", "^"))]
    return f"{type(err).__name__}: {(useful or lines or [''])[0]}"[:300]

