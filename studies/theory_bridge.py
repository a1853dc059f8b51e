"""The bridge from simulated runs to the closed-form theory: measure, fit, predict, compare.

For each k the scenario is simulated under SD and PSD. From the step tables we measure the
drafting time per step t(k), the verification time V, the link time c and the serial time s of
each method, and the tokens emitted per verified request. A least-squares fit of
tokens - 1 = F (1 - e^{-alpha t}) (the bonus token is the 1) gives the frontier; with the
measured times averaged over k it becomes a theory.FrontierModel, whose best whole k and PSD/SD
ratio are set beside the simulated ones. Throughput is taken over the first 80% of decode steps
(the paper's trim) so that a finite pool approximates the theory's always-full pipeline.

Where the simulation uses ConstantCost and one acceptance rate for all requests (the idealised
mode), the theory's assumptions hold exactly and the two must agree to sampling noise; with the
analytic cost model V grows with k and the comparison shows how far the simple theory carries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from psdsim.sim.costs import StepCost
from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.report import infeasible_error
from psdsim.sim.run import Result, simulate
from psdsim.sim.scenario import Scenario, catalog_for
from psdsim.theory.frontier import FrontierFit, fit_frontier
from psdsim.theory.model import FrontierModel, best_k
from psdsim.theory.tail import TailEstimate, tail, verifications_pmf


@dataclass(frozen=True)
class KMeasurement:
    k: int
    draft_s: float             # drafting time per step (SD; PSD drafts an equal sub-batch)
    verify_s: float            # verification time per step
    comm_s: float              # PSD link time per step beside the pass (theory.model's c)
    serial_sd_s: float         # SD step time besides drafting and verifying
    serial_psd_s: float        # PSD step time besides max(drafting, link + verifying)
    tokens_per_verification: float   # accepted + 1 per verified request
    throughput_sd: float       # tokens/s over the first 80% of decode steps
    throughput_psd: float
    parallelization_rate: float


@dataclass(frozen=True)
class BridgeReport:
    measurements: tuple[KMeasurement, ...]
    fit: FrontierFit
    model: FrontierModel
    t_token: float             # fitted drafting time per draft token
    predicted_best_k: dict[str, int]      # argmin of the theory's T over the simulated ks
    closed_form_best_k: dict[str, int]    # theory.model.best_k (continuous optimum, rounded)
    simulated_best_k: dict[str, int]
    predicted_ratio: float     # T_SD / T_PSD at each method's best whole k (theory)
    simulated_ratio: float     # best PSD throughput / best SD throughput (simulation)
    predicted_throughput: dict[str, list[float]]  # per k, tokens/s, constant-V model
    # per k, tokens/s: the fitted frontier with each k's own measured V, c and serial times
    # (separates what the frontier explains from what the constant-V assumption costs)
    measured_times_throughput: dict[str, list[float]]

    @property
    def ratio_error(self) -> float:
        return self.predicted_ratio / self.simulated_ratio - 1.0


def _trimmed(result: Result) -> float:
    value = result.summary["throughput_tok_s_trim80"]
    if value is None:
        raise ValueError("a run had no decode steps: raise requests or output_len")
    return float(value)


def measure_k(sd: Result, psd: Result, k: int) -> KMeasurement:
    """Per-step averages from an SD run and a PSD run at the same k."""
    steps = sd.steps
    dec = steps["kind"] == "decode"
    dur = (steps["end_s"] - steps["start_s"])[dec]
    draft, verify = steps["draft_s"][dec], steps["verify_s"][dec]
    # accepted + 1 per verified request: the drafting frontier itself, not cut short at the end
    # of a request's output (generated tokens are, on its last verification).
    tokens = 1.0 + steps["accepted"][dec].sum() / steps["verified"][dec].sum()
    pt = psd.steps
    par = (pt["kind"] == "decode") & pt["parallelised"]
    pdur = (pt["end_s"] - pt["start_s"])[par]
    # the link time beside the pass: the inputs, and the output where it leaves at the pass's
    # end; an output received once the driver has drafted (per-tensor) is serial
    beside = pt["comm_s"][par]
    if psd.scenario.output_after_drafting:
        beside = beside - pt["return_s"][par]
    overlap = np.maximum(pt["draft_s"][par], beside + pt["verify_s"][par])
    return KMeasurement(
        k=k, draft_s=float(draft.mean()), verify_s=float(verify.mean()),
        comm_s=float(beside.mean()), serial_sd_s=float((dur - draft - verify).mean()),
        serial_psd_s=float((pdur - overlap).mean()), tokens_per_verification=float(tokens),
        throughput_sd=_trimmed(sd), throughput_psd=_trimmed(psd),
        parallelization_rate=float(psd.summary["parallelization_rate"]))


def bridge(s: Scenario, ks: Sequence[int], *, cost: StepCost | None = None,
           progress: Callable[[float], None] | None = None) -> BridgeReport:
    """Simulate SD and PSD for each k in `ks`, fit the theory and compare (see module docstring)."""
    if len(ks) < 2:
        raise ValueError("the bridge needs at least two values of k")
    points = []
    for i, k in enumerate(ks):
        sd = simulate(s.replace(method="sd", k=k), cost=cost)
        psd = simulate(s.replace(method="psd", k=k), cost=cost)
        for run in (sd, psd):
            if not run.fits:   # no steps to measure: say why, as `psdsim run` does
                raise infeasible_error(f"{run.scenario.method} at k={k}", run, s)
        points.append(measure_k(sd, psd, k))
        if progress is not None:
            progress((i + 1) / len(ks))
    k_arr = np.array([p.k for p in points], dtype=float)
    t = np.array([p.draft_s for p in points])
    t_token = float(k_arr @ t / (k_arr @ k_arr))  # least squares through the origin: t = k t_tok
    fit = fit_frontier(k_arr * t_token, np.array([p.tokens_per_verification for p in points]),
                       bonus=1.0)
    model = FrontierModel(
        alpha=fit.alpha, V=float(np.mean([p.verify_s for p in points])), bonus=1.0,
        scale=fit.scale, comm=float(np.mean([p.comm_s for p in points])),
        serial_psd=float(np.mean([p.serial_psd_s for p in points])),
        serial_sd=float(np.mean([p.serial_sd_s for p in points])))
    per_token = {"sd": model.per_token_sd(k_arr * t_token), "psd": model.per_token_psd(k_arr * t_token)}
    sim_sd = max(points, key=lambda p: p.throughput_sd)
    sim_psd = max(points, key=lambda p: p.throughput_psd)
    return BridgeReport(
        measurements=tuple(points), fit=fit, model=model, t_token=t_token,
        predicted_best_k={m: int(k_arr[np.argmin(T)]) for m, T in per_token.items()},
        closed_form_best_k={m: best_k(model, t_token, m, k_max=max(ks)).k for m in ("sd", "psd")},
        simulated_best_k={"sd": sim_sd.k, "psd": sim_psd.k},
        predicted_ratio=float(per_token["sd"].min() / per_token["psd"].min()),
        simulated_ratio=sim_psd.throughput_psd / sim_sd.throughput_sd,
        predicted_throughput={m: (s.m / T).tolist() for m, T in per_token.items()},
        measured_times_throughput=_with_measured_times(points, fit, t_token, s.m))


def _with_measured_times(points: Sequence[KMeasurement], fit: FrontierFit, t_token: float,
                         m: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"sd": [], "psd": []}
    for p in points:
        tokens = float(fit.predict(p.k * t_token))
        step_sd = p.draft_s + p.verify_s + p.serial_sd_s
        step_psd = max(p.draft_s, p.verify_s + p.comm_s) + p.serial_psd_s
        out["sd"].append(m * tokens / step_sd)
        out["psd"].append(m * tokens / step_psd)
    return out


def scenario_tail(s: Scenario, samples: int = 4000) -> TailEstimate:
    """theory.tail for a scenario's offline pool: L's distribution from its output length, k and
    acceptance (the catalog prior when the scenario sets none)."""
    if s.rate is not None:
        raise ScenarioError("rate", "the tail formula is for offline pools (all requests at t=0)",
                            "remove rate (or --set rate=none)")
    mean = s.acceptance
    if mean is None:
        prior = catalog_for(s).acceptance_prior(s.draft, s.target)
        assert prior is not None  # validated with the scenario
        mean = prior.alpha
    pmf = verifications_pmf(s.output_len, s.k, mean, s.acceptance_spread)
    return tail(s.requests, s.m, pmf, np.random.default_rng(s.seed), samples)
