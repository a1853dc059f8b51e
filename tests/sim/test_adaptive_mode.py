"""The adaptive mode (`method = "adaptive"`) on hand-built cases: a cost model whose verification
and drafting grow linearly with the batch, so that the rule's thresholds are worked out by hand
(sim/methods/mode_rule.py), and traces whose requests end in a known order."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.methods.mode_rule import AR, PSD, SD, chosen, tokens_per_verification
from psdsim.sim.run import simulate
from psdsim.sim.scenario import load_scenario
from tests.helpers.linear_cost import NEVER, LinearCost, request_trace
from tests.helpers.scenarios import decode_rows, small


def _run(trace: str, requests: int, cost: LinearCost, **fields):
    s = small(method="adaptive", trace=trace, requests=requests, prompt_len=0, output_len=256, **fields)
    return simulate(s, cost=cost)


def test_the_rule_keeps_the_current_mode_within_the_margin():
    rates = {PSD: 100.0, SD: 104.0, AR: 90.0}
    assert chosen(PSD, rates, 0.05) == PSD
    assert chosen(PSD, rates, 0.03) == SD
    assert chosen(SD, {PSD: 105.0, SD: 100.0}, 0.05) == SD   # 5% more is not more than 5%
    assert chosen(AR, {PSD: 80.0, SD: 80.0, AR: 70.0}, 0.0) == PSD   # the first of equals
    assert tokens_per_verification(0.5, 3) == pytest.approx(1.875)


@pytest.mark.parametrize("margin, last_psd", [(0.0, 8), (0.1, 6)])
def test_psd_merges_into_sd_at_the_load_the_theory_gives(tmp_path, margin, last_psd):
    """V = 10 + n ms, t = 2 + n ms: a PSD pair of steps takes 2 max(t(n/2), V(n/2)) = 20 + n, an SD
    step t(n) + V(n) = 12 + 2n for the same tokens, so PSD pays for n > (V0 - t0)/d = 8; with
    margin m it is left once 20 + n > (1 + m)(12 + 2n): at n = 7 (m = 0), n = 5 (m = 0.1). The
    16 requests end one at a time from alternate sub-batches (1 token a verification), so the
    halves stay within one request of each other."""
    trace = request_trace(tmp_path, [(0.0, 3 + j) for j in range(16)])
    r = _run(trace, 16, LinearCost(10.0, 1.0, 2.0, 1.0), m=8, adaptive_margin=margin,
             adaptive_modes="psd,sd", **NEVER)
    st = r.steps
    d = decode_rows(st)
    switched = np.flatnonzero(st["switch"])
    assert len(switched) == 1, "one switch: the load only falls"
    at = switched[0]
    assert st["running"][at] == last_psd - 1
    assert (st["running"][d[d < at]] >= last_psd).all()
    # the switch drains: PSD verifies the drafts in flight and drafts nothing beside them
    assert st["mode"][at] == PSD and st["parallelised"][at] and st["drafted"][at] == 0
    assert st["verified"][at] == st["drafted"][at - 1]     # every draft made is verified
    assert (st["mode"][d[d < at]] == PSD).all() and (st["mode"][d[d > at]] == SD).all()
    after = d[d > at]
    assert (st["proposed"][after] == 3 * st["verified"][after]).all()   # SD drafts k for each
    assert not st["parallelised"][after].any()
    assert r.summary["wasted_verifications"] == 0


def test_sd_splits_into_psd_when_the_load_grows(tmp_path):
    """Two requests alone: PSD's halves of one (2 max(t(1), V(1)) = 22 ms) lose to SD's 16 ms, so
    the first decode step is SD's; once 14 more arrive, 16 requests price PSD at 36 ms against SD's
    44 and the rule splits them: two sub-batches of 8 and an init step (not parallelised)."""
    trace = request_trace(tmp_path, [(0.0, 200), (0.0, 200)] + [(0.05, 100)] * 14)
    r = _run(trace, 16, LinearCost(10.0, 1.0, 2.0, 1.0), m=8, adaptive_modes="psd,sd", **NEVER)
    st = r.steps
    d = decode_rows(st)
    assert st["mode"][d[0]] == SD and st["switch"][d[0]] and st["running"][d[0]] == 2
    split = d[(st["mode"][d] == PSD) & st["switch"][d]][0]
    assert st["running"][split] == 16
    assert st["batch0"][split] == st["batch1"][split] == 8
    assert not st["parallelised"][split] and st["drafted"][split] == 8
    assert st["parallelised"][d[(d > split) & (d < split + 6)]].all()
    assert (st["mode"][d[(d > d[0]) & (d < split)]] == SD).all()


@pytest.mark.parametrize("acceptance, mode", [(0.35, AR), (0.45, SD)])
def test_speculation_turns_off_below_the_acceptance_that_pays_for_it(tmp_path, acceptance, mode):
    """Constant t = 4 ms, V = 10 ms, k = 1: SD yields (1 + a) tokens per 14 ms, AR one per
    max(t, V) = 10 ms (the draft model's one pass beside the target's), PSD (1 + a) per 20 ms: AR
    pays below a = 0.4. The rule starts from the configured acceptance."""
    trace = request_trace(tmp_path, [(0.0, 40)] * 8)
    r = _run(trace, 8, LinearCost(10.0, 0.0, 4.0, 0.0), m=4, k=1, acceptance=acceptance,
             acceptance_spread=1e9)
    st = r.steps
    d = decode_rows(st)
    assert st["mode"][d[0]] == mode and st["switch"][d[0]]
    if mode == AR:
        assert (st["mode"][d] == AR).all() and st["switch"][d].sum() == 1
        assert (st["proposed"][d] == 0).all() and r.summary["wasted_verifications"] == 0
        # the draft model's pass keeps its KV current, beside the target's: the step is V
        assert np.allclose(st["draft_s"][d], 4e-3)
        assert np.allclose(st["end_s"][d] - st["start_s"][d], 10e-3)


def test_the_tail_is_split_again_where_two_halves_still_pay(tmp_path):
    """Sub-batch 1 (requests 0, 2, ...) ends long before sub-batch 0, whose 8 requests MineDraft
    then runs as SD: t(8) + V(8) = 36 ms for 8 tokens with t = V = 10 + n ms. Two halves of 4 take
    2 max(t(4), V(4)) = 28 ms for as many: the rule splits them again, once the drafts in flight
    are verified (PSD's own first tail step)."""
    rows = [(0.0, 6 if j % 2 == 0 else 120) for j in range(16)]
    trace = request_trace(tmp_path, rows)
    r = _run(trace, 16, LinearCost(10.0, 1.0, 10.0, 1.0), m=8, adaptive_modes="psd", **NEVER)
    st = r.steps
    d = decode_rows(st)
    resplit = d[st["switch"][d]]
    assert len(resplit) == 1
    at = resplit[0]
    assert st["running"][at] == 8 and st["mode"][at] == PSD
    assert st["batch0"][at] == st["batch1"][at] == 4 and not st["parallelised"][at]
    # before it, PSD's own tail: one step verifying the drafts in flight, then SD steps
    tail = d[(d < at) & ((st["batch0"][d] == 0) | (st["batch1"][d] == 0))]
    assert len(tail) == 1 and st["parallelised"][tail[0]]


def test_the_mode_columns_reach_steps_csv_and_the_timeline(tmp_path):
    from psdsim.sim.output.csv_table import table_csv
    from psdsim.sim.output.timeline import trace_document

    s = small(method="adaptive", requests=12, acceptance=0.2, acceptance_spread=1e9)
    r = simulate(s, timeline=True)
    header = table_csv(r.steps).splitlines()[0].split(",")
    assert header[-2:] == ["mode", "switch"]
    assert set(r.steps["mode"]) <= {PSD, SD, AR} and AR in set(r.steps["mode"])
    steps = [e for e in trace_document(r)["traceEvents"] if e.get("cat") == "step"]
    assert [e["args"]["mode"] for e in steps] == r.steps["mode"].tolist()
    syncs = [e for e in trace_document(r)["traceEvents"] if e.get("name") == "draft (KV sync)"]
    assert syncs, "the AR mode's draft pass is drawn on the drafter's track"


def test_other_methods_have_no_mode_columns():
    assert "mode" not in simulate(small(method="psd", requests=8)).steps


def test_adaptive_is_deterministic_and_runs_the_deployment_of_psd():
    s = small(method="adaptive", requests=30, rate=20.0, abort_fraction=0.3, abort_window_s=0.5)
    a, b = simulate(s), simulate(s)
    assert a.summary == b.summary
    assert all(np.array_equal(a.steps[c], b.steps[c]) for c in a.steps)
    assert a.summary["gpus"] == simulate(s.replace(method="psd")).summary["gpus"] == 5
    assert (a.steps["running"] <= 2 * s.m).all()


@pytest.mark.parametrize("fields, field", [
    (["adaptive_modes=sd,ar"], "adaptive_modes"), (["adaptive_modes=psd,tree"], "adaptive_modes"),
    (["adaptive_margin=1.5"], "adaptive_margin"), (["kv_patch=intended"], "kv_patch"),
    (["sub_batches=3"], "sub_batches"), (["k_policy=adaptive"], "k_policy"),
])
def test_adaptive_refuses_what_it_does_not_model(fields, field):
    from psdsim.sim.errors import ScenarioError

    with pytest.raises(ScenarioError) as err:
        load_scenario(overrides=["method=adaptive", *fields])
    assert err.value.field == field


@pytest.mark.parametrize("fields, mode", [
    (dict(acceptance=0.2), AR), (dict(gpu="h100-sxm", link="nvlink4", rate=1.0), SD),
    (dict(adaptive_modes="psd"), PSD)])
def test_the_rule_prices_the_steps_it_then_runs(monkeypatch, fields, mode):
    """On the default engine (driver prep, link, rejection, framework work), the rule's price of
    the mode it keeps is what the step takes: SD's and AR's to rounding, PSD's over a pair of
    steps with the same requests within 1% (the second half's context has grown by the first's
    tokens)."""
    from psdsim.sim.methods import adaptive_mode

    priced: list[tuple[str, int, float, float] | None] = []
    planning = adaptive_mode.AdaptiveMode.planning

    def spied(self):
        planning(self)
        halves = self._halves()
        n, a = halves[0].requests + halves[1].requests, self.length.estimate.rate
        priced.append((self.mode, n, self.prices.rates((self.mode,), halves, a)[self.mode], a)
                      if n and self.pending is None else None)

    monkeypatch.setattr(adaptive_mode.AdaptiveMode, "planning", spied)
    s = load_scenario(overrides=["method=adaptive", "requests=60"] + [f"{k}={v}" for k, v in fields.items()])
    st = simulate(s).steps
    took = st["end_s"] - st["start_s"]
    plain = (st["kind"] == "decode") & (st["prefill_groups"] == 0)
    errors = []
    for i, p in enumerate(priced[:-1]):
        if p is None or not plain[i] or p[0] != mode:
            continue
        _, n, rate, a = p
        tokens = n * (1 if mode == AR else tokens_per_verification(a, s.k))
        if mode == PSD:
            if not (st["parallelised"][i] and st["parallelised"][i + 1] and plain[i + 1]
                    and st["running"][i] == st["running"][i + 1]):
                continue
            errors.append(tokens / (took[i] + took[i + 1]) / rate - 1)
        else:
            errors.append(tokens / took[i] / rate - 1)
    assert len(errors) > 20
    assert np.abs(errors).max() < (0.01 if mode == PSD else 1e-9)


def test_run_compare_sweep_and_plan_take_the_adaptive_method(tmp_path, capsys):
    import csv
    import json

    from psdsim.cli import main

    small_run = ["--set", "requests=12", "--set", "output_len=24", "--set", "m=4"]
    assert main(["run", "--method", "adaptive", *small_run, "--out", str(tmp_path / "run")]) == 0
    with open(tmp_path / "run" / "steps.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {r["mode"] for r in rows} <= {PSD, SD, AR} and {r["switch"] for r in rows} <= {"true", "false"}
    assert main(["compare", "--methods", "psd,adaptive", *small_run, "--no-write"]) == 0
    assert "adaptive/psd" in capsys.readouterr().out
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('[base]\nrequests = 12\noutput_len = 24\nm = 4\n'
                     '[grid]\nmethod = ["psd", "adaptive"]\nadaptive_margin = [0.0, 0.2]\n')
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "s"), "--workers", "1", "--no-figures"]) == 0
    with open(tmp_path / "s" / "results.csv", newline="", encoding="utf-8") as f:
        swept = list(csv.DictReader(f))
    assert [r["status"] for r in swept] == ["ok"] * 4
    assert {r["summary_method"] for r in swept} == {"psd", "adaptive"}
    plan = tmp_path / "plan.toml"
    plan.write_text('[base]\nrequests = 24\noutput_len = 24\nm = 4\n[space]\nmethod = ["sd", "adaptive"]\n'
                    '[slo]\nlatency_p99_ms = 20000\n')
    capsys.readouterr()
    assert main(["plan", str(plan), "--out", str(tmp_path / "p"), "--json", "--no-figures",
                 "--workers", "1"]) == 0
    doc = json.loads((tmp_path / "p" / "plan.json").read_text())
    rates = {r["method"]: r for r in doc["rows"]}
    assert rates["adaptive"]["gpus"] == 5 and rates["adaptive"]["max_rate_req_s"]


def test_ar_steps_keep_learning_the_acceptance(tmp_path):
    """The scenario's acceptance (the prior, 0.3, weighing 20 positions) says AR (t = 4 ms, V = 10,
    k = 1: SD pays above 0.4, and by the 5% margin above 0.47), but the requests accept 0.9: after
    one AR step of 8 requests the estimate is (20 x 0.3 + 8 x 0.9) / 28 = 0.471, and the second
    decode step is SD's."""
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,acceptance\n" + "0,8,40,0.9\n" * 8,
                    encoding="utf-8")
    r = _run(str(path), 8, LinearCost(10.0, 0.0, 4.0, 0.0), m=4, k=1, acceptance=0.3)
    st = r.steps
    d = decode_rows(st)
    assert st["mode"][d[0]] == AR and st["mode"][d[1]] == SD and st["switch"][d[:2]].all()
    assert (st["mode"][d[1:]] == SD).all()
