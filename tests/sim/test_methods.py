"""The paper's baselines and variants behave as their designs say."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from psdsim.sim.costs import ConstantCost
from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, validate
from tests.helpers.scenarios import small

SMALL = dict(requests=320, output_len=128, seed=4)


def _thr(r) -> float:
    return r.summary["throughput_tok_s"]


def test_pearl_degrades_as_m_grows_and_falls_below_sd_at_16():
    ratios = []
    for m in (1, 4, 16):
        # the paper's claim under the roofline engine; the eager engine's CPU floor changes the
        # balance at small m (docs/engine-costs.md)
        s = Scenario(m=m, requests=20 * m, output_len=128, seed=4, engine="roofline")
        ratios.append(_thr(simulate(s.replace(method="pearl"))) / _thr(simulate(s.replace(method="sd"))))
    assert ratios[0] > ratios[1] > ratios[2]
    assert ratios[2] < 1.0   # typical acceptance (0.61 for the 1.7B draft), m = 16


def test_tetris_keeps_the_verified_budget_at_k_times_m():
    s = Scenario(method="psd+tetris", k=3, extra=2, **SMALL)
    r = simulate(s)
    st = r.steps
    full = (st["kind"] == "decode") & (st["verified"] >= s.m)
    assert full.any()
    assert (st["proposed"][full] <= s.k * s.m).all()
    assert (st["proposed"][full] == s.k * s.m).mean() > 0.9   # the budget is used
    # smaller batches score every one of their k + e drafts
    small = (st["kind"] == "decode") & (st["verified"] < s.m) & st["parallelised"]
    assert (st["proposed"][small] <= (s.k + s.extra) * st["verified"][small]).all()


def test_tetris_raises_vsr_by_ranking_confident_drafts():
    plain = simulate(Scenario(method="psd", k=3, **SMALL))
    tetris = simulate(Scenario(method="psd+tetris", k=3, extra=2, **SMALL))
    assert tetris.summary["vsr"] > plain.summary["vsr"] + 0.01


def test_more_sub_batches_and_drafters_hide_slow_drafting():
    """Drafting 1.5-2x the verification time: N = 3 sub-batches with D = 2 drafters keep the
    verifier busy every step; MineDraft's N = 2, D = 1 cannot."""
    base = Scenario(method="psd", m=4, requests=600, output_len=64, prompt_len=32, acceptance=0.7,
                    acceptance_spread=1e6)
    for ratio in (1.5, 2.0):
        cost = ConstantCost(ratio, 1.0)
        two = simulate(base, cost=cost).summary["throughput_tok_s_trim80"]
        ring = base.replace(sub_batches=3, drafters=2)
        three = simulate(ring, cost=cost).summary["throughput_tok_s_trim80"]
        assert three > 1.45 * two
        assert three == pytest.approx(simulate(base, cost=ConstantCost(1.0, 1.0))
                                      .summary["throughput_tok_s_trim80"], rel=0.01)


class _Slowed(ConstantCost):
    """Fixed costs with measured-style slowdowns (sim/overlap.py): drafting and a target pass
    slow each other while both run (`contention`), and work after idling is slowed (`idle`)."""

    def __init__(self, contention: tuple[float, float] = (1.0, 1.0), idle: float = 0.0) -> None:
        super().__init__(0.004, 0.006, draft_per_token_s=0.0005, prefill_s=0.003, comm_s=1e-4,
                         reject_s=2e-4, overhead_s=5e-4)
        self.contention = contention
        self.idle = idle

    def after_idle(self, side: str, idle_s: float) -> float:
        return 1.0 + min(idle_s, 0.01) * self.idle


PIPELINES = [(2, 1), (3, 1), (3, 2)]


