"""K-sweep, precision-recall, sweep-summary and comparison figures (matplotlib, no pyplot).

Figures are built as ``matplotlib.figure.Figure`` objects, never through pyplot's global
state, so they are safe in threads and parallel Hydra jobs; ``fig.savefig`` renders them
with the Agg canvas. matplotlib is imported on the first figure: a job pays for it where it
draws, and importing this module stays cheap.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from pipeline.errors import InputError
from pipeline.io.results import atomic_open
from pipeline.metrics import CURVES, LABELS, STANDARD_KS, metric_key

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Display names for the curve keys of the MLflow contract (curve/<key>), from the metric table.
CURVE_LABELS = {name: LABELS[name] for name in CURVES}
#: The files :func:`save_run_figures` writes in a run's ``plots`` folder.
RUN_FIGURES = ("k_sweep.png", "precision_recall.png")
#: Resolution of a run's PNGs (1650 x 495 px for the K-sweep, 660 x 550 for the PR curve).
RUN_DPI = 110


def _figure(**kwargs: Any) -> Figure:
    """``matplotlib.figure.Figure(**kwargs)``, importing matplotlib on the first figure."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _ks(values: NDArray) -> NDArray[np.int64]:
    """K = 1..len(values): curves hold the value at K in entry K - 1."""
    return np.arange(1, len(values) + 1)


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
    is the mean value at K."""
    missing = [key for key in ("precision", "recall", "ndcg", "context_utility") if key not in curves]
    if missing:
        raise KeyError(f"k_sweep_figure: curves lack {missing}")
    fig = _figure(figsize=(15, 4.5), dpi=RUN_DPI)
    fig.subplots_adjust(left=0.045, right=0.99, bottom=0.12, top=0.86, wspace=0.2)
    axes = fig.subplots(1, 3)
    panels = [(axes[0], ("precision", "recall"), "Precision and recall"),
              (axes[1], ("ndcg", "map", "mrr"), "Ranking quality"),
              (axes[2], ("context_utility",), "Context utility (placed order)")]
    k_max = max(len(np.asarray(values)) for values in curves.values())
    for ax, keys, panel_title in panels:
        for key in keys:
            if key in curves:
                values = np.asarray(curves[key], dtype=np.float64)
                ax.plot(_ks(values), values, marker="o", markersize=3, label=CURVE_LABELS[key])
        ax.axvline(k, color="0.4", linestyle="--", linewidth=1.0, label=f"k = {k}")
        _k_axis(ax, k_max)
        ax.set_ylabel("mean over queries")
        ax.set_title(panel_title)
        ax.legend(loc="best", fontsize="small")
    fig.suptitle(title)
    return fig


def pr_curve_figure(precision: NDArray, recall: NDArray, title: str, label_ks: Sequence[int] | None = None) -> Figure:
    """Mean precision@K against mean recall@K for K = 1..k_max, a few points labelled by K:
    ``label_ks``, by default K = 1, 3, 5, 10, 20, 50, 100 (those <= k_max) and k_max."""
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
    ax.plot(recall, precision, marker="o", markersize=3, label="K = 1..%d" % k_max)
    for K in label_ks:
        if 1 <= K <= k_max:
            ax.annotate(f"K={K}", (recall[K - 1], precision[K - 1]), textcoords="offset points", xytext=(5, 5),
                        fontsize="small")
    ax.set_xlabel("recall@K")
    ax.set_ylabel("precision@K")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="best", fontsize="small")
    return fig


#: Up to this many jobs the sweep summary puts the bars beside the curves; past it, below them.
SIDE_BY_SIDE_MAX_JOBS = 12
#: Up to this many jobs the sweep summary writes each bar's value beside it.
BAR_LABELS_MAX_JOBS = 30
#: PNG options of the summary and comparison figures: zlib's fastest level, because these
#: figures are large and written at the end of a sweep or a comparison, where a somewhat
#: larger file costs less than the time a tighter compression takes.
PNG_FAST = {"pil_kwargs": {"compress_level": 1}}


def sweep_summary_figure(table: pd.DataFrame, curves: Mapping[str, Mapping[str, NDArray]], metric_keys: Sequence[str],
                         name_column: str = "run_name", title: str = "Sweep summary",
                         ci: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
                         tied: Sequence[str] = ()) -> Figure:
    """Compare the jobs of a sweep: headline metrics per job, nDCG and recall vs K.

    The bars: each metric in ``metric_keys`` (columns of ``table``, one row per job, named
    by ``name_column`` or, if absent, the index), with the 95% CI as error bars where
    ``ci[key] = (low, high)`` gives it (in table order), each bar's value beside it up to
    :data:`BAR_LABELS_MAX_JOBS` jobs, the jobs in ``tied`` (those that could be the best: the
    comparison's best set) marked "≈ best". The curves: nDCG@K and recall@K, one line per entry of ``curves``: a job,
    or a group of jobs with identical rankings (hence identical curves); the y-range fits the
    values. Up to :data:`SIDE_BY_SIDE_MAX_JOBS` jobs the bars are left of the curves, legends
    below, outside the data; past that the curves are on top at their usual height, their
    legend in the recall panel, and the bars below across the width."""
    if not metric_keys:
        raise ValueError("sweep_summary_figure: metric_keys is empty")
    metric_keys = list(dict.fromkeys(metric_keys))  # a key named twice is one bar per job, one legend entry
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
    _headline_bars(bar_ax, table, names, metric_keys, ci, tied, bars_height)
    _job_curves(fig, ndcg_ax, recall_ax, curves, lines, n_jobs)
    fig.suptitle(title)
    return fig


def _headline_bars(ax: Axes, table: pd.DataFrame, names: Sequence[str], metric_keys: Sequence[str],
                   ci: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None, tied: Sequence[str],
                   bars_height: float) -> None:
    """The sweep summary's bars: one group per job, one bar per metric, CIs as error bars;
    the x-range fits the values and their CIs, with room for the value labels."""
    n_jobs = len(names)
    positions = np.arange(n_jobs)
    height = 0.8 / len(metric_keys)
    low_all, high_all = [], []
    for j, key in enumerate(metric_keys):
        values = table[key].to_numpy(dtype=np.float64)
        y = positions + (j - (len(metric_keys) - 1) / 2) * height
        bars = ax.barh(y, values, height=height, label=key)
        low_all.append(values)
        high_all.append(values)
        if ci and key in ci:
            low, high = (np.asarray(v, dtype=np.float64) for v in ci[key])
            ax.errorbar(values, y, xerr=[values - low, high - values], fmt="none", ecolor="0.2",
                        capsize=2, linewidth=0.8)
            low_all.append(low)
            high_all.append(high)
        if n_jobs <= BAR_LABELS_MAX_JOBS:  # past that they overlap; sweep_table.md has every value
            ax.bar_label(bars, fmt="%.3f", fontsize="x-small", padding=2)
    labels = [f"{name}  ≈ best" if name in tied else name for name in names]
    ax.set_yticks(positions, labels=labels, fontsize="small" if n_jobs <= 20 else "x-small")
    ax.set_ylim(max(n_jobs, 1) - 0.5, -0.5)  # first job on top, like the table; no margins
    ax.set_xlabel("mean over queries (bars: 95% CI)" if ci else "mean over queries")
    ax.set_title("Headline metrics per job")
    ax.grid(True, axis="x", alpha=0.3)
    lo = float(np.nanmin(np.concatenate(low_all))) if n_jobs else 0.0
    hi = float(np.nanmax(np.concatenate(high_all))) if n_jobs else 1.0
    span = max(hi - lo, 0.05)
    ax.set_xlim(max(0.0, lo - 0.35 * span), hi + 0.3 * span)  # room for the value labels
    # below the axis label, the same distance (0.5 inch) whatever the height of the panel
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5 / bars_height), ncols=min(len(metric_keys), 3),
              fontsize="small")


def _job_curves(fig: Figure, ndcg_ax: Axes, recall_ax: Axes, curves: Mapping[str, Mapping[str, NDArray]],
                lines: Sequence[str], n_jobs: int) -> None:
    """The sweep summary's nDCG@K and recall@K panels, one line per entry of ``curves`` (in
    ``lines`` order), with one legend for both."""
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


def save_run_figures(folder: str | Path, curves: Mapping[str, NDArray], k: int, title: str) -> list[Path]:
    """A run's figures as PNG files in ``folder``: the K-sweep and the precision-recall curve,
    each written atomically (a reader never sees half a PNG)."""
    folder = Path(folder)
    figures = {RUN_FIGURES[0]: k_sweep_figure(curves, k, title),
               RUN_FIGURES[1]: pr_curve_figure(curves["precision"], curves["recall"], title)}
    for name, figure in figures.items():
        with atomic_open(folder / name, "wb") as fh:
            figure.savefig(fh, format="png", **PNG_FAST)
    return [folder / name for name in figures]


def draw_job_figures(results: str | Path) -> list[Path]:
    """A finished job's K-sweep and precision-recall PNGs in ``<results>/plots``, drawn from its
    results folder (or its job folder): the curves from ``metrics.json``, k and the title (the
    run name) from ``record.json``; the same files the job itself draws. A sweep's jobs do not
    draw them (docs/results.md): this draws them for any job later. InputError when the
    folder holds no finished job."""
    folder = Path(results)
    if not (folder / "record.json").is_file() and (folder / "results" / "record.json").is_file():
        folder = folder / "results"
    try:
        curves = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))["curves"]
        record = json.loads((folder / "record.json").read_text(encoding="utf-8"))
        k, title = int(record["k"]), str(record["run_name"])
        arrays = {name: np.asarray(values, dtype=np.float64) for name, values in curves.items()}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(f"not a finished job's results folder (metrics.json and record.json with curves, k and "
                         f"run_name): {err}", folder) from None
    return save_run_figures(folder / "plots", arrays, k, title)


# The figures of ``python -m pipeline.cli compare`` are sized to stay readable in MLflow's artifact
# preview (about 900 px wide), legends below the axes, never over the data.
def metric_label(key: str) -> str:
    """``ndcg_at_10`` -> ``nDCG@10``; ``ndcg_at_k`` -> ``nDCG@k``; ``mrr`` -> ``MRR``;
    ``context_recall_budget_512`` -> ``context recall at 512 tokens`` (from the metric table)."""
    parsed = metric_key(key)
    if parsed.budget is not None:
        name = LABELS.get(parsed.family, parsed.family.replace("_", " ")).replace("@K", "")
        return f"{name} at {parsed.budget} tokens"
    if parsed.full_depth:
        return key.upper()
    return LABELS[parsed.family].replace("@K", f"@{parsed.k if parsed.k is not None else 'k'}")


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
    fig = _figure(figsize=(min(3.6 * len(metrics) + 3.2, 16), 1.6 + 0.42 * max(len(systems), 1)), layout="constrained")
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
#: Query ids written at each end of a per-query difference curve, for at most this many systems.
LABELS_PER_SIDE = 3
LABELLED_SYSTEMS = 2


def per_query_diff_figure(diffs: Mapping[str, Mapping[str, NDArray]], baseline: str, title: str,
                          query_ids: Sequence[str] | None = None) -> Figure:
    """Per-query differences to the baseline, sorted: one panel per metric.

    ``diffs[metric][system]`` holds system - baseline per query, in the order of
    ``query_ids``. With one system the differences are bars (green: better, red: worse); with
    several, one sorted line each. Wins/ties/losses read off where the curve crosses 0. Given
    ``query_ids``, the largest gains and losses are labelled with their query id (a reader's
    next step is to open those queries), for up to :data:`LABELLED_SYSTEMS` systems. Past
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
            if query_ids is not None and len(diffs[metric]) <= LABELLED_SYSTEMS:
                _label_extremes(ax, np.asarray(values, dtype=np.float64), query_ids, f"C{j % 10}")
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


