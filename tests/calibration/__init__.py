"""Tests of psdsim.calibration: trace readers, fitting, acceptance from engines' reports."""
