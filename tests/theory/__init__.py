"""Tests of psdsim.theory: the closed forms, frontier fits, published constants and the tail."""
