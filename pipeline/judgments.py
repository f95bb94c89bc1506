"""``python -m pipeline.judgments``: Label Studio export -> TREC qrels and agreement (pipeline.judging.judgments)."""

from __future__ import annotations

import sys

from pipeline.judging.judgments import main

if __name__ == "__main__":
    sys.exit(main())
