"""Latency in a comparison (issue 36): each system's p50/p95 and its difference to the
reference paired by query, with a paired bootstrap CI checked against a hand computation."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pipeline.comparison.latency import latency_lines, latency_report, paired_difference, read_latency
from pipeline.io import results as res


def test_the_paired_bootstrap_ci_equals_a_hand_computation():
    rng = np.random.default_rng(5)
    b = rng.lognormal(1.0, 0.4, 137)
    a = b * 0.7 + rng.normal(0, 0.2, 137)
    ours = paired_difference(a, b, n_resamples=1000, seed=3)
    # by hand: the same query indices for both systems in each resample
    idx = np.random.default_rng(3).integers(0, 137, (1000, 137))
    means = (a[idx] - b[idx]).mean(axis=1)
    p95 = np.percentile(a[idx], 95, axis=1) - np.percentile(b[idx], 95, axis=1)
    assert ours["mean_diff_ms"] == pytest.approx((a - b).mean(), rel=1e-12)
    assert ours["p95_diff_ms"] == pytest.approx(np.percentile(a, 95) - np.percentile(b, 95), rel=1e-12)
    np.testing.assert_allclose([ours["mean_diff_ci_low"], ours["mean_diff_ci_high"]],
                               np.percentile(means, [2.5, 97.5]), rtol=1e-12)
    np.testing.assert_allclose([ours["p95_diff_ci_low"], ours["p95_diff_ci_high"]],
                               np.percentile(p95, [2.5, 97.5]), rtol=1e-12)
    # paired: much narrower than resampling the two systems independently would be
    assert ours["mean_diff_ci_high"] - ours["mean_diff_ci_low"] < 0.2


def _job(root: Path, name: str, times: dict[str, float] | None, mode: str = "per_query") -> Path:
    results = root / name / res.RESULTS
    results.mkdir(parents=True)
    metrics: dict = {"metrics": {}}
    if times is not None:
        x = np.array(list(times.values()))
        metrics["cost"] = {"latency_mode": mode, "latency_source": "measured", "machine": {"cpu": "cpu"},
                          "metrics": {"latency_p50_ms": float(np.percentile(x, 50)), "latency_p50_ms_ci_low": 1.0,
                                      "latency_p50_ms_ci_high": 2.0, "latency_p95_ms": float(np.percentile(x, 95)),
                                      "latency_p95_ms_ci_low": 3.0, "latency_p95_ms_ci_high": 4.0}}
        (results / res.LATENCY_FILE).write_text("query_id,latency_ms\n" + "".join(f"{q},{v!r}\n"
                                                                                for q, v in times.items()))
    (results / "metrics.json").write_text(json.dumps(metrics))
    return root / name


def test_systems_are_paired_by_query_and_those_without_latency_say_so(tmp_path):
    rng = np.random.default_rng(1)
    ref = {f"q{i}": float(v) for i, v in enumerate(rng.lognormal(1, 0.3, 40))}
    fast = {q: v / 2 for q, v in reversed(list(ref.items()))}  # another order: paired by id, not by row
    systems = [SimpleNamespace(name="ref", folder=str(_job(tmp_path, "ref", ref))),
               SimpleNamespace(name="fast", folder=str(_job(tmp_path, "fast", fast))),
               SimpleNamespace(name="batch", folder=str(_job(tmp_path, "batch", {q: 1.5 for q in ref}, "batch_share"))),
               SimpleNamespace(name="off", folder=str(_job(tmp_path, "off", None))),
               SimpleNamespace(name="run file", folder=None)]
    lat = latency_report(systems, "ref", seed=0, n_resamples=500)
    a = np.array([fast[q] for q in ref])
    b = np.array(list(ref.values()))
    expected = paired_difference(a, b, n_resamples=500, seed=0)
    assert lat["vs_reference"]["fast"] == pytest.approx(expected, rel=1e-12)
    assert lat["vs_reference"]["fast"]["mean_diff_ms"] == pytest.approx(-b.mean() / 2, rel=1e-12)
    assert "no paired CI" in lat["vs_reference"]["batch"]["note"] and "mean_diff_ci_low" not in lat["vs_reference"]["batch"]
    assert "cost.enabled=false" in lat["systems"]["off"]["none"] and "off" not in lat["vs_reference"]
    assert "not a job folder" in lat["systems"]["run file"]["none"]
    lines = latency_lines({"latency": lat})
    assert any(line.startswith("  fast: mean -") and "(40 queries)" in line for line in lines)
    assert any(line.startswith("  off: no latency") for line in lines)
    assert read_latency(str(tmp_path / "fast"))[1] == pytest.approx(fast)
