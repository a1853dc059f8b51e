"""Tests of psdsim.engine: the reference engine, the vLLM runner and `psdsim validate`."""
