"""Tests of psdsim.sim: the simulator, its scheduler, methods, cost models, catalog and outputs."""