@pytest.mark.parametrize(("sub_batches", "drafters"), PIPELINES)
def test_every_pipeline_pays_measured_contention(sub_batches, drafters):
    """The ring (N x D beyond MineDraft's 2 x 1) ignored the profile's contention
    factors and lost nothing where MineDraft's pipeline lost 12-16%. Drafting on a drafter worker
    now slows, and is slowed by, any target pass it overlaps: every pipeline pays a similar share."""
    s = Scenario(requests=48, m=4, k=3, output_len=24, seed=3, prompt_len=64, sub_batches=sub_batches,
                 drafters=drafters)
    free = simulate(s, cost=_Slowed()).summary
    contended = simulate(s, cost=_Slowed(contention=(1.4, 1.2))).summary
    assert contended["throughput_tok_s"] < 0.9 * free["throughput_tok_s"]
    assert contended["mean_verify_ms"] > 1.1 * free["mean_verify_ms"]
    assert free == simulate(s, cost=ConstantCost(0.004, 0.006, draft_per_token_s=0.0005, prefill_s=0.003,
                                                 comm_s=1e-4, reject_s=2e-4, overhead_s=5e-4)).summary


@pytest.mark.parametrize(("sub_batches", "drafters"), PIPELINES)
def test_slowed_work_stays_one_thing_at_a_time_and_accounted(sub_batches, drafters):
    """Contention pushes drafting and passes later while they run: each drafter GPU and the
    verifier still do one thing at a time, their slices add up to their busy time, and
    recording a timeline changes nothing."""
    s = Scenario(requests=48, m=4, k=3, output_len=24, seed=3, prompt_len=64, sub_batches=sub_batches,
                 drafters=drafters)
    cost = _Slowed(contention=(1.4, 1.2), idle=30.0)
    r = simulate(s, cost=cost, timeline=True)
    assert r.summary == simulate(s, cost=_Slowed(contention=(1.4, 1.2), idle=30.0)).summary
    spans: dict[str, list[tuple[float, float]]] = {}
    for x in r.timeline.slices:
        spans.setdefault(x.track, []).append((x.start_s, x.end_s))
    for track in spans.values():
        assert all(a[1] <= b[0] + 1e-12 for a, b in itertools.pairwise(sorted(track)))
    makespan = r.summary["makespan_s"]
    verifier = sum(e - b for b, e in spans["verifier"]) / makespan
    drafter = sum(x.end_s - x.start_s for x in r.timeline.slices if x.cat == "drafter")
    assert verifier == pytest.approx(r.summary["verifier_busy"], rel=1e-9)
    assert drafter / makespan / drafters == pytest.approx(r.summary["drafter_busy"], rel=1e-9)


@pytest.mark.parametrize(("sub_batches", "drafters"), PIPELINES)
def test_every_pipeline_pays_the_after_idle_slowdown(sub_batches, drafters):
    """The drafter's work after it waited for the verifier is slowed by that wait, whichever
    pipeline runs (the ring ignored it too)."""
    s = Scenario(requests=48, m=4, k=3, output_len=24, seed=3, prompt_len=64, sub_batches=sub_batches,
                 drafters=drafters)
    free = simulate(s, cost=_Slowed()).summary
    slowed = simulate(s, cost=_Slowed(idle=100.0)).summary
    assert slowed["throughput_tok_s"] < 0.95 * free["throughput_tok_s"]
    busy_s = [r["drafter_busy"] * r["makespan_s"] for r in (free, slowed)]
    assert busy_s[1] > busy_s[0]


def test_fair_comparisons_are_simulated_not_scaled():
    s = Scenario(**SMALL)
    psd, sd = simulate(s), simulate(s.replace(method="sd"))
    sd2m, sd5 = simulate(s.replace(method="sd-2m")), simulate(s.replace(method="sd-5gpu"))
    assert len({psd.summary["decode_steps"], sd.summary["decode_steps"], sd2m.summary["decode_steps"]}) == 3
    assert sd2m.steps["running"].max() == 2 * s.m           # memory-fair: PSD's 2m in flight
    assert sd5.summary["gpus"] == 5 and sd5.summary["link_share"] > 0  # the draft on its own GPU
    assert sd5.summary["decode_steps"] == sd.summary["decode_steps"]   # same sequential steps...
    assert _thr(sd5) < _thr(sd)                                        # ...plus the link


def test_gpu_fair_as_tp_needs_a_divisible_head_count():
    r = simulate(Scenario(method="sd-5gpu", sd_5gpu_layout="tp", **SMALL))
    assert not r.fits and "TP=5" in r.summary["infeasible_reason"]
    ok = simulate(Scenario(method="sd-5gpu", sd_5gpu_layout="tp", target="vicuna-13b",
                           draft="eagle-vicuna-13b", **SMALL))
    assert ok.fits and ok.summary["gpus"] == 5