def _label_extremes(ax: Axes, values: NDArray, query_ids: Sequence[str], color: str) -> None:
    """Write the query ids of the :data:`LABELS_PER_SIDE` largest gains and losses (nonzero)
    next to their points of the sorted curve (x = rank of the difference, descending)."""
    if len(values) != len(query_ids):
        raise ValueError(f"per_query_diff_figure: {len(values)} differences for {len(query_ids)} query ids")
    order = np.lexsort((np.arange(len(values)), -values))  # the plotted order; ties by query position
    n = len(order)
    for rank in [*range(min(LABELS_PER_SIDE, n)), *range(max(n - LABELS_PER_SIDE, LABELS_PER_SIDE), n)]:
        value = float(values[order[rank]])
        if value == 0.0:
            continue
        ax.annotate(_short(str(query_ids[order[rank]]), 16), (rank + 1, value), fontsize="x-small", color=color,
                    xytext=(4, 6 if value > 0 else -10), textcoords="offset points")


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


#: The budget metrics :func:`budget_curve_figure` draws, one panel each.
BUDGET_PANELS = {"context_recall": "context recall", "context_precision": "context precision"}


def budget_curve_figure(curves: Mapping[str, Mapping[str, Mapping[int, float]]], title: str) -> Figure:
    """Context recall and context precision against the token budget B (log2 axis), one line
    per entry of ``curves`` (a configuration: a job, or the jobs whose budget curves are
    identical). ``curves[label][name]`` maps each budget B to the mean ``<name>_budget_<B>``."""
    fig = _figure(figsize=(12, 4.8), layout="constrained")
    axes = fig.subplots(1, len(BUDGET_PANELS))
    for ax, (name, label) in zip(axes, BUDGET_PANELS.items()):
        budgets: set[int] = set()
        for line, by_name in curves.items():
            points = sorted((int(b), float(v)) for b, v in by_name.get(name, {}).items())
            if points:
                budgets.update(b for b, _ in points)
                ax.plot([b for b, _ in points], [v for _, v in points], marker="o", markersize=3, label=line)
        ax.set_xscale("log", base=2)
        if budgets:
            ax.set_xticks(sorted(budgets), [str(b) for b in sorted(budgets)])
        ax.set_xlabel("token budget B (tokens in the context)")
        ax.set_ylabel(f"{label} (mean over queries)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(True, alpha=0.3)
        ax.set_title(f"{label} at a budget of B tokens")
    if axes[0].lines:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=min(3, len(labels)), fontsize="x-small")
    fig.suptitle(title)
    return fig


