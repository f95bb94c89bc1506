"""What a sweep shows for each job and at its end, said once and plainly (issue 37, item 4)."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline import figures
from pipeline.job import job_line
from pipeline.sweep import table as sweep_table


def test_a_job_relative_objective_is_printed_once_on_the_job_line():
    metrics = {"context_utility_at_k": 0.5251, "recall_at_3": 0.35, "mrr": 0.7, "context_utility_at_3": 0.5251,
               "ndcg_at_10": 0.58}
    line = job_line(4, "k3 bm25", 3, "context_utility_at_k", metrics)
    assert line == "#4 k3 bm25: context_utility_at_k 0.5251, recall_at_3 0.3500, mrr 0.7000"
    line = job_line(4, "k3 bm25", 3, "ndcg_at_10", metrics)  # another objective: context utility at k is news
    assert line == "#4 k3 bm25: ndcg_at_10 0.5800, recall_at_3 0.3500, mrr 0.7000, context_utility_at_3 0.5251"
    assert job_line(0, "x", 5, "recall_at_k", {"recall_at_k": 0.4, "recall_at_5": 0.4, "mrr": 0.1}) == \
        "#0 x: recall_at_k 0.4000, mrr 0.1000"


def test_sweep_summary_png_draws_the_objective_once_when_it_is_a_headline_column(tmp_path, monkeypatch):
    drawn = []
    real = figures.sweep_summary_figure

    def keep(*args, **kwargs):
        drawn.append(real(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(figures, "sweep_summary_figure", keep)
    table = pd.DataFrame({"run_name": ["a", "b"], "context_utility_at_k": [0.6, 0.5],
                          "context_utility_at_k_ci_low": [0.5, 0.4], "context_utility_at_k_ci_high": [0.7, 0.6],
                          "ndcg_at_k": [0.55, 0.45], "tied_with_best": [True, False]})
    sweep_table.draw_summary(table, {}, "context_utility_at_k", tmp_path)
    bars = drawn[0].axes[0]
    labels = [t.get_text() for t in bars.get_legend().get_texts()]
    assert labels == ["context_utility_at_k", "ndcg_at_k"]  # was context_utility_at_k twice
    assert len(bars.patches) == 2 * 2  # two jobs, two metrics
    assert (tmp_path / "sweep_summary.png").stat().st_size > 1000


@pytest.mark.parametrize("results, expected, shown", [
    ([0, 0, 1, 1, 2, 3, 4, 5], "(5 of 8 jobs shown, one job for each of the 5 best of 6 distinct results (jobs with "
                               "identical scores on every query are one); all 8 are in summary/sweep_table.md)",
     ["j0", "j2", "j4", "j5", "j6"]),
    ([0, 0, 1, 1, 2, 2, 3, 3], "(4 of 8 jobs shown, one job per distinct result (4 results: jobs with identical "
                               "scores on every query are one); all 8 are in summary/sweep_table.md)",
     ["j0", "j2", "j4", "j6"]),
    ([0, 1, 2, 3, 4, 5, 6, 7], "(the 5 best of 8 jobs; all 8 are in summary/sweep_table.md)",
     ["j0", "j1", "j2", "j3", "j4"]),
])
def test_the_console_rows_say_plainly_which_jobs_they_show(results, expected, shown):
    """Was "(the best job of the first 5 of the 18 distinct results; all 18 jobs in summary/sweep_table.md)"."""
    headline = pd.DataFrame({"run_name": [f"j{i}" for i in range(8)], "ndcg_at_10": [0.9 - i / 100 for i in range(8)]})
    rows, note = sweep_table.console_rows(headline, results)
    assert note == expected
    assert list(rows["run_name"]) == shown


def test_every_jobs_own_result_says_the_best_five():
    headline = pd.DataFrame({"run_name": [f"j{i}" for i in range(8)], "ndcg_at_10": [0.5] * 8})
    _, note = sweep_table.console_rows(headline, None)
    assert note == "(the 5 best of 8 jobs; all 8 are in summary/sweep_table.md)"
