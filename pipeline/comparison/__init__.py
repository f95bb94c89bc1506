"""Comparing retrieval systems on the same queries: one computation, many views.

``systems`` reads what is compared (job and sweep folders, run files, MLflow runs),
``report`` computes the comparison once (:func:`build_report` -> :class:`Report`), with
``verdict`` the one inference every view states (:class:`Verdict`) and ``words`` its
sentences (:func:`verdict_lines`); ``render`` shows it (the console, ``report.md``, answer
first), ``output`` writes and logs it, and ``ties`` words exact ties the same way everywhere. matplotlib, pandas and mlflow are imported
only inside the functions that need them. See docs/comparing.md.
"""

from __future__ import annotations

from pipeline.comparison.output import log_report, report_for_folders, write_report
from pipeline.comparison.render import BEST, SIGNIFICANT, format_markdown, format_table
from pipeline.comparison.report import (CORRECTIONS, REPORT_FORMAT, TESTS, Report, build_report, compute_main_effects,
                                        find_baseline)
from pipeline.comparison.systems import (DEFAULT_METRICS, System, load_system, load_systems, parse_overrides,
                                         read_per_query)
from pipeline.comparison.ties import swept_factors
from pipeline.comparison.verdict import DEFAULT_MARGIN, Verdict
from pipeline.comparison.words import verdict_lines
from pipeline.tracking.store import DEFAULT_TRACKING_URI

__all__ = ["BEST", "CORRECTIONS", "DEFAULT_MARGIN", "DEFAULT_METRICS", "DEFAULT_TRACKING_URI", "REPORT_FORMAT", "SIGNIFICANT", "TESTS",
           "Report", "System", "build_report", "compute_main_effects", "find_baseline", "format_markdown",
           "format_table", "load_system", "load_systems", "log_report", "parse_overrides", "read_per_query",
           "report_for_folders", "swept_factors", "Verdict", "verdict_lines", "write_report"]
