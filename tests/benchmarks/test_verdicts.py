"""benchmarks/verdicts.py at a small size: the simulation computes what ``stats.infer`` computes, its
null is exchangeable, and the error rates of the verdicts meet their goals within Monte Carlo error
(3 standard errors; every draw is seeded, so a pass is reproducible)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from pipeline import stats

# From its file: the benchmarks folder on sys.path would hide the pipeline package behind
# benchmarks/pipeline.py for every later import in this process.
_spec = importlib.util.spec_from_file_location("bench_verdicts",
                                              Path(__file__).resolve().parents[2] / "benchmarks" / "verdicts.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

VARIANTS = {k: bench.VARIANTS[k] for k in ("lucene", "k1=2,b=1", "no stemming", "no stop words")}


@pytest.fixture(scope="module")
def real() -> np.ndarray:
    return bench.real_matrix("sample", "ndcg_at_10", VARIANTS)


def test_real_matrix_is_the_sample_scored_per_query(real):
    assert real.shape == (4, 52) and ((0 <= real) & (real <= 1)).all()
    # the variants differ on some queries and agree on others, as real configurations do
    assert 0 < np.mean((real == real[:1]).all(axis=0)) < 1


def test_simulated_systems_draw_each_query_from_the_real_variants(real):
    x = bench.simulate(real, 18, 200, np.random.default_rng(0))
    for col in x.T:
        assert any(set(col) <= set(real[:, q]) for q in range(real.shape[1]))
    # exchangeable: over many draws every simulated system has the same mean
    many = np.mean([bench.simulate(real, 3, 52, np.random.default_rng(s)).mean(axis=1) for s in range(300)], axis=0)
    np.testing.assert_allclose(many, real.mean(), atol=0.01)


def test_verdict_stack_equals_infer(real):
    base = bench.simulate(real, 5, 40, np.random.default_rng(1))
    x = base[None] + np.array([0.01, 0.02, 0.05])[:, None, None] * (np.arange(5) == 0)[None, :, None]
    p, hsd = bench.verdict_stack(x, 0.05, 199, seed=3)
    for c in range(3):  # every condition shifts system 0, so every query varies in all of them
        inf = stats.infer(x[c], list("abcde"), n_permutations=199, seed=3)
        np.testing.assert_array_equal(p[c], np.array(inf.p))
        np.testing.assert_allclose(hsd[c], inf.hsd, rtol=1e-12)  # sums of a wider stack: rounding


def test_error_rates_meet_their_goals_within_monte_carlo_error(real):
    reps = 300
    r = bench.measure(real, n_systems=6, n_queries=50, reps=reps, margin=0.01, n_permutations=199, seed=0)

    def slack(p: float) -> float:
        return 3 * math.sqrt(p * (1 - p) / reps)

    assert r["any_called"][0] <= 0.05 + slack(0.05)
    assert r["best_in_set@1m"][0] >= 0.95 - slack(0.05)
    assert r["equivalent@2m"][0] <= 0.05 + slack(0.05)
    assert r["wrong_sign@0.5m"][0] <= 0.05 + slack(0.05)
    assert r["power@0.5m"][0] <= r["power@2m"][0]
    # a difference of 30 margins is found (the sample's HSD at 50 queries is a few margins)
    big = bench.measure(real, n_systems=2, n_queries=50, reps=50, margin=0.01 * 15, n_permutations=199, seed=0)
    assert big["power@2m"][0] >= 0.9 and big["any_called"][0] <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 50)
