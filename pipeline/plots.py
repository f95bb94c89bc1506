"""K-sweep, precision-recall and sweep-summary figures (matplotlib, no pyplot).

Figures are built as ``matplotlib.figure.Figure`` objects, never through pyplot's global
state, so they are safe in threads and parallel Hydra jobs; ``fig.savefig(path)`` renders
them with the Agg canvas. The caller (tracking) saves and logs them.

matplotlib costs a job ~1.5 s of CPU (its import and two figures). A job without a tracking
process hands its figures to a figure process, ``python -m pipeline.plots --stdin``
(:class:`FigureProcess`), started when the job starts: it imports matplotlib while the job
computes and draws while the job writes its other results; the job waits for the figures
before it writes its record, and draws them itself if that process failed. With a tracking
process, that process draws the figures a sequential sweep's jobs leave to it, and those
of a single job that finds the shared tracking process running
(``pipeline.tracking.TrackerFigures``); every other job draws its own.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from pipeline.metrics import CURVES, LABELS, STANDARD_KS

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

#: Display names for the curve keys of the MLflow contract (curve/<key>), from the metric table.
CURVE_LABELS = {name: LABELS[name] for name in CURVES}
#: The files :func:`save_run_figures` writes in a run's ``plots`` folder.
RUN_FIGURES = ("k_sweep.png", "precision_recall.png")


def _figure(**kwargs: Any) -> Figure:
    """``matplotlib.figure.Figure(**kwargs)``; matplotlib is imported on the first figure, so
    importing this module (a job that hands its figures to the figure process) stays cheap."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


#: Resolution of a run's PNGs (1650 x 495 px for the K-sweep, 660 x 550 for the PR curve).
RUN_DPI = 110
#: zorder of a run figure's data (curves, k marker, labels): above every static artist of its
#: axes (grid 1.5, spines 2.5, panel titles 3), so that drawing the static part first and the
#: data over it (:func:`_render_png`) gives the pixels of one full draw.
_DATA_Z = 3.5


def _set_dynamic(fig: Figure, artists: Sequence[Any]) -> None:
    """Mark what changes from one run to the next; :func:`_render_png` draws the rest once.

    They are kept in the order of a full draw: axes by axes, by zorder (stable, in the order
    of ``get_children``), then the figure's own artists (the suptitle)."""
    chosen = {id(artist) for artist in artists}
    order: list[Any] = []
    for ax in fig.axes:
        order += sorted((a for a in ax.get_children() if id(a) in chosen), key=lambda a: a.get_zorder())
    order += [a for a in artists if a.axes is None]
    if len(order) != len(artists):
        raise ValueError("_set_dynamic: an artist is neither in an axes nor the figure's own")
    fig._pipeline_dynamic = order  # type: ignore[attr-defined]
    fig._pipeline_background = None  # type: ignore[attr-defined]


