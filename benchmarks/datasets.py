"""Load time and peak memory of pipeline.io.collection on SciFact and on a generated 1M-document corpus.

Each measurement runs in a fresh subprocess so that peaks do not mix:

- time: wall clock of ``load_beir`` (imports excluded: the child loads the sample first);
- rss: growth of the process's peak resident set (VmHWM) during the load, i.e. the
  memory the load really needed, Python object overhead included;
- traced: ``tracemalloc`` peak of Python allocations during the load (a second subprocess,
  since tracing slows the load down), and what is still held when it returns (the Collection).

Both are divided by the uncompressed size of ``corpus.jsonl``: a loader that ``read()`` the
whole file and then parsed it would hold the text at least twice over plus the parsed
objects; a streaming one holds only the parsed ids and texts.

    python benchmarks/datasets.py                 # SciFact + 1,000,000 generated documents
    python benchmarks/datasets.py --n-docs 100000 # a smaller generated corpus
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"

_CHILD = r"""
import json, resource, sys, time, tracemalloc
sys.path.insert(0, {root!r})
from pipeline.io.collection import load_beir, load_sample
load_sample()  # warm up: lazy imports (pandas' CSV reader, ...) are not part of the load
mode, path = sys.argv[1], sys.argv[2]

def peak_rss_kib():
    # VmHWM is this process's own high-water mark; ru_maxrss would carry over the parent's
    # peak across fork+exec (the parent may have grown large generating the corpus).
    try:
        with open("/proc/self/status") as fh:
            return next(int(l.split()[1]) for l in fh if l.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

if mode == "time":
    before = peak_rss_kib()
    start = time.perf_counter()
    c = load_beir(path)
    seconds = time.perf_counter() - start
    after = peak_rss_kib()
    out = {{"seconds": seconds, "rss_peak_growth": (after - before) * 1024,
           "n_docs": c.n_docs, "n_queries": c.n_queries, "n_judged": int(len(c.qrels.grade))}}
else:
    tracemalloc.start()
    c = load_beir(path)
    current, peak = tracemalloc.get_traced_memory()
    out = {{"traced_peak": peak, "traced_held": current}}
print(json.dumps(out))
"""


def measure(folder: Path) -> dict[str, float]:
    code = _CHILD.format(root=str(ROOT))
    result: dict[str, float] = {}
    for mode in ("time", "trace"):
        proc = subprocess.run(
            [sys.executable, "-c", code, mode, str(folder)], capture_output=True, text=True, check=True
        )
        result.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return result


def uncompressed_size(path: Path) -> int:
    if path.suffix != ".gz":
        return path.stat().st_size
    size = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            size += len(chunk)
    return size


def generate(folder: Path, n_docs: int, n_queries: int = 1000, seed: int = 0) -> Path:
    """A BEIR folder of ``n_docs`` short documents (5-20 words), written as corpus.jsonl.gz."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(20000)], dtype=object)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    lengths = rng.integers(5, 21, size=n_docs)
    words = vocab[rng.zipf(1.3, size=int(lengths.sum())) % len(vocab)]
    ends = np.cumsum(lengths)
    with gzip.open(folder / "corpus.jsonl.gz", "wt", encoding="utf-8", compresslevel=6) as fh:
        start = 0
        batch: list[str] = []
        for i, end in enumerate(ends.tolist()):
            text = " ".join(words[start:end])
            start = end
            batch.append(json.dumps({"_id": f"doc{i}", "title": "", "text": text}) + "\n")
            if len(batch) == 10000:
                fh.write("".join(batch))
                batch.clear()
        fh.write("".join(batch))
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        for q in range(n_queries):
            fh.write(json.dumps({"_id": f"q{q}", "text": " ".join(rng.choice(vocab, size=4))}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q in range(n_queries):
            for d in rng.choice(n_docs, size=3, replace=False).tolist():
                fh.write(f"q{q}\tdoc{d}\t{int(rng.integers(1, 4))}\n")
    return folder


def report(label: str, folder: Path) -> None:
    corpus = next(p for p in (folder / "corpus.jsonl", folder / "corpus.jsonl.gz") if p.exists())
    size = uncompressed_size(corpus)
    m = measure(folder)
    mib = 1 << 20
    print(
        f"{label}: {m['n_docs']:,} docs, {m['n_queries']:,} queries, {m['n_judged']:,} judgments; "
        f"corpus {size / mib:.1f} MiB uncompressed ({corpus.stat().st_size / mib:.1f} MiB on disk)\n"
        f"  load time          {m['seconds']:.2f} s\n"
        f"  peak RSS growth    {m['rss_peak_growth'] / mib:.1f} MiB  = {m['rss_peak_growth'] / size:.2f} x corpus\n"
        f"  tracemalloc peak   {m['traced_peak'] / mib:.1f} MiB  = {m['traced_peak'] / size:.2f} x corpus\n"
        f"  held after load    {m['traced_held'] / mib:.1f} MiB  = {m['traced_held'] / size:.2f} x corpus"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-docs", type=int, default=1_000_000)
    args = parser.parse_args()
    if SCIFACT.is_dir():
        report("SciFact", SCIFACT)
    else:
        print(f"SciFact not found at {SCIFACT}; skipped")
    with tempfile.TemporaryDirectory() as tmp:
        folder = generate(Path(tmp) / "generated", args.n_docs)
        report(f"generated ({args.n_docs:,} short documents, jsonl.gz)", folder)


if __name__ == "__main__":
    main()
