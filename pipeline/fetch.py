"""``python -m pipeline.fetch``: Download a BEIR collection (pipeline.io.fetch)."""

from __future__ import annotations

import sys

from pipeline.io.fetch import main

if __name__ == "__main__":
    sys.exit(main())
