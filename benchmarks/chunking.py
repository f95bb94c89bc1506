"""Chunking throughput (chunks/s): our chunkers against the libraries used directly.

    python benchmarks/chunking.py [--corpus ../shared/data/scifact] [--size 128] [--repeat 3]

Alternates ours and the reference in one process and reports medians (``--repeat``):
- ``sentences``: ``pipeline.chunkers.SentenceChunker.spans`` (spans + the tokenizer's count of
  every chunk) vs semantic-text-splitter's ``TextSplitter.chunks`` with the same tokenizer;
- ``tokens``: ``TokenChunker.spans`` vs the tokenizer's ``encode_batch`` alone (the floor);
- for the library choice, chonkie's ``SentenceChunker`` with the same tokenizer when installed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks/pipeline.py would shadow the package

from pipeline import chunkers  # noqa: E402
from pipeline.io.collection import load_beir  # noqa: E402


def _time(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=None, help="a BEIR folder (default: the bundled sample_long)")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    collection = chunkers.load_sample_long() if args.corpus is None else load_beir(Path(args.corpus))
    texts = collection.doc_texts
    ours_s = chunkers.SentenceChunker(size=args.size)
    ours_t = chunkers.TokenChunker(size=args.size)
    splitter = ours_s.splitter()
    tok = ours_s.tokenizer
    contenders = {
        "sentences (ours)": lambda: len(ours_s.spans(texts)),
        "semantic-text-splitter TextSplitter.chunks": lambda: sum(len(splitter.chunks(t)) for t in texts),
        "tokens (ours)": lambda: len(ours_t.spans(texts)),
        "tokenizers encode_batch (floor)": lambda: len(tok.encode_batch(texts, add_special_tokens=False)),
    }
    try:
        from chonkie import SentenceChunker as ChonkieSentences

        chonkie = ChonkieSentences(tokenizer=tok, chunk_size=args.size)
        contenders["chonkie SentenceChunker"] = lambda: sum(len(chonkie.chunk(t)) for t in texts)
    except Exception as err:  # not installed, or its tokenizer adapter refused ours
        print(f"(chonkie left out: {err})")
    times: dict[str, list[float]] = {name: [] for name in contenders}
    counts: dict[str, int] = {}
    for _ in range(args.repeat):
        for name, fn in contenders.items():
            seconds, n = _time(fn)
            times[name].append(seconds)
            counts[name] = n
    print(f"{collection.name}: {len(texts)} documents, size {args.size} tokens, median of {args.repeat}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<45} {counts[name]:>7} chunks  {median:8.3f} s  {counts[name] / median:>10.0f} chunks/s")
    library = statistics.median(times["semantic-text-splitter TextSplitter.chunks"])
    ratio = statistics.median(times["sentences (ours)"]) / library
    print(f"  sentences: ours / library = {ratio:.2f}x its time (goal <= 1.2x)")


if __name__ == "__main__":
    main()
