"""Inputs of the --intervals tests: a fast scenario, a user GPU entry, a plan, a complete profile."""

from __future__ import annotations

from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.profile_schema import FEATURES, Profile, Term

FAST = ["--set", "requests=24", "--set", "output_len=16", "--set", "m=4", "--set", "prompt_len=32"]


L40S = ('[gpus.l40s]\nname = "mine"\nmemory_gb = 48.0\nmemory_bandwidth_gbps = 864.0\nbf16_tflops = 362.0\n'
        'fp8_tflops = 733.0\nnvlink = false\nhost_link = "pcie4"\nsource = "s"\n')


PLAN = """[base]
target = "qwen3-32b"
requests = 24
output_len = 32

[space]
method = ["sd", "psd"]

[slo]
latency_p99_ms = 60000

[search]
tolerance = 0.2
"""


def complete_profile(path) -> str:
    """A profile with every term fitted (made-up coefficients of a plausible size)."""
    coef = {"draft": (2e-3, 1e-6, 3e-9, 1e-4), "verify": (0.03, 1e-4, 1e-7),
            "prefill": (0.01, 2e-4, 1e-9, 0.0), "draft_prefill": (0.002, 2e-5, 1e-10, 0.0),
            "comm": (1e-4, 1e-10), "broadcast": (1e-4, 1e-10),
            "reject": (3e-4, 1e-7), "overhead": (1.2e-3,)}
    assert set(coef) == set(FEATURES)
    terms = {name: Term(name, c, 100, 0.01, None) for name, c in coef.items()}
    write_file(path, Profile(terms, {}, {}, ()).to_json())
    return str(path)
