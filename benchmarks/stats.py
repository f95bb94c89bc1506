"""Speed of pipeline.stats against ranx's statistical tests.

    python benchmarks/stats.py [--systems 20] [--queries 1000] [--metrics 4]
                               [--resamples 10000] [--permutations 10000]

Per-query score matrices are simulated (the tests compare per-query metric values, so how
they were computed does not matter). The fair comparison is the same work on the same
arrays, in one process, after ranx's numba JIT warm-up:

- ranx: for each metric and each non-baseline system, the two tests ranx ``compare`` runs
  per pair, ``paired_student_t_test`` and ``fisher_randomization_test`` with
  ``n_permutations`` (exactly the functions ``compare`` calls, on the same arrays, without
  its metric evaluation). ``compare`` itself tests every ordered pair of runs (S(S-1) =
  380 pairs here, each twice), which would be 20x more work; we time only the S - 1
  comparisons against the baseline, which is what our report does.
- ours (same tests): ``paired_t_test`` + ``randomization_test`` on the same differences.
- ours (full report): ``compare_metrics`` -- means with BCa bootstrap CIs (``resamples``),
  difference CIs, t, Wilcoxon, sign and randomization tests, Holm across all comparisons,
  effect sizes, wins/ties/losses, sensitivity, and randomized Tukey HSD over all pairs
  (``permutations``).

Prints seconds and the ratio ours / ranx (goal: full report <= 0.5).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import stats  # noqa: E402


def simulate(n_systems: int, n_queries: int, n_metrics: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Per-query scores in [0, 1] with a query effect, a system effect and noise."""
    rng = np.random.default_rng(seed)
    out = {}
    for m in range(n_metrics):
        query = rng.beta(2, 3, size=n_queries)
        system = rng.normal(0, 0.03, size=(n_systems, 1))
        out[f"metric_{m}"] = np.clip(query + system + rng.normal(0, 0.15, (n_systems, n_queries)), 0, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", type=int, default=20)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--metrics", type=int, default=4)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--permutations", type=int, default=10_000)
    args = ap.parse_args()

    mats = simulate(args.systems, args.queries, args.metrics)
    names = [f"sys{i}" for i in range(args.systems)]
    diffs = np.concatenate([m[1:] - m[:1] for m in mats.values()])  # vs baseline sys0

    from ranx.statistical_tests import fisher_randomization_test, paired_student_t_test

    t0 = time.perf_counter()
    fisher_randomization_test(mats["metric_0"][0], mats["metric_0"][1], 10, 0.05, 42)
    paired_student_t_test(mats["metric_0"][0], mats["metric_0"][1], 0.05)
    warm = time.perf_counter() - t0

    t0 = time.perf_counter()
    for m in mats.values():
        for i in range(1, args.systems):
            paired_student_t_test(m[0], m[i], 0.05)
            fisher_randomization_test(m[0], m[i], args.permutations, 0.05, 42)
    t_ranx = time.perf_counter() - t0

    t0 = time.perf_counter()
    stats.paired_t_test(diffs)
    stats.randomization_test(diffs, n_permutations=args.permutations, seed=0)
    t_same = time.perf_counter() - t0

    t0 = time.perf_counter()
    report = stats.compare_metrics(
        mats, names, baseline=0, n_resamples=args.resamples, n_permutations=args.permutations, seed=0
    )
    t_full = time.perf_counter() - t0
    n_comp = sum(len(c.vs_baseline) for c in report)

    print(
        f"{args.systems} systems x {args.queries} queries x {args.metrics} metrics; "
        f"{n_comp} comparisons vs baseline; {args.resamples} resamples, {args.permutations} permutations"
    )
    print(f"(ranx JIT warm-up {warm:.1f} s, not counted)")
    print(f"{'what':<52}{'seconds':>10}{'ours/ranx':>11}")
    print(f"{'ranx: student + fisher, each system vs baseline':<52}{t_ranx:>10.2f}{'':>11}")
    print(f"{'ours: same tests (t + randomization)':<52}{t_same:>10.2f}{t_same / t_ranx:>11.3f}")
    print(f"{'ours: full compare_metrics (CIs, 4 tests, Tukey HSD)':<52}{t_full:>10.2f}{t_full / t_ranx:>11.3f}")


if __name__ == "__main__":
    main()
