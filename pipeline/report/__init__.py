"""What a person reads: figures, the per-query drill-down, the comparison report, the sweep summary.

Modules (each imports matplotlib, pandas or mlflow only inside the function that needs it):

- ``figures``: every figure (K-sweep, precision-recall, sweep summary, comparison plots);
- ``drilldown``: the per-query drill-down of a job or a scored run file;
- ``per_query``, ``systems``: the systems a comparison reads (job folders, sweeps, TREC
  run files, MLflow runs) and their per-query scores;
- ``compare``: the comparison report (statistics per metric, baseline, main effects);
- ``text``: the report as a console table and as ``report.md``;
- ``output``: the report's folder (JSON, markdown, figures) and its MLflow run;
- ``summary``: the end of a sweep (its table, figure, comparison and parent run).

The names below are the comparison's and the sweep summary's public surface.
"""

from __future__ import annotations

from pipeline.report.compare import (CORRECTIONS, REPORT_FORMAT, TESTS, Report, build_report, compute_main_effects,
                                     find_baseline, swept_factors)
from pipeline.report.output import log_report, report_for_folders, write_report
from pipeline.report.per_query import read_per_query
from pipeline.report.summary import end_sweep, log_pending, summarize, sweep_description
from pipeline.report.systems import (DEFAULT_METRICS, DEFAULT_TRACKING_URI, System, load_system, load_systems,
                                     parse_overrides)
from pipeline.report.text import BEST, SIGNIFICANT, format_markdown, format_table

__all__ = ["BEST", "CORRECTIONS", "DEFAULT_METRICS", "DEFAULT_TRACKING_URI", "REPORT_FORMAT", "SIGNIFICANT", "TESTS",
           "Report", "System", "build_report", "compute_main_effects", "end_sweep", "find_baseline", "format_markdown",
           "format_table", "load_system", "load_systems", "log_pending", "log_report", "parse_overrides",
           "read_per_query", "report_for_folders", "summarize", "sweep_description", "swept_factors", "write_report"]
