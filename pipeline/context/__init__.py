"""Context placement: attention curves, placement strategies, chunk windows, folding and budgets (computing tier: numpy only)."""
