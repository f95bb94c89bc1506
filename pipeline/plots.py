"""K-sweep, precision-recall and sweep-summary figures (matplotlib, no pyplot).

Figures are built as ``matplotlib.figure.Figure`` objects, never through pyplot's global
state, so they are safe in threads and parallel Hydra jobs; ``fig.savefig(path)`` renders
them with the Agg canvas. The caller (tracking) saves and logs them.
"""

from __future__ import annotations

from pathlib import Path

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from numpy.typing import NDArray

# Display names for the curve keys of the MLflow contract (curve/<key>).
CURVE_LABELS = {
    "precision": "precision@K",
    "recall": "recall@K",
    "ndcg": "nDCG@K",
    "map": "MAP@K",
    "mrr": "MRR@K",
    "context_utility": "context utility@K",
}


def _ks(values: NDArray) -> NDArray[np.int64]:
    """K = 1..len(values): curves hold the value at K in entry K - 1."""
    return np.arange(1, len(values) + 1)


def _mark_k(ax: Axes, k: int) -> None:
    ax.axvline(k, color="0.4", linestyle="--", linewidth=1.0, label=f"k = {k}")


def _k_axis(ax: Axes, k_max: int) -> None:
    ax.set_xlabel("K (chunks in context)")
    ax.set_xlim(0.5, max(k_max, 1) + 0.5)
    if k_max <= 20:
        ax.set_xticks(np.arange(1, k_max + 1))
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)


def k_sweep_figure(curves: Mapping[str, NDArray], k: int, title: str) -> Figure:
    """Three panels of mean metric vs K = 1..k_max, with the configured k marked.

    Left: precision and recall; middle: nDCG (plus MAP and MRR when given); right: context
    utility under the configured placement and attention curve. ``curves`` maps the keys
    precision, recall, ndcg, context_utility (map, mrr optional) to arrays whose entry K - 1
    is the mean value at K.
    """
    missing = [key for key in ("precision", "recall", "ndcg", "context_utility") if key not in curves]
    if missing:
        raise KeyError(f"k_sweep_figure: curves lack {missing}")
    # Fixed margins rather than a layout engine: a job saves its figures once per run, and
    # constrained layout draws every figure twice.
    fig = Figure(figsize=(15, 4.5))
    fig.subplots_adjust(left=0.045, right=0.99, bottom=0.12, top=0.86, wspace=0.2)
    axes = fig.subplots(1, 3)
    panels = [
        (axes[0], ("precision", "recall"), "Precision and recall"),
        (axes[1], ("ndcg", "map", "mrr"), "Ranking quality"),
        (axes[2], ("context_utility",), "Context utility (placed order)"),
    ]
    k_max = max(len(np.asarray(values)) for values in curves.values())
    for ax, keys, panel_title in panels:
        for key in keys:
            if key in curves:
                values = np.asarray(curves[key], dtype=np.float64)
                ax.plot(_ks(values), values, marker="o", markersize=3, label=CURVE_LABELS[key])
        _mark_k(ax, k)
        _k_axis(ax, k_max)
        ax.set_ylabel("mean over queries")
        ax.set_title(panel_title)
        ax.legend(loc="best", fontsize="small")
    fig.suptitle(title)
    return fig