def test_eagle_hidden_states_cross_the_link():
    s = Scenario(target="vicuna-13b", draft="eagle-vicuna-13b", **SMALL)
    eagle = simulate(s).summary["mean_comm_ms"]
    plain = simulate(s.replace(draft="vicuna-7b", acceptance=0.6)).summary["mean_comm_ms"]
    assert eagle > plain  # same vocab: the difference is the hidden-state rows


def test_compact_sampler_output_shrinks_the_link_share():
    s = Scenario(**SMALL)
    full, compact = simulate(s), simulate(s.replace(sampler_output="compact"))
    assert compact.summary["mean_comm_ms"] < 0.2 * full.summary["mean_comm_ms"]
    assert _thr(compact) > _thr(full)


@pytest.mark.parametrize("method", ["pearl", "psd+tetris", "sd-2m", "sd-5gpu"])
def test_new_methods_are_deterministic(method):
    s = Scenario(method=method, extra=1, requests=60, output_len=48, seed=9)
    a, b = simulate(s), simulate(s)
    assert a.summary == b.summary
    assert np.array_equal(a.steps["end_s"], b.steps["end_s"])


def test_a_ring_drafter_gpu_does_one_thing_at_a_time():
    """Found by the invariant property test: with one drafter, drafting an undrafted sub-batch
    and the driver's rejection sampling used to run beside background drafting (busy > 1)."""
    s = Scenario(method="psd", sub_batches=3, drafters=1, k=6, m=1, requests=8, output_len=4, prompt_len=1,
                 scheduler="vllm-v1", enable_chunked_prefill=True, max_model_len=128,
                 max_num_batched_tokens=16, gpu_memory_utilization=0.65, acceptance_spread=3.0)
    r = simulate(s, timeline=True)
    assert 0 < r.summary["drafter_busy"] <= 1.0
    on_gpu = sorted((x.start_s, x.end_s) for x in r.timeline.slices if x.track.startswith("drafter"))
    assert len(on_gpu) > 3
    assert all(a[1] <= b[0] + 1e-12 for a, b in itertools.pairwise(on_gpu))


def test_per_request_pearl_scores_no_stale_drafts_and_proposes_k_minus_1():
    """The reference engine's PEARL (pearl_variant = per-request): a request proposes the k - 1
    tokens drafted ahead after its first one passed at the bonus position, else nothing, so VSR
    is that of k - 1 i.i.d. proposals; MineDraft's form scores stale drafts and sits below it."""
    a = 0.8
    s = Scenario(method="pearl", requests=200, m=8, k=3, output_len=64, prompt_len=32, seed=4,
                 acceptance=a, acceptance_spread=1e6)
    per_request = simulate(s.replace(pearl_variant="per-request")).summary
    assert per_request["vsr"] == pytest.approx((a + a * a) / 2, abs=0.02)
    assert simulate(s).summary["vsr"] < per_request["vsr"] - 0.05
    assert simulate(s.replace(pearl_variant="per-request", k=1)).summary["vsr"] is None


def test_adaptive_k_turns_speculation_off_when_drafts_are_poor_and_tracks_the_best_k():
    """k_policy = adaptive (SD): each step picks k' in 0..k for the most expected tokens/s with
    the acceptance measured so far. Poor drafts: it stops drafting and runs as fast as AR, ahead
    of every fixed k; good drafts: within 2% of the best fixed k, found without being told."""
    # roofline: a cheap draft token makes the long k worth it; under the eager engine a draft pass
    # costs ~13 ms of CPU and the best k is shorter (docs/engine-costs.md)
    base = Scenario(method="sd", requests=200, output_len=64, seed=3, engine="roofline")
    ar = _thr(simulate(base.replace(method="ar")))
    for acceptance in (0.1, 0.6, 0.9):
        s = base.replace(acceptance=acceptance)
        fixed = [_thr(simulate(s.replace(k=k))) for k in range(1, 7)]
        adaptive = simulate(s.replace(k=6, k_policy="adaptive")).summary
        assert adaptive["throughput_tok_s"] >= 0.98 * max(fixed)
        if acceptance == 0.1:
            assert adaptive["drafts_per_verification"] < 0.05
            assert adaptive["throughput_tok_s"] == pytest.approx(ar, rel=0.02) and ar > max(fixed)
        if acceptance == 0.9:
            assert adaptive["drafts_per_verification"] > 4


