"""Expected accepted drafts per verification of k, from the acceptance rate of each position.

A verification accepts the leading drafts until the first rejection. With p_j the probability
that position j is accepted given every earlier one was, P(G >= j) = p_1 ... p_j, so

    E[G] = sum over j = 1..k of p_1 ... p_j

and the tokens a verification emits are E[G] + 1 (the target's bonus or resampled token). With
every p_j = a (i.i.d. positions) it is a (1 - a^k) / (1 - a), the form `theory.model` builds its
frontier on.
"""

from __future__ import annotations

from collections.abc import Sequence


def expected_accepted(rates: Sequence[float]) -> float:
    """E[G] = sum_j prod_{i <= j} p_i over the positions' conditional rates p_1..p_k."""
    total, survival = 0.0, 1.0
    for p in rates:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"acceptance rates must be in [0, 1], got {p!r}")
        survival *= p
        total += survival
    return total


def expected_accepted_iid(a: float, k: int) -> float:
    """E[G] with every position at rate a: a (1 - a^k) / (1 - a) (k at a = 1)."""
    if not 0.0 <= a <= 1.0 or k < 0:
        raise ValueError(f"need a in [0, 1] and k >= 0, got a={a!r}, k={k!r}")
    return float(k) if a == 1.0 else a * (1.0 - a**k) / (1.0 - a)
