"""Tests of psdsim.studies: plan, sweep, paper, intervals and the theory bridge."""
