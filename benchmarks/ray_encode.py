"""Encoding on Ray against encoding in this process, on the same cores.

    python benchmarks/ray_encode.py [--passages 2000] [--workers 2] [--data ../shared/data/scifact]

Measures, for all-MiniLM-L6-v2 (torch, CPU) on the first N passages of SciFact (title +
text; the bundled sample repeated when SciFact is absent):

- in-process: ``DenseRetriever.encode`` with torch on ``--workers`` threads (the model loaded
  before the clock starts);
- on Ray: the same texts through ``retrievers.dense.encode_on_ray``, ``--workers`` actors of
  one CPU each on a local Ray of ``--workers`` CPUs (actors start and load the model inside
  the clock: that is what a job pays);
- the local Ray runtime's start (``ray.init``) and stop (``ray.shutdown``).

Prints passages/s of each, the ratio (goal: Ray >= 0.8x in-process, so that the overhead is
small before more workers are added), the largest difference between the two embeddings, and
the start and stop times. Timings vary with the machine's load: run it on an idle machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def passages(data: Path, n: int) -> tuple[list[str], str]:
    """The first ``n`` passages of the BEIR folder ``data``, else the sample's repeated."""
    corpus = data / "corpus.jsonl.gz"
    if not corpus.is_file():
        corpus = data / "corpus.jsonl"
    source = str(data)
    if not corpus.is_file():
        corpus, source = ROOT / "pipeline" / "sample" / "corpus.jsonl", "the bundled sample, repeated"
    opener = gzip.open if corpus.suffix == ".gz" else open
    texts: list[str] = []
    with opener(corpus, "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            texts.append(f"{doc.get('title', '')} {doc.get('text', '')}".strip())
            if len(texts) >= n:
                break
    while len(texts) < n:  # the sample: tag each copy so that no text repeats exactly
        texts += [f"{t} ({len(texts) + i})" for i, t in enumerate(texts[: n - len(texts)])]
    return texts[:n], source


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2, help="threads in process; actors (1 CPU each) on Ray")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    args = parser.parse_args()

    import numpy as np
    import torch

    from retrievers.dense import DenseRetriever, EncodeSettings, encode_on_ray

    texts, source = passages(args.data, args.passages)
    print(f"{len(texts)} passages from {source}; {args.workers} workers; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.2f}")

    torch.set_num_threads(args.workers)
    local = DenseRetriever(batch_size=args.batch_size, normalize=False)
    local.encode(texts[:8])  # the model loaded before the clock
    start = time.perf_counter()
    in_process = local.encode(texts)
    t_local = time.perf_counter() - start

    import ray

    start = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False)
    t_start = time.perf_counter() - start
    settings = EncodeSettings(engine="ray", concurrency=args.workers)
    start = time.perf_counter()
    on_ray = encode_on_ray(texts, local.encoder_factory(), settings, args.batch_size)
    t_ray = time.perf_counter() - start
    start = time.perf_counter()
    ray.shutdown()
    t_stop = time.perf_counter() - start

    rate_local, rate_ray = len(texts) / t_local, len(texts) / t_ray
    print(f"in-process ({args.workers} torch threads): {t_local:7.1f} s  {rate_local:6.1f} passages/s")
    print(f"Ray ({args.workers} actors x 1 CPU):        {t_ray:7.1f} s  {rate_ray:6.1f} passages/s  "
          f"(actors' start and model load included)")
    print(f"ratio Ray / in-process: {rate_ray / rate_local:.2f}x (goal >= 0.8x)")
    print(f"max abs difference of the embeddings: {float(np.abs(in_process - on_ray).max()):.2e}")
    print(f"local Ray runtime: start {t_start:.1f} s, stop {t_stop:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