def pareto_figure(points: Sequence[tuple[str, float, float | None, float | None, float, float, float, bool]],
                  metric: str, budget: float | None = None, chosen: str | None = None, title: str = "") -> Figure:
    """Quality against cost: one point per job, ``(name, p95, p95 CI low, high, objective, CI
    low, high, on the front)``, both 95% CIs as error bars; the front highlighted (its points
    joined as a staircase, named); the latency ``budget`` as a vertical line and the job
    ``chosen`` within it ringed. A log latency axis when the latencies span over 20x."""
    fig = _figure(figsize=(9, 5.5), layout="constrained")
    ax = fig.subplots()
    same: dict[tuple[float, float], list[str]] = {}  # jobs at one point (a cached ranking's twins): one label
    for name, x, *_rest in points:
        same.setdefault((x, _rest[2]), []).append(name)
    for name, x, xl, xh, y, yl, yh, on in points:
        xerr = [[max(x - xl, 0.0)], [max(xh - x, 0.0)]] if xl is not None and np.isfinite([xl, xh]).all() else None
        yerr = [[max(y - yl, 0.0)], [max(yh - y, 0.0)]] if np.isfinite([yl, yh]).all() else None
        ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="o" if on else ".", color="C1" if on else "0.55",
                    markersize=7 if on else 5, capsize=2, elinewidth=0.8, zorder=3 if on else 2)
        group = same[(x, y)]
        if (on or name == chosen) and name == group[0]:
            label = _short(name, 32) + (f" (+{len(group) - 1})" if len(group) > 1 else "")
            ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, 4), fontsize="x-small")
    front = sorted((p[1], p[4]) for p in points if p[7])
    if front:
        xs = [front[0][0]] + [x for x, _ in front[1:] for _ in (0, 1)]
        ys = [y for _, y in front for _ in (0, 1)][:-1]
        ax.plot(xs, ys, color="C1", linewidth=1.2, alpha=0.8, label="Pareto front (better: up and left)")
    latencies = [p[1] for p in points]
    if latencies and min(latencies) > 0 and max(latencies) / min(latencies) > 20:
        ax.set_xscale("log")
    if budget is not None:
        ax.axvline(budget, color="C3", linestyle="--", linewidth=1, label=f"budget p95 <= {budget:g} ms")
    for name, x, *_rest in points:
        if name == chosen:
            ax.plot([x], [_rest[2]], "o", markersize=14, markerfacecolor="none", color="C3",
                    label=f"best within the budget: {_short(name, 32)}")
    ax.set_xlabel("p95 retrieval latency per query (ms), 95% CI")
    ax.set_ylabel(f"{metric_label(metric)} (mean over queries), 95% CI")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(title)
    return fig
