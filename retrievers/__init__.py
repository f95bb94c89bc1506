"""Retrievers: ids, texts and arrays in, Rankings out. No Hydra, no MLflow."""

from __future__ import annotations

from retrievers.base import Ranking, Retriever

__all__ = ["Ranking", "Retriever"]
