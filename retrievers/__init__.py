"""Retrievers: ids, texts and arrays in, Rankings out. No Hydra, no MLflow."""

from __future__ import annotations

from pipeline.ranking import Ranking
from retrievers.base import Retriever

__all__ = ["Ranking", "Retriever"]