def _render_png(fig: Figure, fh: Any) -> None:
    """``fig.savefig(fh, format="png")`` at the figure's dpi, for figures redrawn run after run.

    A full draw lays out and rasterises every tick label, axis label and panel title again
    (two thirds of the time). Here the static part is drawn once, with the data hidden, and
    kept as a bitmap; each run restores it and draws only the data artists over it. Their
    zorder is above every static artist's and each stays inside its own axes, so the pixels
    are those of a full draw (tests/pipeline/test_plots.py compares them)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.image import imsave

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    dynamic = fig._pipeline_dynamic  # type: ignore[attr-defined]
    if fig._pipeline_background is None:  # type: ignore[attr-defined]
        for artist in dynamic:
            artist.set_visible(False)
        try:
            canvas.draw()
        finally:
            for artist in dynamic:
                artist.set_visible(True)
        fig._pipeline_background = canvas.copy_from_bbox(fig.bbox)  # type: ignore[attr-defined]
    else:
        canvas.restore_region(fig._pipeline_background)  # type: ignore[attr-defined]
    renderer = canvas.get_renderer()
    for artist in dynamic:
        artist.draw(renderer)
    imsave(fh, canvas.buffer_rgba(), format="png", origin="upper", dpi=fig.dpi,
           pil_kwargs={"compress_level": 1})  # zlib 1: 1/3 of the time of 6


def _ks(values: NDArray) -> NDArray[np.int64]:
    """K = 1..len(values): curves hold the value at K in entry K - 1."""
    return np.arange(1, len(values) + 1)


def _mark_k(ax: Axes, k: int) -> Any:
    return ax.axvline(k, color="0.4", linestyle="--", linewidth=1.0, label=f"k = {k}")


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
    fig = _figure(figsize=(15, 4.5), dpi=RUN_DPI)
    fig.subplots_adjust(left=0.045, right=0.99, bottom=0.12, top=0.86, wspace=0.2)
    axes = fig.subplots(1, 3)
    panels = [
        (axes[0], ("precision", "recall"), "Precision and recall"),
        (axes[1], ("ndcg", "map", "mrr"), "Ranking quality"),
        (axes[2], ("context_utility",), "Context utility (placed order)"),
    ]
    k_max = max(len(np.asarray(values)) for values in curves.values())
    lines, marks, legends = [], [], []
    for ax, keys, panel_title in panels:
        for key in keys:
            if key in curves:
                values = np.asarray(curves[key], dtype=np.float64)
                (line,) = ax.plot(_ks(values), values, marker="o", markersize=3, label=CURVE_LABELS[key],
                                  zorder=_DATA_Z)
                lines.append((key, line))
        marks.append(_mark_k(ax, k))
        marks[-1].set_zorder(_DATA_Z)
        _k_axis(ax, k_max)
        ax.set_ylabel("mean over queries")
        ax.set_title(panel_title, y=1.0)  # y given: no re-measuring of the axes at every draw
        legends.append(ax.legend(loc="best", fontsize="small"))
    suptitle = fig.suptitle(title)

    def update(curves: Mapping[str, NDArray], k: int, title: str) -> None:
        for key, line in lines:
            values = np.asarray(curves[key], dtype=np.float64)
            line.set_data(_ks(values), values)
        for mark, legend in zip(marks, legends):
            mark.set_xdata([k, k])
            mark.set_label(f"k = {k}")
            legend.texts[-1].set_text(f"k = {k}")  # the k marker is each panel's last entry
        suptitle.set_text(title)

    fig._pipeline_update = update  # type: ignore[attr-defined]  (save_run_figures redraws it for the next run)
    _set_dynamic(fig, [line for _, line in lines] + marks + legends + [suptitle])
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
        label_ks = sorted({K for K in STANDARD_KS if K <= k_max} | {k_max})
    fig = _figure(figsize=(6, 5), dpi=RUN_DPI)
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.11, top=0.92)
    ax = fig.subplots()
    (line,) = ax.plot(recall, precision, marker="o", markersize=3, label="K = 1..%d" % k_max, zorder=_DATA_Z)
    notes = []
    for K in label_ks:
        if 1 <= K <= k_max:
            notes.append((K, ax.annotate(
                f"K={K}",
                (recall[K - 1], precision[K - 1]),
                textcoords="offset points",
                xytext=(5, 5),
                fontsize="small",
                zorder=_DATA_Z + 0.1,
            )))
    ax.set_xlabel("recall@K")
    ax.set_ylabel("precision@K")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title(title, y=1.0)  # y given: no re-measuring of the axes at every draw
    legend = ax.legend(loc="best", fontsize="small")

    def update(precision: NDArray, recall: NDArray, title: str) -> None:
        precision, recall = np.asarray(precision, dtype=np.float64), np.asarray(recall, dtype=np.float64)
        line.set_data(recall, precision)
        for K, note in notes:
            note.xy = (recall[K - 1], precision[K - 1])
        ax.title.set_text(title)

    fig._pipeline_update = update  # type: ignore[attr-defined]  (save_run_figures redraws it for the next run)
    _set_dynamic(fig, [line, *(note for _, note in notes), ax.title, legend])
    return fig


#: Up to this many jobs the sweep summary puts the bars beside the curves; past it, below them.
SIDE_BY_SIDE_MAX_JOBS = 12
#: Up to this many jobs the sweep summary writes each bar's value beside it.
BAR_LABELS_MAX_JOBS = 30
#: PNG options of the summary and comparison figures: zlib level 1 writes a large figure in a
#: third of level 6's time, for files about 10% larger.
PNG_FAST = {"pil_kwargs": {"compress_level": 1}}


def sweep_summary_figure(
    table: pd.DataFrame,
    curves: Mapping[str, Mapping[str, NDArray]],
    metric_keys: Sequence[str],
    name_column: str = "run_name",
    title: str = "Sweep summary",
    ci: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
    tied: Sequence[str] = (),
) -> Figure:
    """Compare the jobs of a sweep: headline metrics per job, nDCG and recall vs K.

    The bars: each metric in ``metric_keys`` (columns of ``table``, one row per job, named
    by ``name_column`` or, if absent, the index), with the 95% CI as error bars where
    ``ci[key] = (low, high)`` gives it (in table order), and each bar's value beside it up to
    :data:`BAR_LABELS_MAX_JOBS` jobs; jobs named in ``tied`` (statistically tied with the
    best) are marked "≈ best". The curves: nDCG@K and recall@K, one line per entry of
    ``curves`` that names a job or a group of jobs with identical rankings (the caller groups
    them: identical rankings have identical curves); the y-range fits the values.

    Up to :data:`SIDE_BY_SIDE_MAX_JOBS` jobs the bars are on the left and the curves in the
    middle and on the right, the legends below, outside the data. Past that the curves are on
    top at their usual height, with their legend in the recall panel, and the bars below
    across the width.
    """
    if not metric_keys:
        raise ValueError("sweep_summary_figure: metric_keys is empty")
    names = [str(n) for n in (table[name_column] if name_column in table.columns else table.index)]
    n_jobs = len(names)
    lines = [name for name in curves if name in names] + [name for name in curves if name not in names]
    bars_height = 0.3 * n_jobs * max(1, len(metric_keys)) ** 0.5 + 1.0  # inches
    if n_jobs <= SIDE_BY_SIDE_MAX_JOBS:
        fig = _figure(figsize=(15, max(4.8, bars_height + 1.5)), layout="constrained")
        bar_ax, ndcg_ax, recall_ax = fig.subplots(1, 3, width_ratios=[1.3, 1, 1])
    else:  # the curves on top at their usual height, the bars below across the width
        fig = _figure(figsize=(15, 4.5 + bars_height + 2.0), layout="constrained")
        panels = fig.subplot_mosaic([["ndcg", "recall"], ["bars", "bars"]], height_ratios=[4.0, bars_height])
        bar_ax, ndcg_ax, recall_ax = panels["bars"], panels["ndcg"], panels["recall"]

    positions = np.arange(n_jobs)
    height = 0.8 / len(metric_keys)
    low_all, high_all = [], []
    for j, key in enumerate(metric_keys):
        values = table[key].to_numpy(dtype=np.float64)
        y = positions + (j - (len(metric_keys) - 1) / 2) * height
        bars = bar_ax.barh(y, values, height=height, label=key)
        low_all.append(values)
        high_all.append(values)
        if ci and key in ci:
            low, high = (np.asarray(v, dtype=np.float64) for v in ci[key])
            bar_ax.errorbar(values, y, xerr=[values - low, high - values], fmt="none", ecolor="0.2",
                            capsize=2, linewidth=0.8)
            low_all.append(low)
            high_all.append(high)
        if n_jobs <= BAR_LABELS_MAX_JOBS:  # past that they overlap; sweep_table.md has every value
            bar_ax.bar_label(bars, fmt="%.3f", fontsize="x-small", padding=2)
    labels = [f"{name}  ≈ best" if name in tied else name for name in names]
    bar_ax.set_yticks(positions, labels=labels, fontsize="small" if n_jobs <= 20 else "x-small")
    bar_ax.set_ylim(max(n_jobs, 1) - 0.5, -0.5)  # first job on top, like the table; no margins
    bar_ax.set_xlabel("mean over queries (bars: 95% CI)" if ci else "mean over queries")
    bar_ax.set_title("Headline metrics per job")
    bar_ax.grid(True, axis="x", alpha=0.3)
    lo = float(np.nanmin(np.concatenate(low_all))) if n_jobs else 0.0
    hi = float(np.nanmax(np.concatenate(high_all))) if n_jobs else 1.0
    span = max(hi - lo, 0.05)
    bar_ax.set_xlim(max(0.0, lo - 0.35 * span), hi + 0.3 * span)  # room for the value labels
    # below the axis label, the same distance (0.5 inch) whatever the height of the panel
    bar_ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5 / bars_height), ncols=min(len(metric_keys), 3),
                  fontsize="small")

    for ax, key in ((ndcg_ax, "ndcg"), (recall_ax, "recall")):
        k_max, ys = 1, []
        for name in lines:
            values = curves.get(name, {}).get(key)
            if values is None:
                continue
            values = np.asarray(values, dtype=np.float64)
            k_max = max(k_max, len(values))
            ys.append(values)
            ax.plot(_ks(values), values, marker="o", markersize=3, label=name)
        _k_axis(ax, k_max)
        if ys:
            top = float(max(v.max() for v in ys))
            ax.set_ylim(-0.02, min(1.02, top + 0.08))
        ax.set_ylabel(CURVE_LABELS[key])
        ax.set_title(f"{CURVE_LABELS[key]} per job" + (" group" if len(lines) < n_jobs else ""))
    if ndcg_ax.lines:  # one legend for both curve panels
        handles, legend_labels = ndcg_ax.get_legend_handles_labels()
        # side by side: below them, outside the data; stacked: beside them, not thirty inches below
        owner, loc = (fig, "outside lower right") if n_jobs <= SIDE_BY_SIDE_MAX_JOBS else (recall_ax, "lower right")
        owner.legend(handles, legend_labels, loc=loc, ncols=1 if len(lines) <= 4 else 2, fontsize="x-small")
    fig.suptitle(title)
    return fig


#: The last run's figures, by the shape of their data, redrawn with the next run's data: in a
#: process that draws many runs (the tracking process of a sweep) building a figure and its
#: ticks costs as much as drawing it. A redrawn figure's PNG is byte-identical to a new one's
#: (tests/pipeline/test_plots.py).
_REUSED: dict[tuple, Any] = {}
_REUSED_LOCK = threading.Lock()  # one run at a time redraws them (threaded launchers)


def save_run_figures(folder: str | Path, curves: Mapping[str, NDArray], k: int, title: str) -> list[Path]:
    """A run's figures as PNG files in ``folder``: the K-sweep and the precision-recall curve."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lengths = tuple(sorted((key, len(np.asarray(v))) for key, v in curves.items()))
    k_key, pr_key = ("k_sweep", lengths), ("pr", len(np.asarray(curves["precision"])))
    from pipeline.results import atomic_open  # a reader never sees half a PNG

    with _REUSED_LOCK:
        if k_key in _REUSED:
            _REUSED[k_key]._pipeline_update(curves, k, title)
        else:
            _REUSED[k_key] = k_sweep_figure(curves, k, title)
        if pr_key in _REUSED:
            _REUSED[pr_key]._pipeline_update(curves["precision"], curves["recall"], title)
        else:
            _REUSED[pr_key] = pr_curve_figure(curves["precision"], curves["recall"], title)
        figures = dict(zip(RUN_FIGURES, (_REUSED[k_key], _REUSED[pr_key])))
        for name, figure in figures.items():
            with atomic_open(folder / name, "wb") as fh:
                _render_png(figure, fh)
    return [folder / name for name in figures]


