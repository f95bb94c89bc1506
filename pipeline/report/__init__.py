"""What a person reads: figures, the per-query drill-down, the comparison report, the sweep summary."""
