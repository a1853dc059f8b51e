"""Tests of the `psdsim` command (psdsim/): what a user types and sees, refusals, outputs kept safe."""