def figure_request(folder: str | Path, curves: Mapping[str, NDArray], k: int, title: str) -> dict[str, Any]:
    """The arguments of :func:`save_run_figures` as JSON-able data, for a process that draws
    them for a job (the figure process, the shared tracking process): :func:`draw_request`."""
    return {"folder": str(Path(folder).resolve()), "k": int(k), "title": str(title),
            "curves": {key: np.asarray(v, np.float64).tolist() for key, v in curves.items()}}


def draw_request(request: Mapping[str, Any]) -> list[Path]:
    """:func:`save_run_figures` for a :func:`figure_request` (other keys are ignored)."""
    curves = {key: np.asarray(values, np.float64) for key, values in request["curves"].items()}
    return save_run_figures(request["folder"], curves, int(request["k"]), str(request["title"]))


def draw_here(request: Mapping[str, Any]) -> None:
    """Draw a request that the process it was handed to did not draw (it failed or died), and
    remove what such a process, killed while writing, left half-written in the folder."""
    draw_request(request)
    folder = Path(request["folder"])
    for name in RUN_FIGURES:
        for partial in folder.glob(f".{name}.*.tmp"):
            partial.unlink(missing_ok=True)


# --------------------------------------------------------------------------- comparisons
# Figures of ``python -m pipeline.compare``: sized to stay readable in MLflow's artifact
# preview (about 900 px wide), legends below the axes, never over the data.


