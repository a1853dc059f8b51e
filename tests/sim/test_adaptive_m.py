"""The adaptive method's m (`adaptive_m = true`, sim/methods/m_rule.py) on hand-built cases: a cost
model whose verification and drafting grow linearly with the sub-batch (V = V0 + v·n, t = t0 + d·n
ms, nothing else costs), so that PSD's tokens/s at sub-batches of n, n / max(t(n), V(n)) for
balanced halves, and the rule's steps are worked out by hand; no draft is ever accepted, so that
every verification yields one token whatever m."""

from __future__ import annotations

from dataclasses import replace
from itertools import groupby

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdsim.sim.errors import ScenarioError
from psdsim.sim.methods.m_rule import MBounds, MRule, Observed, m_step, resized
from psdsim.sim.methods.mode_rule import PSD, Half
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, load_scenario
from tests.helpers.invariants import check_invariants
from tests.helpers.linear_cost import NEVER, LinearCost, request_trace
from tests.helpers.scenarios import decode_rows, scenarios, small


def _run(tmp_path, cost: LinearCost, requests: int, m: int, **fields):
    """`requests` requests there at once, 8-token prompts, 60 output tokens each: the queue
    stays long while m moves; PSD alone, so that only m's rule acts."""
    trace = request_trace(tmp_path, [(0.0, 60)] * requests)
    s = small(method="adaptive", trace=trace, requests=requests, prompt_len=0, output_len=64, m=m,
              **{"adaptive_modes": "psd", "adaptive_m": True, **NEVER, **fields})
    return simulate(s, cost=cost)


def _ms(steps: dict[str, np.ndarray]) -> list[int]:
    """The m in force, each value once, in the order the run went through them."""
    return [int(m) for m, _ in groupby(steps["m"])]


@pytest.mark.parametrize("margin, path", [
    (0.05, [4, 5]), (0.0, [4, 5, 6, 7, 8, 10, 12, 15, 18, 22])])
def test_m_grows_while_the_larger_m_prices_above_the_margin(tmp_path, margin, path):
    """V = 1.5 + n, t = 1 + n: drafting always hides, PSD yields n / (1.5 + n) per ms. From m to
    m' = m + max(1, m // 4) that is m'(1.5 + m) / (m(1.5 + m')): 4 -> 5 gains 27.5/26 = 5.8%,
    5 -> 6 39/37.5 = 4%, within the 5% margin: m stays 5. Without a margin every step gains
    something, and m grows until the 40 requests all run (2 x 22 seats)."""
    r = _run(tmp_path, LinearCost(1.5, 1.0, 1.0, 1.0), 40, 4, adaptive_margin=margin)
    assert _ms(r.steps) == path
    assert r.steps["running"].max() == min(40, 2 * path[-1])


def test_m_stops_growing_where_drafting_would_no_longer_hide(tmp_path):
    """V = 10 + n, t = 2n: drafting hides up to n = 10 (t* = V). Each step up to 10 gains more
    than 5% (4 -> 5: 16.7%, ..., 8 -> 10: 12.5%); 10 -> 12 would draft 24 ms beside a 22 ms pass."""
    r = _run(tmp_path, LinearCost(10.0, 1.0, 0.0, 2.0), 60, 4)
    assert _ms(r.steps) == [4, 5, 6, 7, 8, 10]


def test_m_shrinks_where_drafting_exceeds_verification_at_no_cost(tmp_path):
    """V = 10 + n, t = 2n at m = 16: drafting takes 32 ms beside a 26 ms pass, past the margin.
    Past n = 10 PSD yields n / 2n = 0.5 per ms whatever n: 12 costs nothing and m shrinks; at 12
    drafting (24 ms) still exceeds the pass (22 ms) by more than 5%, but 9 would yield 9/19, 5%
    less: m holds, and the run never grows back (15 would not hide its drafting)."""
    r = _run(tmp_path, LinearCost(10.0, 1.0, 0.0, 2.0), 80, 16)
    st = r.steps
    assert _ms(st) == [16, 12]
    shrunk = decode_rows(st)[st["m"][decode_rows(st)] == 12][0]
    # no request is preempted for it: the running set falls to 24 as its requests end
    assert st["preempted"].sum() == 0 and st["running"][shrunk] == 32
    assert st["running"][shrunk:].min() <= 24 and (np.diff(st["running"][shrunk:][:200]) <= 0).any()


