"""What a person reads: figures, the per-query drill-down, the comparison report, the sweep summary.

matplotlib, pandas and mlflow are imported only inside the functions that need them. The
names below are the comparison's (``systems`` it reads, ``compare`` computes, renders and
writes it) and the sweep summary's; ``figures`` and ``drilldown`` are used as modules.
"""

from __future__ import annotations

from pipeline.report.compare import (BEST, CORRECTIONS, REPORT_FORMAT, SIGNIFICANT, TESTS, Report, build_report,
                                     compute_main_effects, find_baseline, format_markdown, format_table, log_report,
                                     report_for_folders, swept_factors, write_report)
from pipeline.report.summary import end_sweep, log_pending, summarize, sweep_description
from pipeline.report.systems import (DEFAULT_METRICS, DEFAULT_TRACKING_URI, System, load_system, load_systems,
                                     parse_overrides, read_per_query)

__all__ = ["BEST", "CORRECTIONS", "DEFAULT_METRICS", "DEFAULT_TRACKING_URI", "REPORT_FORMAT", "SIGNIFICANT", "TESTS",
           "Report", "System", "build_report", "compute_main_effects", "end_sweep", "find_baseline", "format_markdown",
           "format_table", "load_system", "load_systems", "log_pending", "log_report", "parse_overrides",
           "read_per_query", "report_for_folders", "summarize", "sweep_description", "swept_factors", "write_report"]
