"""``python -m pipeline.pool``: Depth-d pooling for relevance judging (pipeline.judging.pool)."""

from __future__ import annotations

import sys

from pipeline.judging.pool import main

if __name__ == "__main__":
    sys.exit(main())