def test_m_shrinks_when_the_kv_pool_runs_out(tmp_path):
    """A pool of 60 blocks holds 11 requests at their end (8 + 60 tokens and k slots: 5 blocks),
    and m = 20 admits 40: the first shortage (40 running) takes m to 15; the scheduler's own
    preemptions then shed the excess over 30 without moving m again, and m never grows back to
    a running set the pool has run out at. Fewer requests are preempted than at a fixed m."""
    cost, tight = LinearCost(2.0, 1.0, 1.0, 1.0), dict(num_gpu_blocks_override=60, max_model_len=320)
    r = _run(tmp_path, cost, 60, 20, **tight)
    st = r.steps
    first = np.flatnonzero(st["preempted"] > 0)[0]
    assert st["running"][first] + st["preempted"][first] == 40
    assert st["m"][first] == 20 and st["m"][first + 1] == 15
    ms = _ms(st)
    assert ms[:3] == [20, 15, 12] and max(ms[1:]) < 20
    fixed = _run(tmp_path, cost, 60, 20, adaptive_m=False, **tight)
    assert st["preempted"].sum() < fixed.steps["preempted"].sum()


class LinearPrices:
    """The rule's prices for the linear costs above, by hand: PSD's pair of steps over halves
    a, b takes max(t(b), V(a)) + max(t(a), V(b)) ms for a + b tokens."""

    def __init__(self, V0: float, v: float, t0: float, d: float) -> None:
        self.V = lambda n: V0 + v * n
        self.t = lambda n: t0 + d * n

    def rates(self, modes, halves: tuple[Half, Half], rate: float) -> dict[str, float]:
        a, b = halves[0].requests, halves[1].requests
        return {PSD: (a + b) / (max(self.t(b), self.V(a)) + max(self.t(a), self.V(b)))}

    def psd_overlap(self, halves: tuple[Half, Half]) -> tuple[float, float]:
        a, b = halves[0].requests, halves[1].requests
        return self.t(a) + self.t(b), self.V(a) + self.V(b)


def _seen(**changes) -> Observed:
    base = dict(running=32, waiting=10, pool_blocks=1000, blocks_each=2, preempted=0, ran_out_at=0,
                drafting_s=0.0, verifying_s=0.0)
    return Observed(**{**base, **changes})


HALVES = (Half(16, 160, 0), Half(16, 160, 0))


def test_drafting_within_the_margin_of_verification_holds_m():
    """t = 2n, V = 10 + n at m = 16 (PSD 0.5 per ms whatever n past 10): the last step's
    drafting 4% above its pass holds m, 6% above shrinks it; without waiting requests no seat is
    contested and m holds."""
    rule = MRule(LinearPrices(10.0, 1.0, 0.0, 2.0), MBounds(1, 0), 0.05)   # type: ignore[arg-type]
    assert rule.next_m(16, _seen(drafting_s=1.04, verifying_s=1.0), HALVES, 0.5) == 16
    assert rule.next_m(16, _seen(drafting_s=1.06, verifying_s=1.0), HALVES, 0.5) == 12
    assert rule.next_m(16, _seen(drafting_s=1.06, verifying_s=1.0, waiting=0), HALVES, 0.5) == 16


@pytest.mark.parametrize("t0, d, grows", [(20.0, 0.5, True), (10.0, 2.0, False)])
def test_m_grows_toward_hidden_drafting_but_not_away_from_it(t0, d, grows):
    """V = 10 + n with halves of 4 (V = 14 ms): t = 20 + n/2 drafts 22 ms, not hidden, but at 5 it
    drafts 22.5 beside 15, a smaller share (1.5 against 1.57), and 5/22.5 beats 4/22 by 22%: m
    grows toward t* = V. t = 10 + 2n drafts 18 beside 14 and 20 beside 15 at 5, a larger share:
    m holds, though 5/20 would beat 4/18 by 12.5%."""
    rule = MRule(LinearPrices(10.0, 1.0, t0, d), MBounds(1, 0), 0.05)   # type: ignore[arg-type]
    halves = (Half(4, 40, 0), Half(4, 40, 0))
    assert rule.next_m(4, _seen(running=8), halves, 0.5) == (5 if grows else 4)


