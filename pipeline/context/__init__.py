"""Context placement: attention curves, placement strategies, chunk windows, folding and budgets
(computing tier: numpy, the standard library and ``pipeline.metrics``)."""