def test_adaptive_k_in_psd_tracks_the_best_fixed_k():
    """PSD with k_policy = adaptive prices each drafting ahead as max(draft, link + verify):
    within 3% of the best fixed k, which it is not told, from poor to good drafts."""
    base = Scenario(method="psd", requests=200, output_len=64, seed=3)
    for acceptance in (0.1, 0.6, 0.9):
        s = base.replace(acceptance=acceptance)
        best = max(_thr(simulate(s.replace(k=k))) for k in range(1, 7))
        assert _thr(simulate(s.replace(k=6, k_policy="adaptive"))) >= 0.97 * best


def test_adaptive_k_is_refused_where_it_is_not_built():
    for s in (Scenario(method="pearl", k_policy="adaptive"),
              Scenario(method="psd+tetris", extra=1, k_policy="adaptive"),
              Scenario(method="psd", sub_batches=3, k_policy="adaptive")):
        with pytest.raises(ScenarioError, match=r"^k_policy: "):
            validate(s)


@pytest.mark.parametrize("method", ["sd", "pearl", "psd"])
def test_sd_pearl_and_minedrafts_psd_take_every_step_through_the_one_booked_step(monkeypatch, method):
    """The booked step (prepare, hand the pass over, draft beside it, the work after it) is
    written once, in sim/methods/passes.py, and every step of these methods runs it."""
    from psdsim.sim.methods import passes, pearl, pipelines, sd

    calls = []

    def counted(*args, **kwargs):
        calls.append(args[4])   # the target pass
        yield from passes.booked_step(*args, **kwargs)

    for module in (sd, pearl, pipelines):
        monkeypatch.setattr(module, "booked_step", counted)
    r = simulate(small(method=method))
    assert len(calls) == len(r.steps["kind"]) > 0


def test_the_pipeline_not_the_refill_policy_chooses_the_time_engine():
    """Who drafts (the driver within the step, or drafter workers in the background) is the
    pipeline's choice, and it alone says whether the run needs SimPy's events."""
    from psdsim.sim.methods import pipelines, sub_batching
    from psdsim.sim.methods.pipelined import PipelinedSD

    minedraft, ring = Scenario(), Scenario(sub_batches=3, drafters=2)
    assert pipelines.pipeline_class(minedraft) is pipelines.DriverDrafting
    assert pipelines.pipeline_class(ring) is pipelines.RingDrafting
    assert not PipelinedSD.needs_events(minedraft) and PipelinedSD.needs_events(ring)
    for policy in (sub_batching.BatchManagerSubBatching, sub_batching.RoundRobinSubBatching):
        assert not hasattr(policy, "background")


def test_adaptive_k_prices_an_output_received_after_drafting_outside_the_overlap():
    """best_k's PSD step is max(draft, verify + beside) + after (sim/methods/passes.link_seconds):
    with draft k·1 s, verify 4 s, rate 0.9, a link time of 2 s beside the pass makes k = 6 the
    longest drafting that still hides (max(6, 6)), while the same 2 s after the drafting, serial
    whatever k is, leaves k = 4 hidden behind the 4 s pass and adds 2 s to every k: the expected
    tokens per second then pick k = 4."""
    from psdsim.sim.costs import NO_CHUNKS
    from psdsim.sim.methods.adaptive import best_k

    cost = ConstantCost(0.0, 4.0, draft_per_token_s=1.0)
    beside = best_k(cost, 1, 0, NO_CHUNKS, 8, 0.9, parallel=True, link_s=lambda tokens: (2.0, 0.0))
    after = best_k(cost, 1, 0, NO_CHUNKS, 8, 0.9, parallel=True, link_s=lambda tokens: (0.0, 2.0))
    assert (beside, after) == (6, 4)
