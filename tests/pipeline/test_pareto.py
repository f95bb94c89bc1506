"""Quality against cost in a sweep (issue 36): the Pareto front against a brute-force oracle,
the answer under a latency budget (within, ruled out, none meets it, unmeasured) with the
Tukey best set of the jobs within it, and a bad budget refused before any job."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline import config
from pipeline.errors import InputError
from pipeline.stats.verdicts import infer
from pipeline.sweep import pareto
from pipeline.sweep.pareto import Point

ROOT = Path(__file__).resolve().parents[2]


def brute_force_front(q, c):
    """On the front <=> no other point is >= on quality, <= on cost, and better on one."""
    n = len(q)
    return np.array([not any(q[j] >= q[i] and c[j] <= c[i] and (q[j] > q[i] or c[j] < c[i])
                             for j in range(n) if j != i) for i in range(n)])


@pytest.mark.parametrize("seed", range(40))
def test_the_front_equals_the_brute_force_oracle(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    # small integer grids make ties on quality, on cost and on both
    q = rng.integers(0, 6, n).astype(float) if seed % 2 else rng.random(n)
    c = rng.integers(0, 6, n).astype(float) if seed % 3 else rng.lognormal(size=n)
    np.testing.assert_array_equal(pareto.pareto_front(q, c), brute_force_front(q, c))


def test_the_front_of_a_hand_made_case():
    # (quality, cost): b dominates a (better and as cheap); c and d are tied on both; e is slower and worse
    q = [0.5, 0.6, 0.7, 0.7, 0.65]
    c = [1.0, 1.0, 3.0, 3.0, 4.0]
    assert pareto.pareto_front(q, c).tolist() == [False, True, True, True, False]
    with pytest.raises(ValueError, match="finite"):
        pareto.pareto_front([0.1, math.nan], [1.0, 2.0])


@pytest.mark.parametrize("value", [-5, 0, 0.0, math.nan, math.inf, -math.inf, "abc", True])
def test_a_budget_that_is_not_a_positive_finite_number_is_bad_input(value):
    with pytest.raises(ValueError, match="positive finite number of milliseconds"):
        pareto.check_budget(value)
    with pytest.raises(InputError, match="select.max_latency_p95_ms"):
        config.latency_budget({"select": {"max_latency_p95_ms": value}})


def test_a_budget_is_a_number_of_ms_or_none():
    assert pareto.check_budget(None) is None and pareto.check_budget(50) == 50.0
    assert config.latency_budget({"select": {"max_latency_p95_ms": 12.5}}) == 12.5
    assert config.latency_budget({}) is None


def _point(name, objective, p95, source="measured"):
    measured = p95 is not None
    return Point(name, f"/jobs/{name}", f"id-{name}", objective, objective - 0.05, objective + 0.05, p95,
                 p95 * 0.9 if measured else None, p95 * 1.1 if measured else None, source)


def _report(scores: dict[str, np.ndarray]) -> dict:
    return {"systems": [{"name": f"sys {n}", "folder": f"/jobs/{n}"} for n in scores],
            "per_query": {"scores": {"ndcg_at_10": {f"sys {n}": s.tolist() for n, s in scores.items()}}},
            "settings": {"alpha": 0.05, "n_permutations": 999, "seed": 0}}


def test_the_budget_answers_the_best_within_it_and_names_the_better_jobs_it_rules_out():
    rng = np.random.default_rng(0)
    base = rng.random(60)
    scores = {"exact": np.clip(base + 0.10, 0, 1), "hnsw64": np.clip(base + 0.099, 0, 1),
              "hnsw16": np.clip(base + 0.098 - 0.05 * rng.random(60), 0, 1), "bm25": base,
              "off": base}
    points = [_point(n, float(s.mean()), p95) for (n, s), p95 in
              zip(scores.items(), [80.0, 20.0, 9.0, 2.0, None])]
    points[-1] = _point("off", float(scores["off"].mean()), None, "no cost block")
    answer = pareto.budget_answer(points, 25.0, "ndcg_at_10", _report(scores), margin=0.01)
    assert answer["best"] == "hnsw64"
    assert answer["within"] == ["hnsw64", "hnsw16", "bm25"]
    assert answer["ruled_out"] == ["exact"]  # better, and over the budget
    assert answer["unmeasured"] == ["off"]  # neither within nor ruled out
    # the oracle: the randomized Tukey HSD over the jobs within the budget alone
    within = ["hnsw64", "hnsw16", "bm25"]
    inference = infer(np.array([scores[n] for n in within]), within, metric="ndcg_at_10", margin=0.01,
                      n_permutations=999, seed=0)
    assert answer["could_be_as_good"] == [n for n in inference.best_set if n != "hnsw64"]
    assert "Tukey HSD over the 3 jobs within the budget" in answer["claim"]
    text = pareto.describe(points, pareto.front_of(points), answer, "ndcg_at_10", [])
    assert "budget p95 <= 25 ms: the best within it is hnsw64" in text
    assert "ruled out by the budget (better ndcg_at_10, p95 over it): exact (ndcg_at_10 " in text
    assert "p95 80 ms" in text and "unmeasured" in text and "off (no cost block)" in text
    # the front: bm25 (fastest), hnsw16 or hnsw64 where better, exact (best); never the unmeasured job
    front = [p.name for p in pareto.front_of(points)]
    assert front[0] == "bm25" and front[-1] == "exact" and "off" not in front


def test_a_budget_no_job_meets_is_an_answer_naming_the_closest_job():
    points = [_point("a", 0.7, 30.0), _point("b", 0.6, 12.0), _point("c", 0.5, None, "failed")]
    answer = pareto.budget_answer(points, 5.0, "ndcg_at_10", None, margin=0.01)
    assert answer["best"] is None and answer["within"] == [] and answer["closest"] == "b"
    text = pareto.describe(points, pareto.front_of(points), answer, "ndcg_at_10", [])
    assert "budget p95 <= 5 ms: no job meets it; the closest is b (ndcg_at_10 0.6000" in text
    assert "p95 12 ms [10.8, 13.2]" in text and "c (failed)" in text


def test_a_job_whose_p95_ci_contains_the_budget_is_borderline():
    points = [_point("a", 0.7, 10.0), _point("b", 0.6, 4.0)]
    answer = pareto.budget_answer(points, 10.5, "ndcg_at_10", None, margin=0.01)
    assert answer["best"] == "a" and answer["borderline"] == ["a"]  # its CI [9, 11] contains 10.5


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "HYDRA_FULL_ERROR"}
    env.update(HF_HUB_OFFLINE="1", MLFLOW_DISABLE_TELEMETRY="true")
    return env


@pytest.mark.slow
@pytest.mark.parametrize("budget", ["-5", "nan"])
def test_a_bad_budget_stops_a_sweep_before_its_first_job_in_one_line(tmp_path, budget):
    proc = subprocess.run([sys.executable, "-m", "pipeline", "-m", "retriever.k1=0.5,1.2", "tracking=none",
                           f"select.max_latency_p95_ms={budget}", f"paths.root={tmp_path}",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"], capture_output=True, text=True, cwd=ROOT,
                          env=_env(), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [f"error: select.max_latency_p95_ms must be a positive finite number of milliseconds (or null), "
                     f"got {float(budget)!r}"]
    assert not (tmp_path / "sweep" / "0").exists()  # no job ran


def test_a_sweep_ended_by_sync_takes_the_budget_its_jobs_ran_with():
    def rec(value):
        return {"params": {"select.max_latency_p95_ms": value}}

    assert pareto.budget_of([rec("50.0"), rec("50.0")]) == 50.0
    assert pareto.budget_of([rec("null"), rec("null")]) is None
    assert pareto.budget_of([rec("50.0"), rec("20.0")]) is None  # not one budget: none
    assert pareto.budget_of([{"params": {}}]) is None  # jobs from before the budget