def metric_label(key: str) -> str:
    """``ndcg_at_10`` -> ``nDCG@10``; ``mrr`` -> ``MRR``; ``map`` -> ``MAP`` (from the metric table)."""
    from pipeline.metrics import LABELS as labels, parse_key

    family, k = parse_key(key)
    if k is None:
        return key.upper()
    return labels[family].replace("@K", f"@{k}")


def _short(name: str, width: int = 56) -> str:
    """``name`` cut in the middle to ``width`` characters: the end of a system's name (its
    overrides) tells it from its neighbours."""
    if len(name) <= width:
        return name
    head = (width - 1) * 2 // 5
    return name[:head] + "…" + name[len(name) - (width - 1 - head):]


def forest_figure(comparisons: Mapping[str, Sequence[Mapping]], baseline: str, title: str) -> Figure:
    """Differences to the baseline with their CIs: one panel per metric, one row per system.

    ``comparisons[metric]`` is a list of dicts with ``system``, ``diff``, ``diff_ci_low``,
    ``diff_ci_high`` and ``significant`` (``stats.BaselineComparison`` as a dict). Filled
    markers: significant after the report's correction; hollow: not. A dashed line marks 0
    (no difference)."""
    metrics = list(comparisons)
    if not metrics:
        raise ValueError("forest_figure: no metrics")
    systems = list(dict.fromkeys(row["system"] for rows in comparisons.values() for row in rows))
    n = max(len(systems), 1)
    fig = _figure(figsize=(min(3.6 * len(metrics) + 3.2, 16), 1.6 + 0.42 * n), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(metrics), sharey=True))
    y = {name: i for i, name in enumerate(systems)}
    for ax, metric in zip(axes, metrics):
        for row in comparisons[metric]:
            pos = y[row["system"]]
            color = "C3" if row["significant"] else "C0"
            ax.plot([row["diff_ci_low"], row["diff_ci_high"]], [pos, pos], color=color, linewidth=2)
            ax.plot(row["diff"], pos, "o", color=color, markersize=7,
                    markerfacecolor=color if row["significant"] else "white")
        ax.axvline(0.0, color="0.3", linestyle="--", linewidth=1)
        ax.set_title(metric_label(metric))
        ax.set_xlabel("difference to the baseline")
        ax.grid(True, axis="x", alpha=0.3)
        ax.margins(x=0.08)
    axes[0].set_yticks(range(len(systems)), labels=[_short(s) for s in systems], fontsize="small")
    axes[0].set_ylim(len(systems) - 0.5, -0.5)  # first system on top, like the table
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="C3", marker="o", linewidth=2, label="significant"),
               Line2D([], [], color="C0", marker="o", markerfacecolor="white", linewidth=2, label="not significant")]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize="small")
    fig.suptitle(f"{title}\nbaseline: {_short(baseline, 60)}", fontsize="medium")
    return fig


