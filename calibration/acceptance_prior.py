"""A catalog acceptance prior for a draft -> target pair, from the counts vLLM reported.

`calibrate --draft D --target T` on vLLM's metrics or logs ends here: the counts
(calibration/vllm_metrics.py) become a Beta mean at the run's spread, per-position factors where
the source has them, and a catalog file whose comments say what was measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from psdsim.calibration.vllm_metrics import AcceptanceCounts
from psdsim.sim.acceptance import MAX_ACCEPTANCE, alpha_for_accepted

ENTRY_SIGNATURE = "# psdsim calibrate: acceptance"


@dataclass(frozen=True)
class AcceptanceEntry:
    """A catalog acceptance prior for a draft -> target pair, from measured counts."""

    counts: AcceptanceCounts
    draft: str
    target: str
    spread: float
    dataset: str | None
    files: tuple[str, ...]

    @cached_property
    def position_factors(self) -> tuple[float, ...]:
        """The prior's `per_position`: each position's rate given the ones before, relative to
        the first's and capped at 1 (the model's rates never rise with position); empty (i.i.d.)
        where the source gives no per-position counts, a position no draft reached, or none
        falls below the first."""
        rates = self.counts.conditional_rates
        if not rates or not all(r > 0 for r in rates):   # NaN and 0 fail r > 0
            return ()
        factors = tuple(min(1.0, r / rates[0]) for r in rates)
        return factors if min(factors) < 1.0 else ()

    @cached_property
    def fitted_alpha(self) -> float:
        """The Beta mean at `spread` under which the simulator's drafts, shaped by the position
        factors, accept on average over a run's drafts what the engine's did
        (sim/acceptance.py accepted_per_draft)."""
        return alpha_for_accepted(self.counts.mean_accepted, self.counts.k, self.spread,
                                  self.position_factors)

    @property
    def alpha(self) -> float:
        """The prior's alpha: the fitted one, held at the simulator's largest acceptance (where
        nearly every draft token was accepted), which a scenario's acceptance may not pass."""
        return min(self.fitted_alpha, MAX_ACCEPTANCE)

    def clamp_note(self) -> list[str]:
        """The line saying the prior was held at the bound, and what the counts do say."""
        if self.fitted_alpha <= MAX_ACCEPTANCE:
            return []
        c = self.counts
        # P(every one of n i.i.d. tokens accepted) = a^n, below 5% for a < 0.05^(1/n)
        evidence = (f"every draft token accepted in {c.draft_tokens:,.0f}: acceptance is at least "
                    f"{0.05 ** (1 / c.draft_tokens):.6f} at 95%" if c.accepted == c.draft_tokens
                    else f"{c.accepted:,.0f} of {c.draft_tokens:,.0f} draft tokens accepted")
        return [f"note: {evidence}; alpha is held at 1 - 1e-9, the largest acceptance the simulator "
                f"takes (the fit was {self.fitted_alpha!r})"]

    def lines(self) -> list[str]:
        """What was measured and what the prior is, in words."""
        c = self.counts
        out = [f"{c.source} ({', '.join(self.files)})" + (f", on {self.dataset}" if self.dataset else ""),
               f"{c.drafts:,.0f} drafts of k = {c.k}: {c.accepted:,.0f} of {c.draft_tokens:,.0f} draft "
               f"tokens accepted ({c.accepted / c.draft_tokens:.1%}), {c.mean_accepted:.3f} per draft (mean "
               f"acceptance length {1 + c.mean_accepted:.3f})"]
        if c.per_position:
            out.append("per position: " + ", ".join(f"{r:.3f}" for r in c.position_rates)
                       + "; given the ones before: " + ", ".join(f"{r:.3f}" for r in c.conditional_rates)
                       + (" (written as per_position, relative to the first)" if self.position_factors
                          else " (none below the first: the simulator draws positions i.i.d.)"))
        out.append(f"alpha {self.alpha:.4f}: the Beta mean (acceptance_spread {self.spread:g}) whose "
                   f"drafts of {c.k} accept {c.mean_accepted:.3f} each over a run (one rate for every "
                   f"request would be {alpha_for_accepted(c.mean_accepted, c.k):.4f})")
        return out + self.clamp_note()

    def as_dict(self) -> dict[str, object]:
        c = self.counts
        return {"draft": self.draft, "target": self.target, "alpha": self.alpha,
                "acceptance_spread": self.spread, "dataset": self.dataset, "source": c.source,
                "files": list(self.files), "k": c.k,
                "drafts": c.drafts, "draft_tokens": c.draft_tokens, "accepted": c.accepted,
                "position_rates": list(c.position_rates), "per_position": list(self.position_factors),
                "fitted_alpha": self.fitted_alpha, "notes": self.clamp_note()}

    def use(self, out: Path) -> str:
        """The run that replays the measured configuration with this prior."""
        return (f"psdsim run --set catalog={out} --set draft={self.draft} --set target={self.target} "
                f"--set k={self.counts.k} --set acceptance_spread={self.spread:g}")

    def toml(self, out: Path) -> str:
        """A catalog file holding the prior, its measurements as comments (`--set catalog=...`)."""
        c = self.counts
        source = (f"{c.source} {', '.join(self.files)}" + (f" on {self.dataset}" if self.dataset else "")
                  + f": {c.drafts:.0f} drafts of k = {c.k}, {c.mean_accepted:.4f} accepted per draft; "
                  f"Beta mean at acceptance_spread {self.spread:g} (psdsim calibrate)")
        return "\n".join([ENTRY_SIGNATURE, *(f"# {line}" for line in self.lines()),
                          f"# use it: {self.use(out)}", "",
                          f"[acceptance.{json.dumps(f'{self.draft} -> {self.target}')}]",
                          f"alpha = {self.alpha!r}",
                          *self._per_position_line(), f"source = {json.dumps(source)}", ""])

    def _per_position_line(self) -> list[str]:
        """The `per_position` field, where there are factors to write."""
        if not self.position_factors:
            return []
        return ["per_position = [" + ", ".join(repr(f) for f in self.position_factors) + "]"]
