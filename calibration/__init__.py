"""Trace readers (Nsight Systems, Kineto, MineDraft JSONL) and fitted cost profiles for `sim`."""