#: At most this many systems in the per-query difference figure (its ten line colours).
PER_QUERY_DIFF_MAX_SYSTEMS = 10


def per_query_diff_figure(diffs: Mapping[str, Mapping[str, NDArray]], baseline: str, title: str) -> Figure:
    """Per-query differences to the baseline, sorted: one panel per metric.

    ``diffs[metric][system]`` holds system - baseline per query. With one system the
    differences are bars (green: better, red: worse); with several, one sorted line each.
    Wins/ties/losses read off where the curve crosses 0. Past
    :data:`PER_QUERY_DIFF_MAX_SYSTEMS` systems (a sweep), the ones whose mean difference is
    largest in magnitude on any metric are drawn, in their order, and the title says how
    many of how many: more lines would repeat colours and bury the axes under the legend."""
    metrics = list(diffs)
    if not metrics:
        raise ValueError("per_query_diff_figure: no metrics")
    systems = list(dict.fromkeys(system for metric in metrics for system in diffs[metric]))
    if len(systems) > PER_QUERY_DIFF_MAX_SYSTEMS:
        size = {system: max(abs(float(np.mean(diffs[m][system]))) for m in metrics if system in diffs[m])
                for system in systems}
        ranked = sorted(systems, key=lambda system: -size[system])  # stable: ties keep their order
        shown = set(ranked[:PER_QUERY_DIFF_MAX_SYSTEMS])
        title = (f"{title}\nthe {PER_QUERY_DIFF_MAX_SYSTEMS} of {len(systems)} systems whose mean difference is "
                 "largest")
        diffs = {m: {system: v for system, v in diffs[m].items() if system in shown} for m in metrics}
    fig = _figure(figsize=(min(4.6 * len(metrics), 16), 4.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(metrics), sharey=False))
    for ax, metric in zip(axes, metrics):
        for j, (system, values) in enumerate(diffs[metric].items()):
            d = np.sort(np.asarray(values, dtype=np.float64))[::-1]
            x = np.arange(1, len(d) + 1)
            if len(diffs[metric]) == 1:
                ax.bar(x, d, width=1.0, color=np.where(d > 0, "C2", np.where(d < 0, "C3", "0.6")),
                       label=_short(system))
            else:
                ax.plot(x, d, marker="o", markersize=2, linewidth=1.2, color=f"C{j % 10}", label=_short(system))
        ax.axhline(0.0, color="0.3", linewidth=1)
        ax.set_title(metric_label(metric))
        ax.set_xlabel("queries, sorted by difference")
        ax.set_ylabel("system - baseline")
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:  # a column per 2.3 inches of width: names of ~25 characters fit
        columns = max(1, min(len(labels), 3, int(fig.get_figwidth() / 2.3)))
        fig.legend(handles, labels, loc="outside lower center", ncols=columns, fontsize="small")
    fig.suptitle(f"{title}\nbaseline: {_short(baseline, 60)}", fontsize="medium")
    return fig