def pr_curve_figure(
    precision: NDArray,
    recall: NDArray,
    title: str,
    label_ks: Sequence[int] | None = None,
) -> Figure:
    """Mean precision@K against mean recall@K for K = 1..k_max, a few points labelled by K.

    ``label_ks`` defaults to K = 1, 3, 5, 10, 20, 50, 100 (those <= k_max) and k_max.
    """
    precision = np.asarray(precision, dtype=np.float64)
    recall = np.asarray(recall, dtype=np.float64)
    if precision.shape != recall.shape or precision.ndim != 1:
        raise ValueError(f"pr_curve_figure: precision {precision.shape} and recall {recall.shape} differ")
    k_max = len(precision)
    if label_ks is None:
        label_ks = sorted({K for K in (1, 3, 5, 10, 20, 50, 100) if K <= k_max} | {k_max})
    fig = Figure(figsize=(6, 5))
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.11, top=0.92)
    ax = fig.subplots()
    ax.plot(recall, precision, marker="o", markersize=3, label="K = 1..%d" % k_max)
    for K in label_ks:
        if 1 <= K <= k_max:
            ax.annotate(
                f"K={K}",
                (recall[K - 1], precision[K - 1]),
                textcoords="offset points",
                xytext=(5, 5),
                fontsize="small",
            )
    ax.set_xlabel("recall@K")
    ax.set_ylabel("precision@K")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    return fig


def sweep_summary_figure(
    table: pd.DataFrame,
    curves: Mapping[str, Mapping[str, NDArray]],
    metric_keys: Sequence[str],
    name_column: str = "run_name",
    title: str = "Sweep summary",
) -> Figure:
    """Compare the jobs of a sweep: headline metrics per job, nDCG and recall vs K per job.

    Left: horizontal bars of each metric in ``metric_keys`` (columns of ``table``, one row
    per job, named by ``name_column`` or, if absent, the index). Middle and right: nDCG@K and
    recall@K per job from ``curves[run_name]["ndcg"]`` and ``["recall"]`` (jobs without that
    curve are skipped).
    """
    if not metric_keys:
        raise ValueError("sweep_summary_figure: metric_keys is empty")
    names = [str(n) for n in (table[name_column] if name_column in table.columns else table.index)]
    n_jobs = len(names)
    fig = Figure(figsize=(16, max(4.5, 0.35 * n_jobs * len(metric_keys) + 2)), layout="constrained")
    bar_ax, ndcg_ax, recall_ax = fig.subplots(1, 3)

    positions = np.arange(n_jobs)
    height = 0.8 / len(metric_keys)
    for j, key in enumerate(metric_keys):
        values = table[key].to_numpy(dtype=np.float64)
        bars = bar_ax.barh(
            positions + (j - (len(metric_keys) - 1) / 2) * height, values, height=height, label=key
        )
        bar_ax.bar_label(bars, fmt="%.3f", fontsize="x-small", padding=2)
    bar_ax.set_yticks(positions, labels=names, fontsize="small")
    bar_ax.invert_yaxis()  # first job on top, like the table
    bar_ax.set_xlabel("mean over queries")
    bar_ax.set_title("Headline metrics per job")
    bar_ax.grid(True, axis="x", alpha=0.3)
    bar_ax.margins(x=0.15)  # room for the value labels
    bar_ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=min(len(metric_keys), 3), fontsize="small")

    for ax, key in ((ndcg_ax, "ndcg"), (recall_ax, "recall")):
        k_max = 1
        for name in names:
            values = curves.get(name, {}).get(key)
            if values is None:
                continue
            values = np.asarray(values, dtype=np.float64)
            k_max = max(k_max, len(values))
            ax.plot(_ks(values), values, marker="o", markersize=3, label=name)
        _k_axis(ax, k_max)
        ax.set_ylabel(CURVE_LABELS[key])
        ax.set_title(f"{CURVE_LABELS[key]} per job")
        if ax.lines:
            ax.legend(loc="best", fontsize="x-small")
    fig.suptitle(title)
    return fig


def save_run_figures(folder: str | Path, curves: Mapping[str, NDArray], k: int, title: str) -> list[Path]:
    """A run's figures as PNG files in ``folder``: the K-sweep and the precision-recall curve."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    figures = {
        "k_sweep.png": k_sweep_figure(curves, k, title),
        "precision_recall.png": pr_curve_figure(curves["precision"], curves["recall"], title),
    }
    for name, figure in figures.items():
        figure.savefig(folder / name, dpi=110)
    return [folder / name for name in figures]
