"""Verdicts you can act on (issue 32): one inference, stated the same way by every view.

In-process, on systems made here (a retriever x reorder x k grid shaped like the README's
sweep): dense is clearly best, placement moves the score by less than the margin, and the
objective (context_utility_at_k) keeps rising with k. The statistics themselves are
``pipeline.stats.verdicts``'s (tests/stats); these tests check that the comparison uses
that one computation everywhere and says what its data supports.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pipeline import stats
from pipeline.comparison import build_report, format_markdown, format_table
from pipeline.comparison.report import finite
from pipeline.comparison.systems import System
from pipeline.comparison.words import verdict_lines
from pipeline.errors import InputError

METRIC = "context_utility_at_k"
N_QUERIES = 40
FAST = {"n_resamples": 500, "n_permutations": 2000}


def _system(name: str, scores: np.ndarray, overrides: dict[str, str], sweep: str | None = "s1") -> System:
    ids = [f"q{i:02d}" for i in range(len(scores))]
    return System(name=name, kind="job", spec=name, source=f"{name}/per_query.csv",
                  scores={METRIC: dict(zip(ids, scores.tolist())), "ndcg_at_10": dict(zip(ids, scores.tolist()))},
                  run_name=name, overrides=overrides, params={"k": overrides.get("k", "10")}, sweep=sweep)


def grid_systems(seed: int = 1) -> list[System]:
    """18 jobs: dense +0.2 over bm25, hybrid +0.1; lost_in_the_middle -0.002; k 3 < 5 < 10 by 0.05."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.2, 0.6, N_QUERIES)
    out = []
    for retriever, reorder, k in itertools.product(("bm25", "dense", "hybrid"), ("none", "lost_in_the_middle"),
                                                   ("3", "5", "10")):
        effect = {"bm25": 0.0, "dense": 0.2, "hybrid": 0.1}[retriever] + {"3": 0.0, "5": 0.05, "10": 0.1}[k]
        effect -= 0.002 if reorder != "none" else 0.0
        scores = np.clip(base + effect + rng.normal(0, 0.004, N_QUERIES), 0, 1.5)
        out.append(_system(f"{retriever} {reorder} k{k}", scores, {"retriever": retriever, "reorder": reorder,
                                                                   "k": k}))
    return out


@pytest.fixture(scope="module")
def grid():
    return build_report(grid_systems(), [METRIC], **FAST)


def test_the_grid_gets_one_answer_per_factor_in_the_margins_words(grid):
    answers = {a["factor"]: a for a in grid.data["verdict"]["factors"][METRIC]}
    assert list(answers) == ["retriever", "reorder", "k"]
    assert answers["retriever"]["best_level"] == "dense" and answers["retriever"]["word"] == "best"
    assert answers["retriever"]["line"].startswith("retriever: dense best (")
    assert answers["reorder"]["word"] == "no practical difference"  # 0.002 apart, margin 0.01
    assert answers["k"]["best_level"] == "10" and answers["k"]["edge"] == "largest"
    assert "at the edge of the grid" in answers["k"]["line"]
    assert "never pays for more chunks" in answers["k"]["line"]  # context utility at each job's own k
    # the ANOVA with topics as blocks is in the JSON, with a row per factor
    sources = [r["source"] for r in grid.data["verdict"]["anova"][METRIC]["rows"]]
    assert {"retriever", "reorder", "k", "topic", "residual"} <= set(sources)


def test_the_verdict_is_the_one_inference_of_stats(grid):
    """The report's verdict is ``stats.infer`` on the same matrix, with the same seed: nothing
    recomputed elsewhere, and the best set is the sweep table's ``tied_with_best``."""
    direct = stats.infer(grid.matrices[METRIC], grid.names, metric=METRIC, margin=0.01, alpha=0.05,
                         n_permutations=FAST["n_permutations"], seed=0)
    mine = grid.data["verdict"]["metrics"][METRIC]
    assert mine["best"] == direct.best == "dense none k10"
    assert mine["best_set"] == direct.best_set == grid.data["tied_with_best"][METRIC]
    assert mine["hsd"] == pytest.approx(direct.hsd, abs=1e-15)
    assert mine["evidence"]["dense lost_in_the_middle k10"]["p"] == direct.evidence["dense lost_in_the_middle k10"].p


def test_report_md_leads_with_the_answer_and_the_console_says_the_same(grid):
    md = format_markdown(grid).splitlines()
    first = "\n".join(md[:30])
    lines = verdict_lines(grid.data, METRIC)
    assert len(lines) == 4 and lines[-1].startswith(f"best on {METRIC}: dense none k10 ")
    for line in lines:  # every factor's verdict and the best set with its evidence: on the first screen
        assert f"- {line}" in first
    assert "p " in lines[-1] and "could also be the best" in lines[-1]
    assert "## Every test" not in "\n".join(md)  # one test by default
    console = format_table(grid)
    assert console.splitlines()[:4] == lines  # word for word
    # marks against the best, never silently against the first job
    assert grid.data["verdict"]["against"] == "best" and grid.data["baseline"] == "dense none k10"
    assert not grid.data["baseline_named"]


def test_a_named_baseline_takes_the_marks_and_keeps_the_paired_statistics():
    systems = grid_systems()
    report = build_report(systems, [METRIC], baseline="bm25 none k3", all_tests=True, **FAST)
    assert report.data["verdict"]["against"] == "baseline" and report.data["baseline"] == "bm25 none k3"
    vs = report.data["verdict"]["vs_baseline"][METRIC]
    assert vs["dense none k10"]["word"] == "better" and "bm25 none k3" not in vs
    # the full table of tests: stats.compare_metrics against the same baseline, values unchanged
    old = stats.compare_metrics(report.matrices, report.names, baseline="bm25 none k3", n_resamples=500,
                                n_permutations=2000, seed=0)
    assert report.data["comparisons"][0]["vs_baseline"] == finite(old[0].to_dict())["vs_baseline"]
    assert "## Every test (--all-tests), against bm25 none k3" in format_markdown(report)


def test_two_systems_get_one_sentence_naming_the_settings_they_differ_in():
    rng = np.random.default_rng(3)
    x = rng.uniform(0.2, 0.6, N_QUERIES)
    a = _system("bm25 k10", x, {"retriever": "bm25", "k": "10"}, sweep=None)
    b = _system("dense k5", x + 0.2 + rng.normal(0, 0.05, N_QUERIES), {"retriever": "dense", "k": "5"}, sweep=None)
    report = build_report([a, b], ["ndcg_at_10"], **FAST)
    (line,) = verdict_lines(report.data, "ndcg_at_10")
    assert line.startswith("dense k5 is better than bm25 k10 on ndcg_at_10 by 0.")
    assert f"{N_QUERIES} queries)" in line and "(p " in line
    assert line.endswith("; they differ in retriever=dense vs retriever=bm25, k=5 vs k=10"), line
    # ndcg_at_10 scores both at 10 although their k differ: said
    assert any("k differ (k=5, k=10)" in n for n in report.data["notes"])
    assert format_table(report).splitlines()[1] == line


@pytest.mark.parametrize("margin", [0, -0.01, float("nan"), float("inf")])
def test_a_margin_that_is_not_positive_and_finite_is_bad_input(margin):
    with pytest.raises(InputError, match="margin must be a positive finite number"):
        build_report(grid_systems()[:3], [METRIC], margin=margin, **FAST)


def test_one_query_is_bad_input():
    one = [_system(n, np.array([0.5 + i / 10]), {"k": str(i + 3)}) for i, n in enumerate(("a", "b"))]
    with pytest.raises(InputError):
        build_report(one, [METRIC], **FAST)
