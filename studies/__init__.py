"""Studies built on the simulator: sweeps, capacity plans, the paper's grid, the theory bridge,
and their reports and figures. They use the model (psdsim.sim), calibration and theory; nothing
in the model uses them."""
