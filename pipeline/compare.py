"""``python -m pipeline.compare``: Compare retrieval systems on the same queries (pipeline.report.compare)."""

from __future__ import annotations

import sys

from pipeline.report.compare import main

if __name__ == "__main__":
    sys.exit(main())