def test_the_kv_pool_gates_growth_and_a_preemption_shrinks_m():
    """V = 20 + n, t = n: growing from 16 to 20 pays (20/40 against 16/36) where the pool holds
    the 32 running requests and 8 newcomers at 2 blocks each; a preemption shrinks m whatever the
    prices say."""
    rule = MRule(LinearPrices(20.0, 1.0, 0.0, 1.0), MBounds(1, 0), 0.05)   # type: ignore[arg-type]
    assert rule.next_m(16, _seen(), HALVES, 0.5) == 20
    assert rule.next_m(16, _seen(pool_blocks=80), HALVES, 0.5) == 20
    assert rule.next_m(16, _seen(pool_blocks=79), HALVES, 0.5) == 16
    assert rule.next_m(16, _seen(running=31), HALVES, 0.5) == 16   # a seat is free: nothing to grow for
    assert rule.next_m(16, _seen(preempted=1, running=31), HALVES, 0.5) == 12


@pytest.mark.parametrize("m, bounds, seen, expect", [
    (16, MBounds(1, 18), _seen(), 18), (16, MBounds(1, 16), _seen(), 16),
    (16, MBounds(14, 0), _seen(preempted=1, running=31), 14),
    (14, MBounds(14, 0), _seen(preempted=1, running=27), 14),
])
def test_m_never_leaves_its_bounds(m, bounds, seen, expect):
    rule = MRule(LinearPrices(20.0, 1.0, 0.0, 1.0), bounds, 0.05)   # type: ignore[arg-type]
    assert rule.next_m(m, seen, HALVES, 0.5) == expect


def test_resized_keeps_the_context_per_request():
    assert resized((Half(3, 300, 1), Half(5, 500, 3)), 16) == (Half(8, 800, 4), Half(8, 800, 4))


def test_the_m_column_is_written_only_with_the_option():
    s = small(method="adaptive", requests=30)
    assert "m" not in simulate(s).steps
    r = simulate(replace(s, adaptive_m=True))
    assert "m" in r.steps and r.steps["m"][0] == s.m
    from psdsim.sim.output.csv_table import table_csv
    assert table_csv(r.steps).splitlines()[0].split(",")[-3:] == ["mode", "switch", "m"]


@pytest.mark.parametrize("fields, field", [
    (["method=psd", "adaptive_m=true"], "adaptive_m"),
    (["method=adaptive", "adaptive_m_max=32"], "adaptive_m_max"),
    (["method=adaptive", "adaptive_m=true", "adaptive_m_min=17"], "adaptive_m_min"),
    (["method=adaptive", "adaptive_m=true", "adaptive_m_max=8"], "adaptive_m_max"),
])
def test_bounds_that_do_not_hold_m_are_refused(fields, field):
    with pytest.raises(ScenarioError) as err:
        load_scenario(overrides=fields)
    assert err.value.field == field


@st.composite
def _moving_m(draw: st.DrawFn) -> Scenario:
    s = draw(scenarios(["adaptive"]))
    high = draw(st.sampled_from([0, s.m, s.m + 1, 4 * s.m]))
    return replace(s, adaptive_m=True, adaptive_m_min=draw(st.integers(1, s.m)), adaptive_m_max=high)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_moving_m())
def test_invariants_hold_while_m_moves(s: Scenario):
    """The invariant suite, and m within its bounds, moving one step at a time, and the running
    set within the most seats m has given so far (a smaller m preempts no one)."""
    check_invariants(s)
    st_ = simulate(s).steps
    ms = st_["m"].astype(int)
    assert ms[0] == s.m and (ms >= s.adaptive_m_min).all()
    assert s.adaptive_m_max == 0 or (ms <= s.adaptive_m_max).all()
    moved = np.flatnonzero(np.diff(ms))
    assert all(abs(ms[i + 1] - ms[i]) <= m_step(max(ms[i], ms[i + 1])) for i in moved)
    assert (st_["running"] <= 2 * np.maximum.accumulate(ms)).all()
