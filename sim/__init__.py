"""The SimPy model of AR, SD and batch-parallel SD: scenarios, catalog, costs, methods, metrics."""
