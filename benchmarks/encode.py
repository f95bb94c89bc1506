"""Encoding throughput (passages/s) of the dense backends: torch, onnx and onnx-int8.

    python benchmarks/encode.py [--corpus ../shared/data/scifact] [--n 500] [--repeat 3] [--batch-size 64]

The first ``--n`` passages of the corpus (default: SciFact's first 500 abstracts when
``../shared/data/scifact`` exists, else the bundled sample's 171 passages) are encoded by the
bundled all-MiniLM-L6-v2 through each backend, in one process, alternating the backends and
rotating their order every round; each time is one ``DenseRetriever.encode`` call (no
embedding cache), after one warm-up batch per backend. Reported: median passages/s, the
speed-up over torch, and how close each backend's embeddings are to torch's (mean and
minimum cosine). The ONNX exports are built once into ``--cache-dir`` (default
``outputs/cache``) and read from there afterwards.

Then a chunk-size sweep on ``sample_long`` (sizes 256, 128, 256 with ``--sweep-backend``,
default onnx-int8, in a fresh cache) shows what the per-text cache encodes at each step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks/pipeline.py would shadow the package

import numpy as np  # noqa: E402

from retrievers.dense import BACKENDS, DenseRetriever  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"


def load_texts(corpus: str | None, n: int) -> tuple[str, list[str]]:
    if corpus is None and (SCIFACT / "corpus.jsonl.gz").exists():
        corpus = str(SCIFACT)
    if corpus is None:
        from pipeline.io.collection import load_sample

        return "sample", load_sample().doc_texts[:n]
    from pipeline.io.collection import load_beir

    return Path(corpus).name, load_beir(Path(corpus)).doc_texts[:n]


def throughput(texts: list[str], repeat: int, batch_size: int, cache_dir: str) -> None:
    retrievers = {b: DenseRetriever(backend=b, batch_size=batch_size, cache_dir=cache_dir) for b in BACKENDS}
    for r in retrievers.values():  # load the model, build or read the export, warm up
        r.encode(texts[:batch_size])
    times: dict[str, list[float]] = {b: [] for b in BACKENDS}
    embeddings: dict[str, np.ndarray] = {}
    load = [os.getloadavg()[0]]
    for round_ in range(repeat):
        order = BACKENDS[round_ % 3:] + BACKENDS[: round_ % 3]
        for backend in order:
            start = time.perf_counter()
            embeddings[backend] = retrievers[backend].encode(texts)
            times[backend].append(time.perf_counter() - start)
        load.append(os.getloadavg()[0])
    import torch

    print(f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs, "
          f"1-min load average {min(load):.1f}-{max(load):.1f} during the runs")
    torch_rate = len(texts) / statistics.median(times["torch"])
    print("| backend | passages/s (median) | seconds per run | vs torch | cosine to torch (mean / min) |")
    print("|---|---:|---|---:|---|")
    for backend in BACKENDS:
        rate = len(texts) / statistics.median(times[backend])
        cos = np.sum(embeddings[backend] * embeddings["torch"], axis=1)
        runs = ", ".join(f"{t:.1f}" for t in times[backend])
        print(f"| {backend} | {rate:.1f} | {runs} | {rate / torch_rate:.2f}x | {cos.mean():.4f} / {cos.min():.4f} |")


def sweep(backend: str, batch_size: int, export_cache: str) -> None:
    from pipeline.chunkers import TokenChunker, chunk_documents, load_sample_long

    docs = load_sample_long()
    with tempfile.TemporaryDirectory() as tmp:
        # the exports come from export_cache (a symlink), the embeddings start empty
        os.symlink(Path(export_cache).resolve() / "files", Path(tmp) / "files")
        print(f"\nchunk-size sweep on sample_long ({backend}, empty embedding cache):")
        print("| step | chunk size | chunks | from the text cache | encoded | seconds |")
        print("|---:|---:|---:|---:|---:|---:|")
        for step, size in enumerate((256, 128, 256), 1):
            chunks, _ = chunk_documents(TokenChunker(size=size), docs.doc_ids, docs.doc_texts, None)
            r = DenseRetriever(backend=backend, batch_size=batch_size, cache_dir=tmp)
            start = time.perf_counter()
            r.index(chunks.ids, chunks.texts)
            took = time.perf_counter() - start
            stats = r.text_cache_stats.get("docs")
            hit, new = (chunks.n_chunks, 0) if stats is None else (stats["from_text_cache"], stats["encoded"])
            print(f"| {step} | {size} | {chunks.n_chunks} | {hit} | {new} | {took:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=None, help="a BEIR folder (default: ../shared/data/scifact, else the sample)")
    ap.add_argument("--n", type=int, default=500, help="the first N passages (default 500)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--cache-dir", default=str(ROOT / "outputs" / "cache"), help="where the ONNX exports are kept")
    ap.add_argument("--sweep-backend", default="onnx-int8", choices=BACKENDS)
    ap.add_argument("--no-sweep", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    name, texts = load_texts(args.corpus, args.n)
    print(f"{len(texts)} passages of {name}, batch size {args.batch_size}, {args.repeat} rounds")
    throughput(texts, args.repeat, args.batch_size, args.cache_dir)
    if not args.no_sweep:
        sweep(args.sweep_backend, args.batch_size, args.cache_dir)


if __name__ == "__main__":
    main()
