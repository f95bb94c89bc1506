"""Does an approximate dense index pay off on the scale benchmark's vectors? faiss alone.

    python benchmarks/ann.py [--sizes 10000,100000] [--structured 30000] [--queries 1000]

1. Random unit 384-d vectors (``scale.random_unit_vectors``, the vectors of
   ``benchmarks/scale.py``): exact search (``IndexFlatIP``) against an IVF index whose build
   is linear in n (``IndexIVFFlat``, 256 lists trained on a fixed sample of 12,800
   vectors), scanning 16 to 256 of its lists: recall@100 against exact search and search
   time, for ``--queries`` queries.
2. Vectors with 16-d structure (16-d Gaussians through a random projection to 384-d, plus
   noise; closer to real embeddings), ``--structured`` of them: exact search against faiss
   HNSW with the pipeline's build settings (``conf/retriever/dense.yaml``: M, efConstruction)
   at several efSearch.

Prints seconds, recall@100 and each search's time over the exact search's. On random
vectors the IVF index finds about the share of the true top 100 that lies in the lists it
scans (random vectors have no clusters), so recall 0.99 means scanning nearly all of it.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import numpy as np

DIM, DEPTH, NLIST = 384, 100, 256


def random_unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    """The scale benchmark's vectors (``benchmarks/scale.py``, loaded from its file: this
    folder on ``sys.path`` would hide the ``pipeline`` package behind ``benchmarks/pipeline.py``)."""
    spec = importlib.util.spec_from_file_location("bench_scale", Path(__file__).with_name("scale.py"))
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    return scale.random_unit_vectors(n, dim, seed)


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean share of each query's true top ``DEPTH`` found (-1: nothing found)."""
    return float(np.mean([len(set(f[f >= 0].tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth)]))


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def ivf_on_random(n: int, n_queries: int, probes: list[int]) -> list[dict]:
    import faiss

    docs, queries = random_unit_vectors(n, DIM, 1), random_unit_vectors(n_queries, DIM, 2)
    flat = faiss.IndexFlatIP(DIM)
    flat.add(docs)
    (_, truth), t_exact = timed(lambda: flat.search(queries, DEPTH))
    sample = docs[np.random.default_rng(0).choice(n, min(n, 50 * NLIST), replace=False)]

    def build():
        ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(DIM), DIM, NLIST, faiss.METRIC_INNER_PRODUCT)
        ivf.train(sample)
        ivf.add(docs)
        return ivf

    ivf, t_build = timed(build)
    print(f"random 384-d, n={n:,}: exact search {t_exact:.2f} s; IVF{NLIST} build {t_build:.2f} s", flush=True)
    rows = []
    for nprobe in probes:
        ivf.nprobe = nprobe
        (_, found), t = timed(lambda: ivf.search(queries, DEPTH))
        rows.append({"n": n, "nprobe": nprobe, "recall": recall_at(found, truth), "search_s": t, "exact_s": t_exact})
        print(f"  {nprobe:3d} of {NLIST} lists: recall@100 {rows[-1]['recall']:.4f}, search {t:.2f} s "
              f"({t / t_exact:.2f}x exact)", flush=True)
    return rows


def structured_vectors(n: int, n_queries: int, dims: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    proj = rng.standard_normal((dims, DIM)).astype(np.float32)

    def draw(m: int) -> np.ndarray:
        x = rng.standard_normal((m, dims)).astype(np.float32) @ proj
        x += 0.05 * rng.standard_normal((m, DIM)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    return draw(n), draw(n_queries)


def hnsw_on_structured(n: int, n_queries: int, efs: list[int]) -> list[dict]:
    import faiss
    from omegaconf import OmegaConf

    conf = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "retriever" / "dense.yaml")
    docs, queries = structured_vectors(n, n_queries)
    flat = faiss.IndexFlatIP(DIM)
    flat.add(docs)
    (_, truth), t_exact = timed(lambda: flat.search(queries, DEPTH))
    index = faiss.IndexHNSWFlat(DIM, int(conf.hnsw_m), faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = int(conf.hnsw_ef_construction)
    _, t_build = timed(lambda: index.add(docs))
    print(f"16-d structure in 384-d, n={n:,}: exact search {t_exact:.2f} s; HNSW (M {conf.hnsw_m}, "
          f"efConstruction {conf.hnsw_ef_construction}) build {t_build:.1f} s", flush=True)
    rows = []
    for ef in efs:
        index.hnsw.efSearch = ef
        (_, found), t = timed(lambda: index.search(queries, DEPTH))
        rows.append({"n": n, "ef_search": ef, "recall": recall_at(found, truth), "search_s": t, "exact_s": t_exact})
        print(f"  efSearch {ef:4d}: recall@100 {rows[-1]['recall']:.4f}, search {t:.2f} s ({t / t_exact:.2f}x exact)",
              flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,100000", help="random-vector corpus sizes (IVF against exact)")
    p.add_argument("--structured", type=int, default=30_000, help="structured-vector corpus size (HNSW against exact); 0: skip")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    for n in (int(s) for s in args.sizes.split(",") if s.strip()):
        ivf_on_random(n, args.queries, [16, 64, 128, 192, NLIST])
    if args.structured:
        hnsw_on_structured(args.structured, args.queries, [128, 256, 512, 1024])


if __name__ == "__main__":
    main()
