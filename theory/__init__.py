"""Closed-form theory of parallel speculative decoding (numpy and scipy only, nothing of ours)."""
