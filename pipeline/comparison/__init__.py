"""Comparing retrieval systems on the same queries: one computation, many views.

``systems`` reads what is compared (job and sweep folders, run files, MLflow runs),
``report`` computes the comparison once (:func:`build_report` -> :class:`Report`),
``render`` shows it (the console table, ``report.md``), ``output`` writes and logs it, and
``ties`` words exact ties the same way everywhere. matplotlib, pandas and mlflow are imported
only inside the functions that need them. See docs/comparing.md.
"""

from __future__ import annotations

from pipeline.comparison.output import log_report, report_for_folders, write_report
from pipeline.comparison.render import BEST, SIGNIFICANT, format_markdown, format_table
from pipeline.comparison.report import (CORRECTIONS, REPORT_FORMAT, TESTS, Report, build_report, compute_main_effects,
                                        find_baseline)
from pipeline.comparison.systems import (DEFAULT_METRICS, DEFAULT_TRACKING_URI, System, load_system, load_systems,
                                         parse_overrides, read_per_query)
from pipeline.comparison.ties import swept_factors

__all__ = ["BEST", "CORRECTIONS", "DEFAULT_METRICS", "DEFAULT_TRACKING_URI", "REPORT_FORMAT", "SIGNIFICANT", "TESTS",
           "Report", "System", "build_report", "compute_main_effects", "find_baseline", "format_markdown",
           "format_table", "load_system", "load_systems", "log_report", "parse_overrides", "read_per_query",
           "report_for_folders", "swept_factors", "write_report"]