def main_effects_figure(effects: Mapping[str, Mapping[str, Sequence[Mapping]]], title: str) -> Figure:
    """The metric by value of each swept factor, with CIs: rows = factors, columns = metrics.

    ``effects[metric][factor]`` is a list of levels, each a dict with ``value``, ``mean``,
    ``ci_low``, ``ci_high`` and ``n_systems`` (the jobs averaged at that value)."""
    metrics = list(effects)
    factors = list(dict.fromkeys(f for by_factor in effects.values() for f in by_factor))
    if not metrics or not factors:
        raise ValueError("main_effects_figure: no factors")
    fig = _figure(figsize=(min(4.2 * len(metrics) + 0.6, 16), min(3.1 * len(factors) + 1.0, 20)),
                 layout="constrained")
    axes = np.asarray(fig.subplots(len(factors), len(metrics), squeeze=False))
    for i, factor in enumerate(factors):
        for j, metric in enumerate(metrics):
            ax = axes[i, j]
            levels = effects[metric].get(factor, [])
            x = np.arange(len(levels))
            means = np.array([lv["mean"] for lv in levels], dtype=np.float64)
            low = means - np.array([lv["ci_low"] for lv in levels], dtype=np.float64)
            high = np.array([lv["ci_high"] for lv in levels], dtype=np.float64) - means
            ax.errorbar(x, means, yerr=[low, high], marker="o", capsize=4, linewidth=1.5)
            ax.set_xticks(x, labels=[_short(str(lv["value"]), 14) for lv in levels], fontsize="small")
            ax.margins(x=0.15)
            ax.grid(True, alpha=0.3)
            ax.set_xlabel(factor)
            if j == 0:
                ax.set_ylabel("mean over queries")
            if i == 0:
                ax.set_title(metric_label(metric))
    fig.suptitle(f"{title}\nmean over queries of the jobs at each value, 95% bootstrap CI", fontsize="medium")
    return fig


# --------------------------------------------------------------------------- the figure process
#: Seconds a job waits for its figures from the figure process before drawing them itself.
FIGURE_TIMEOUT_S = 120.0


