"""Relevance judging: pooling, Label Studio exports, consensus and agreement."""
