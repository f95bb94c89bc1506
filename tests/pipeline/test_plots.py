"""Figures (pipeline/figures.py): they build, show what they should, and save as PNG."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest

from pipeline import figures as plots

if TYPE_CHECKING:  # matplotlib loads with the first figure, as in pipeline/figures.py, not when -n workers collect
    from matplotlib.figure import Figure

K_MAX = 10
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _curves(scale: float = 1.0) -> dict[str, np.ndarray]:
    ks = np.arange(1, K_MAX + 1)
    return {
        "precision": scale * 0.8 / np.sqrt(ks),
        "recall": scale * (1 - np.exp(-ks / 4)),
        "ndcg": scale * np.linspace(0.5, 0.7, K_MAX),
        "map": scale * np.linspace(0.4, 0.5, K_MAX),
        "mrr": scale * np.linspace(0.6, 0.65, K_MAX),
        "context_utility": scale * np.linspace(0.55, 0.75, K_MAX),
    }


def _saved_png(fig: Figure, path) -> bytes:
    fig.savefig(path, dpi=80)
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 10_000  # three labelled panels with lines, not an empty canvas
    return data


def _vlines(ax) -> list:
    return [line for line in ax.lines if line.get_label().startswith("k = ")]


def test_k_sweep_figure(tmp_path):
    curves = _curves()
    fig = plots.k_sweep_figure(curves, k=5, title="bm25-none-k5")
    from matplotlib.figure import Figure

    assert isinstance(fig, Figure)
    axes = fig.axes
    assert len(axes) == 3
    # Lines: precision + recall + k marker; ndcg + map + mrr + marker; utility + marker.
    assert [len(ax.lines) for ax in axes] == [3, 4, 2]
    for ax in axes:
        (vline,) = _vlines(ax)
        assert list(vline.get_xdata()) == [5, 5]
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
        assert ax.get_legend() is not None
    labels = [line.get_label() for line in axes[0].lines]
    assert labels[:2] == ["precision@K", "recall@K"]
    precision_line = axes[0].lines[0]
    np.testing.assert_array_equal(precision_line.get_xdata(), np.arange(1, K_MAX + 1))
    np.testing.assert_allclose(precision_line.get_ydata(), curves["precision"])
    np.testing.assert_allclose(axes[2].lines[0].get_ydata(), curves["context_utility"])
    assert fig.get_suptitle() == "bm25-none-k5"
    _saved_png(fig, tmp_path / "k_sweep.png")


def test_k_sweep_figure_without_optional_curves_and_missing_keys():
    curves = {key: v for key, v in _curves().items() if key not in ("map", "mrr")}
    fig = plots.k_sweep_figure(curves, k=3, title="t")
    assert [len(ax.lines) for ax in fig.axes] == [3, 2, 2]
    assert list(_vlines(fig.axes[1])[0].get_xdata()) == [3, 3]
    with pytest.raises(KeyError):
        plots.k_sweep_figure({"precision": np.ones(3)}, k=1, title="t")


def test_pr_curve_figure(tmp_path):
    curves = _curves()
    fig = plots.pr_curve_figure(curves["precision"], curves["recall"], title="PR")
    (ax,) = fig.axes
    (line,) = ax.lines
    np.testing.assert_allclose(line.get_xdata(), curves["recall"])  # recall on x
    np.testing.assert_allclose(line.get_ydata(), curves["precision"])
    assert ax.get_xlabel() == "recall@K" and ax.get_ylabel() == "precision@K"
    annotations = [text.get_text() for text in ax.texts]
    assert annotations == ["K=1", "K=3", "K=5", "K=10"]
    # The K=3 label sits on the K=3 point.
    (k3,) = [text for text in ax.texts if text.get_text() == "K=3"]
    assert k3.xy == pytest.approx((curves["recall"][2], curves["precision"][2]))
    _saved_png(fig, tmp_path / "pr.png")
    with pytest.raises(ValueError):
        plots.pr_curve_figure(np.ones(3), np.ones(4), title="bad")


def test_sweep_summary_figure(tmp_path):
    names = ["bm25-none-k5", "dense-none-k5", "hybrid-lost_in_the_middle-k5"]
    table = pd.DataFrame(
        {
            "run_name": names,
            "ndcg_at_5": [0.61, 0.68, 0.72],
            "recall_at_5": [0.55, 0.63, 0.70],
        }
    )
    curves = {names[0]: _curves(0.9), names[1]: _curves(1.0)}  # the third job has no curves
    fig = plots.sweep_summary_figure(table, curves, ["ndcg_at_5", "recall_at_5"])
    bar_ax, ndcg_ax, recall_ax = fig.axes
    assert len(fig.axes) == 3
    # One bar per job and metric, heights (widths, horizontal bars) equal to the table.
    assert len(bar_ax.patches) == 6
    widths = sorted(round(p.get_width(), 6) for p in bar_ax.patches)
    assert widths == sorted([0.61, 0.68, 0.72, 0.55, 0.63, 0.70])
    assert [t.get_text() for t in bar_ax.get_yticklabels()] == names
    # One line per job that has curves.
    assert [line.get_label() for line in ndcg_ax.lines] == names[:2]
    assert [line.get_label() for line in recall_ax.lines] == names[:2]
    np.testing.assert_allclose(ndcg_ax.lines[1].get_ydata(), curves[names[1]]["ndcg"])
    np.testing.assert_allclose(recall_ax.lines[0].get_ydata(), curves[names[0]]["recall"])
    _saved_png(fig, tmp_path / "sweep.png")


def test_sweep_summary_uses_the_index_without_a_name_column():
    table = pd.DataFrame({"ndcg_at_10": [0.3, 0.4]}, index=["a", "b"])
    fig = plots.sweep_summary_figure(table, {"a": _curves()}, ["ndcg_at_10"])
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["a", "b"]
    assert len(fig.axes[0].patches) == 2
    assert [line.get_label() for line in fig.axes[1].lines] == ["a"]


def test_sweep_summary_values_beside_the_bars_up_to_30_jobs():
    def value_labels(n_jobs: int) -> list[str]:
        table = pd.DataFrame({"ndcg_at_10": np.linspace(0.3, 0.6, n_jobs)}, index=[f"job{i}" for i in range(n_jobs)])
        fig = plots.sweep_summary_figure(table, {}, ["ndcg_at_10"])
        return [t.get_text() for t in next(ax for ax in fig.axes if ax.patches).texts]

    assert value_labels(plots.BAR_LABELS_MAX_JOBS)[:2] == ["0.300", "0.310"]
    assert value_labels(plots.BAR_LABELS_MAX_JOBS + 1) == []  # they would overlap: the table has them


def test_run_figures_are_written_whole_and_show_each_runs_data(tmp_path):
    """save_run_figures writes both PNGs (atomically: no temporary file stays), and the data,
    k and the title reach the pixels: runs that differ in any of them give other files."""
    runs = [(_curves(1.0), 5, "k5 bm25"), (_curves(0.6), 5, "k5 bm25"), (_curves(1.0), 3, "k5 bm25"),
            (_curves(1.0), 5, "k5 litm bm25")]
    for i, (curves, k, title) in enumerate(runs):
        written = plots.save_run_figures(tmp_path / str(i), curves, k, title)
        assert [p.name for p in written] == list(plots.RUN_FIGURES)
        assert sorted(p.name for p in (tmp_path / str(i)).iterdir()) == sorted(plots.RUN_FIGURES)
        assert all(p.read_bytes()[:8] == PNG_MAGIC for p in written)
    assert len({(tmp_path / str(i) / "k_sweep.png").read_bytes() for i in range(len(runs))}) == len(runs)


def test_per_query_differences_of_a_sweep_draw_the_ten_that_differ_most():
    rng = np.random.default_rng(3)
    shifts = {f"job{i}": 0.01 * i * (-1) ** i for i in range(15)}  # |mean| grows with i
    diffs = {"ndcg_at_10": {name: shift + rng.normal(0, 0.001, 40) for name, shift in shifts.items()}}
    fig = plots.per_query_diff_figure(diffs, "best", "differences")
    (ax,) = fig.axes
    drawn = [line.get_label() for line in ax.lines if line.get_label().startswith("job")]
    assert drawn == [f"job{i}" for i in range(5, 15)]  # the ten largest, in the report's order
    assert "the 10 of 15 systems" in fig.get_suptitle()
    assert len(fig.legends[0].get_texts()) == 10
    few = plots.per_query_diff_figure({"mrr": {name: diffs["ndcg_at_10"][name] for name in ("job1", "job2")}}, "b", "t")
    assert [line.get_label() for line in few.axes[0].lines][:2] == ["job1", "job2"]
    assert "systems" not in few.get_suptitle()


def test_a_large_sweep_summary_puts_the_curves_on_top_and_the_bars_below():
    n = plots.SIDE_BY_SIDE_MAX_JOBS + 1
    table = pd.DataFrame({"run_name": [f"job{i}" for i in range(n)], "ndcg_at_10": np.linspace(0.3, 0.6, n)})
    fig = plots.sweep_summary_figure(table, {"job0 (+12 with the same ranking)": _curves()}, ["ndcg_at_10"])
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()  # constrained layout places the axes when drawn
    bars = next(ax for ax in fig.axes if ax.patches)
    ndcg, recall = (next(ax for ax in fig.axes if ax.get_ylabel() == label) for label in ("nDCG@K", "recall@K"))
    assert bars.get_position().y1 < ndcg.get_position().y0  # below the curves
    assert bars.get_position().width > 2 * ndcg.get_position().width  # across the figure
    assert bars.get_ylim() == (n - 0.5, -0.5)  # first job on top, no empty margins
    assert [t.get_text() for t in recall.get_legend().get_texts()] == ["job0 (+12 with the same ranking)"]


def test_per_query_differences_name_the_queries_that_gained_and_lost_most():
    values = np.array([0.0, 0.5, -0.25, 0.1, -0.75, 0.0, 0.3, 0.05])
    ids = [f"q{i}" for i in range(len(values))]
    fig = plots.per_query_diff_figure({"ndcg_at_10": {"dense": values}}, "bm25", "t", query_ids=ids)
    labels = {t.get_text(): t.xy for t in fig.axes[0].texts}
    # the 3 largest gains q1 (0.5), q6 (0.3), q3 (0.1); of the 3 lowest, q4 (-0.75) and q2 (-0.25) but not
    # q5 (0.0): no difference is no gain or loss
    assert set(labels) == {"q1", "q6", "q3", "q2", "q4"}
    assert labels["q1"] == (1, 0.5) and labels["q4"] == (8, -0.75) and labels["q2"] == (7, -0.25)
    unlabelled = plots.per_query_diff_figure({"ndcg_at_10": {"dense": values}}, "bm25", "t")
    assert not unlabelled.axes[0].texts
    with pytest.raises(ValueError, match="8 differences for 2 query ids"):
        plots.per_query_diff_figure({"ndcg_at_10": {"dense": values}}, "bm25", "t", query_ids=["a", "b"])


def test_a_jobs_figures_drawn_later_from_its_folder_are_the_ones_the_job_draws(tmp_path):
    """draw_job_figures (what a sweep's job leaves out, docs/results.md) reads the curves from
    metrics.json (through JSON: float64 exactly), k and the title from record.json, and gives
    the same PNG bytes as save_run_figures on the job's own curves; a job folder works too."""
    import json

    from pipeline.errors import InputError

    curves = _curves(0.9)
    expected = plots.save_run_figures(tmp_path / "direct", curves, 3, "k3 litm bm25")
    results = tmp_path / "job" / "results"
    results.mkdir(parents=True)
    (results / "metrics.json").write_text(json.dumps({"curves": {n: v.tolist() for n, v in curves.items()}}))
    (results / "record.json").write_text(json.dumps({"k": 3, "run_name": "k3 litm bm25"}))
    drawn = plots.draw_job_figures(tmp_path / "job")  # the job folder: its results/ is found
    assert [p.parent for p in drawn] == [results / "plots"] * 2
    assert [p.read_bytes() for p in drawn] == [p.read_bytes() for p in expected]
    (results / "record.json").write_text(json.dumps({"k": 5, "run_name": "k3 litm bm25"}))
    assert plots.draw_job_figures(results)[0].read_bytes() != expected[0].read_bytes()  # k is drawn
    with pytest.raises(InputError, match="not a finished job's results folder"):
        plots.draw_job_figures(tmp_path / "direct")