class FigureProcess:
    """``python -m pipeline.plots --stdin``: draws jobs' figures in a process of its own.

    Requests are JSON lines ``{"folder", "curves", "k", "title"}`` (the arguments of
    :func:`save_run_figures`); each gets one answer line ``{"ok": true}`` or ``{"ok": false,
    "error": ...}``, in order. A plain ``python`` child, like the tracking process
    (``pipeline.tracking.Tracker``); it exits when its standard input closes.
    """

    def __init__(self) -> None:
        from pipeline.console import child_env

        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.plots", "--stdin"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=child_env(), bufsize=0,
        )
        self._pending: list[dict[str, Any]] = []  # figure_request()s not yet answered

    def alive(self) -> bool:
        return self._proc.poll() is None

    def draw(self, folder: str | Path, curves: Mapping[str, NDArray], k: int, title: str) -> None:
        """Queue a job's figures (:func:`save_run_figures`); :meth:`wait` makes sure of them."""
        request = figure_request(folder, curves, k, title)
        self._pending.append(request)
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
        except (BrokenPipeError, OSError, ValueError):
            pass  # wait() draws them here

    def wait(self, timeout: float = FIGURE_TIMEOUT_S) -> None:
        """Return once every queued job's figures are on disk: drawn by the figure process or,
        when it failed, died or took longer than ``timeout`` seconds, by this process."""
        deadline = time.monotonic() + timeout
        pending, self._pending = self._pending, []
        for i, request in enumerate(pending):
            error = self._answer(deadline)
            if error is not None:
                log.warning("the figure process failed (%s); drawing the figures here", error)
                self._proc.kill()  # its later answers would belong to requests drawn here
                self._proc.wait()
                for queued in pending[i:]:
                    try:
                        draw_here(queued)
                    except OSError as err:  # e.g. the folder of an earlier job that could not write
                        log.warning("cannot draw the figures in %s: %s", queued["folder"], err)
                return

    def _answer(self, deadline: float) -> str | None:
        """None when the next answer says the figures were drawn, else what went wrong."""
        import select

        fd = self._proc.stdout.fileno()
        line = b""
        while not line.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return "no answer in time"
            chunk = os.read(fd, 1)
            if not chunk:
                self._log.seek(0)
                tail = self._log.read().decode(errors="replace").strip().splitlines()[-1:]
                return f"exit status {self._proc.wait()}{': ' + tail[0] if tail else ''}"
            line += chunk
        answer = json.loads(line)
        return None if answer.get("ok") else str(answer.get("error"))

    def close(self) -> None:
        """Close the pipe: the process exits once its queued figures are drawn.

        Figures queued and never waited for (a job that failed after queuing them) are waited
        for first, up to ``CLOSE_WAIT_S``: nothing is written into a job's folder after the job
        has ended, and no temporary file is left half-written when it exits."""
        deadline = time.monotonic() + CLOSE_WAIT_S
        while self._pending and self.alive():
            self._pending.pop(0)
            if self._answer(deadline) is not None:
                break
        self._pending.clear()
        try:
            self._proc.stdin.close()
        except OSError:
            pass


#: Seconds a job that ends with figures queued (and not waited for) waits for them.
CLOSE_WAIT_S = 30.0

_FIGURES: list[FigureProcess] = []  # this process's figure process (a sequential sweep reuses it)


def figure_process() -> FigureProcess | None:
    """This process's figure process, started on first use (and again if it died); None when
    matplotlib is loaded here already (a test session, the end of a sweep): then drawing
    here is cheaper than starting a process."""
    if "matplotlib" in sys.modules and not _FIGURES:
        return None
    if not _FIGURES or not _FIGURES[0].alive():
        if not _FIGURES:
            import atexit

            atexit.register(lambda: [f.close() for f in _FIGURES])
        _FIGURES[:] = [FigureProcess()]
    return _FIGURES[0]


def serve() -> None:
    """The figure process: draw the figures of every request on standard input until it closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the job handles Ctrl-C and waits for what it queued
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed goes to the log, never into the answers
    import matplotlib.backends.backend_agg  # noqa: F401  (now, while the job computes: savefig's canvas)
    import matplotlib.figure  # noqa: F401

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            draw_request(json.loads(line))
            answer: dict[str, Any] = {"ok": True}
        except Exception as exc:  # answered, and drawn by the job instead
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    if sys.argv[1:] != ["--stdin"]:
        sys.exit("usage: python -m pipeline.plots --stdin  (the figure process of a job; see pipeline.plots)")
    serve()
