"""Real engines (reference engine, vLLM runner) and measured-versus-simulated validation."""
