"""Context placement: attention curves, placement strategies, chunk windows, folding and budgets
(computing tier: numpy, the standard library and ``pipeline.metrics``). Bad arguments raise
``ValueError``; the stages that call these functions with the user's settings turn that into
``InputError``. K, the number of context slots, has one check: ``attention.check_k``."""
