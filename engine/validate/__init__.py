"""`psdsim validate`: run a real engine, fit a profile from its AR and SD runs, simulate every
method on the same requests, and compare measured with predicted."""
