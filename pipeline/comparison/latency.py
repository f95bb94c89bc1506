"""Latency beside quality in a comparison (issue 36): each system's p50/p95 retrieval latency
with its CI, and each system's latency difference to the reference, paired by query.

A job's folder carries its cost block (``metrics.json`` ``cost``: p50/p95 with their
percentile-bootstrap CIs, ``retrievers.cost``) and each query's latency (``latency.csv``:
``query_id, latency_ms``). The difference of a system to the reference (the report's
baseline) is taken on the queries both timed, query by query (d_q = system - reference):

- ``mean_diff_ms``: the mean of d_q, with a paired percentile-bootstrap 95% CI (the queries
  resampled with replacement, ``n_resamples`` times; Efron & Tibshirani 1993, ch. 13);
- ``p95_diff_ms``: p95(system) - p95(reference) on the same queries, with the CI from the same
  resamples (both p95s of each resample: the pairing is kept).

A system timed in one batch (``latency_mode: batch_share``: every query gets the batch's
per-query share) has no per-query times: its numbers are shown, its differences are the
shares' (no CI) and say so; ``cost.per_query=true`` times each query alone. A system without a
cost block (``cost.enabled=false``, a run file, an MLflow run, an older job) has no latency:
said so, no numbers.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from pipeline.io import results as res

#: Resamples of the paired bootstrap (chunked: memory stays at CHUNK x queries).
N_RESAMPLES = 2000
_CHUNK = 100


def read_latency(folder: str | Path | None) -> tuple[dict[str, Any] | None, dict[str, float] | None, str]:
    """(the cost block, ``{query_id: ms}`` or None, why none) of a job folder."""
    if folder is None:
        return None, None, "not a job folder (a run file or an MLflow run): no latency"
    results = Path(folder) / res.RESULTS if (Path(folder) / res.RESULTS).is_dir() else Path(folder)
    try:
        cost = json.loads((results / "metrics.json").read_text()).get("cost")
    except (OSError, ValueError):
        cost = None
    metrics = (cost or {}).get("metrics") or {}
    if not cost or "latency_p95_ms" not in metrics:
        note = (cost or {}).get("note") or "no cost block: cost.enabled=false, or a job from before cost metrics"
        return None, None, f"no latency ({note})"
    per_query: dict[str, float] | None = None
    try:
        with open(results / res.LATENCY_FILE, newline="", encoding="utf-8") as fh:
            per_query = {row["query_id"]: float(row["latency_ms"]) if row["latency_ms"] not in ("", "nan") else math.nan
                         for row in csv.DictReader(fh)}
    except (OSError, KeyError, ValueError):
        per_query = None
    return cost, per_query, ""


def paired_difference(system: NDArray[np.float64], reference: NDArray[np.float64], n_resamples: int = N_RESAMPLES,
                      seed: int = 0) -> dict[str, float]:
    """The mean of the per-query differences and the difference of the p95s, each with its
    paired percentile-bootstrap 95% CI: resample ``i`` draws the queries
    ``default_rng(seed).integers(0, n, (n_resamples, n))[i]`` (drawn in chunks of
    :data:`_CHUNK` rows: the same numbers), both systems at the same queries."""
    a, b = np.asarray(system, np.float64), np.asarray(reference, np.float64)
    n = a.size
    rng = np.random.default_rng(seed)
    means, p95s = np.empty(n_resamples), np.empty(n_resamples)
    d = a - b
    for start in range(0, n_resamples, _CHUNK):
        idx = rng.integers(0, n, (min(_CHUNK, n_resamples - start), n))
        means[start:start + idx.shape[0]] = d[idx].mean(axis=1)
        p95s[start:start + idx.shape[0]] = np.percentile(a[idx], 95, axis=1) - np.percentile(b[idx], 95, axis=1)
    lo_m, hi_m = np.percentile(means, [2.5, 97.5])
    lo_p, hi_p = np.percentile(p95s, [2.5, 97.5])
    return {"mean_diff_ms": float(d.mean()), "mean_diff_ci_low": float(lo_m), "mean_diff_ci_high": float(hi_m),
            "p95_diff_ms": float(np.percentile(a, 95) - np.percentile(b, 95)), "p95_diff_ci_low": float(lo_p),
            "p95_diff_ci_high": float(hi_p), "n_queries": int(n)}


def latency_report(systems: Sequence[Any], reference: str, seed: int = 0,
                   n_resamples: int = N_RESAMPLES) -> dict[str, Any]:
    """The report's ``latency`` key: ``systems`` (per name: p50/p95 with CIs, mode, source, or
    ``none``: why not), ``vs_reference`` (per other system: :func:`paired_difference`, or a
    ``note`` why there is no paired CI), ``reference``."""
    per_system: dict[str, Any] = {}
    per_query: dict[str, dict[str, float]] = {}
    for s in systems:
        cost, times, why = read_latency(getattr(s, "folder", None))
        if cost is None:
            per_system[s.name] = {"none": why}
            continue
        m = cost["metrics"]
        per_system[s.name] = {
            **{key: m.get(key) for key in ("latency_p50_ms", "latency_p50_ms_ci_low", "latency_p50_ms_ci_high",
                                           "latency_p95_ms", "latency_p95_ms_ci_low", "latency_p95_ms_ci_high",
                                           "throughput_qps")},
            "latency_mode": cost.get("latency_mode"), "latency_source": cost.get("latency_source"),
            "cpu": (cost.get("machine") or {}).get("cpu")}
        if times is not None:
            per_query[s.name] = times
    out: dict[str, Any] = {"reference": reference, "method": "paired percentile bootstrap over queries, 95%",
                           "n_resamples": n_resamples, "seed": seed, "systems": per_system, "vs_reference": {}}
    for s in systems:
        if s.name != reference and "none" not in per_system[s.name]:
            out["vs_reference"][s.name] = _pair(s.name, reference, per_system, per_query, seed, n_resamples)
    return out


def _pair(name: str, reference: str, per_system: dict[str, Any], per_query: dict[str, dict[str, float]], seed: int,
          n_resamples: int) -> dict[str, Any]:
    if "none" in per_system.get(reference, {"none": ""}):
        return {"note": f"the reference {reference} has no latency"}
    if name not in per_query or reference not in per_query:
        return {"note": "no per-query latencies (latency.csv) for both: no paired difference"}
    common = [q for q in per_query[reference] if q in per_query[name]
              and math.isfinite(per_query[name][q]) and math.isfinite(per_query[reference][q])]
    if len(common) < 2:
        return {"note": f"{len(common)} query timed by both: no paired difference"}
    a = np.array([per_query[name][q] for q in common])
    b = np.array([per_query[reference][q] for q in common])
    shares = [n for n in (name, reference) if per_system[n].get("latency_mode") == "batch_share"]
    if shares:
        return {"mean_diff_ms": float((a - b).mean()), "p95_diff_ms": float(np.percentile(a, 95) - np.percentile(b, 95)),
                "n_queries": len(common),
                "note": f"{' and '.join(shares)} timed in one batch (each query its share): no per-query times, no "
                        "paired CI; rerun with cost.per_query=true"}
    return paired_difference(a, b, n_resamples, seed)


def _ms(v: Any) -> str:
    return "?" if v is None or not math.isfinite(float(v)) else f"{float(v):.3g}"


def latency_lines(data: dict[str, Any]) -> list[str]:
    """The comparison's latency lines (console and report.md, word for word); none when no
    system carries a latency."""
    lat = data.get("latency")
    if not lat or all("none" in v for v in lat["systems"].values()):
        return []
    lines = ["latency per query (p50, p95 with 95% CI; retrievers.cost):"]
    for name, v in lat["systems"].items():
        if "none" in v:
            lines.append(f"  {name}: {v['none']}")
            continue
        how = "per-query share of one batch" if v.get("latency_mode") == "batch_share" else "each query timed"
        lines.append(f"  {name}: p50 {_ms(v['latency_p50_ms'])} ms, p95 {_ms(v['latency_p95_ms'])} ms "
                     f"[{_ms(v['latency_p95_ms_ci_low'])}, {_ms(v['latency_p95_ms_ci_high'])}] ({how}"
                     + (", from the cache" if v.get("latency_source") == "cache" else "") + ")")
    if lat["vs_reference"]:
        lines.append(f"latency difference to {lat['reference']}, paired by query ({lat['method']}):")
    for name, v in lat["vs_reference"].items():
        if "mean_diff_ci_low" in v:
            lines.append(f"  {name}: mean {v['mean_diff_ms']:+.3g} ms [{v['mean_diff_ci_low']:+.3g}, "
                         f"{v['mean_diff_ci_high']:+.3g}], p95 {v['p95_diff_ms']:+.3g} ms [{v['p95_diff_ci_low']:+.3g}, "
                         f"{v['p95_diff_ci_high']:+.3g}] ({v['n_queries']} queries)")
        elif "mean_diff_ms" in v:
            lines.append(f"  {name}: mean {v['mean_diff_ms']:+.3g} ms, p95 {v['p95_diff_ms']:+.3g} ms ({v['note']})")
        else:
            lines.append(f"  {name}: {v['note']}")
    machines = {v.get("cpu") for v in lat["systems"].values() if "none" not in v}
    if len(machines) > 1:
        lines.append(f"  note: measured on {len(machines)} machines: the latencies do not compare across them")
    return lines
