"""The reference engine (engine/reference): lossless, tunable, two real processes, readable traces.

These tests run real models (PyTorch, the `engine` extra); without torch they are skipped.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from psdsim.calibration.minedraft import read_minedraft  # noqa: E402
from psdsim.engine.reference import EngineConfig, ModelConfig, run, sampling  # noqa: E402
from psdsim.engine.reference.model import Packed, build_target  # noqa: E402
from psdsim.engine.reference.schedule import workload  # noqa: E402

# A model small enough that a run is dominated by its steps' fixed costs, not by arithmetic.
TINY = ModelConfig(vocab=64, hidden=64, heads=2, layers=2, mlp=128, draft_layers=1, draft_noise=0.3, seed=7)


def tiny(**changes) -> EngineConfig:
    base = dict(k=3, m=3, requests=7, prompt_len=5, prompt_len_max=20, output_len=24, model=TINY,
                warmup_passes=1)
    base.update(changes)
    return EngineConfig(**base)


# -- temperature 0: every method is greedy AR, token for token --------------------------------


@pytest.fixture(scope="module")
def greedy_ar() -> list[list[int]]:
    return run(tiny(method="ar", temperature=0.0)).outputs


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("method", ["sd", "psd", "pearl"])
def test_greedy_outputs_equal_ar(greedy_ar, method, k):
    out = run(tiny(method=method, k=k, temperature=0.0)).outputs
    assert out == greedy_ar
    assert all(len(o) == 24 for o in out)


# -- temperature 1: the outputs follow the target's distribution ------------------------------

SMALL_VOCAB = ModelConfig(vocab=16, hidden=32, heads=2, layers=2, mlp=64, draft_layers=1, draft_noise=0.5,
                          seed=3)
SAMPLES = 3000
DEPTH = 4          # t1 (sampled at prefill) .. t4 (speculative steps, after accepts and rejections)
ALPHA = 1e-3       # false-alarm rate of each chi-square test


def _distribution_run(method: str) -> EngineConfig:
    return EngineConfig(method=method, k=2, m=200, requests=SAMPLES, prompt_len=4, output_len=DEPTH,
                        same_prompt=True, temperature=1.0, seed=11, model=SMALL_VOCAB, warmup_passes=0)


@pytest.fixture(scope="module")
def exact_marginals() -> list[np.ndarray]:
    """P(t_j) for j = 1..DEPTH under the target, by enumerating every prefix (16^3 at depth 4)."""
    cfg = _distribution_run("sd")
    prompt = workload(cfg)[0].prompt
    target = build_target(SMALL_VOCAB, len(prompt) + DEPTH + 1)
    prefixes: list[list[int]] = [[]]
    weights = torch.ones(1, dtype=torch.float64)
    marginals = []
    for _ in range(DEPTH):
        seqs = [prompt + p for p in prefixes]
        batch = Packed.build(list(range(len(seqs))), [0] * len(seqs), seqs)
        probs = torch.softmax(target(batch, target.new_cache(len(seqs)), batch.last_rows()).double(), -1)
        joint = weights[:, None] * probs
        marginals.append(joint.sum(0).numpy())
        prefixes = [[*p, t] for p in prefixes for t in range(SMALL_VOCAB.vocab)]
        weights = joint.flatten()
    return marginals


def _p_values(outputs: list[list[int]], marginals: list[np.ndarray]) -> list[float]:
    """Chi-square goodness of fit of each position's token counts to the exact marginal (bins
    with an expected count below 5 merged)."""
    from scipy.stats import chisquare

    out = []
    tokens = np.array(outputs)
    for j, expected_p in enumerate(marginals):
        observed = np.bincount(tokens[:, j], minlength=len(expected_p)).astype(float)
        expected = expected_p * len(tokens)
        small = expected < 5
        obs = np.append(observed[~small], observed[small].sum())
        exp = np.append(expected[~small], expected[small].sum())
        if exp[-1] == 0:
            obs, exp = obs[:-1], exp[:-1]
        out.append(float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue))
    return out


@pytest.mark.parametrize("method", ["sd", "psd", "pearl"])
def test_outputs_follow_the_target_distribution(exact_marginals, method):
    """Each of the first DEPTH generated tokens, over SAMPLES requests with one prompt, passes a
    chi-square test against the target's exact marginal at ALPHA = 0.001 (so 4 tests x 3 methods
    raise a false alarm with probability at most 1.2%; the seed is fixed, so the outcome is too)."""
    result = run(_distribution_run(method))
    assert result.summary()["vsr"] < 0.8  # drafts are rejected often: the test exercises resampling
    p = _p_values(result.outputs, exact_marginals)
    assert min(p) > ALPHA, p


def test_a_broken_sampler_fails_the_distribution_test(exact_marginals, monkeypatch):
    """The same test has power: accepting every draft token (sampling from the draft) fails it."""
    monkeypatch.setattr(sampling, "accept", lambda p, q, u: torch.ones_like(p, dtype=torch.bool))
    result = run(_distribution_run("sd"))
    assert result.summary()["vsr"] == 1.0
    p = _p_values(result.outputs, exact_marginals)
    assert min(p[1:]) < 1e-6, p


def test_rejection_sampling_reproduces_p_exactly_in_expectation():
    """verify(): over many draws, the first emitted token's frequencies match p (vocab 4)."""
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    n = 20000
    counts = Counter()
    drafts = torch.multinomial(q.expand(n, 4), 1, replacement=True, generator=g).squeeze(1).tolist()
    verdict = sampling.verify([p] * n, [q] * n, [[d] for d in drafts], g)
    counts.update(e[0] for e in verdict.emitted)
    freq = np.array([counts[t] / n for t in range(4)])
    assert np.abs(freq - p[0].numpy()).max() < 0.015
    assert all(len(e) == (2 if a == 1 else 1) for e, a in zip(verdict.emitted, verdict.accepted, strict=True))


# -- the acceptance knob ------------------------------------------------------------------------


@pytest.mark.parametrize(("noise", "low", "high"), [(0.0, 0.85, 1.0), (0.4, 0.45, 0.7), (0.7, 0.2, 0.4)])
def test_draft_noise_tunes_acceptance(noise, low, high):
    """On the default model, k = 1 (VSR = per-token acceptance): about 0.93, 0.58, 0.27."""
    cfg = EngineConfig(method="sd", k=1, m=8, requests=16, prompt_len=32, output_len=48, warmup_passes=1)
    vsr = run(cfg.with_changes(**{"model.draft_noise": noise})).summary()["vsr"]
    assert low <= vsr <= high


# -- PSD: two processes, the Batch Manager, conservation, traces --------------------------------


@pytest.fixture(scope="module")
def psd_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("psd")
    cfg = tiny(method="psd", k=3, m=3, requests=30, output_len=20, trace_dir=out, seed=5,
               model=replace(TINY, draft_noise=0.4))
    return run(cfg)


def test_psd_runs_drafter_and_verifier_in_two_processes(psd_run):
    s = psd_run.summary()
    assert s["driver_pid"] != s["verifier_pid"]
    assert s["parallelization_rate"] > 0.8
    decode = [st for st in psd_run.steps if st.decode]
    assert all(st.send_bytes and st.return_bytes for st in decode)
    assert all(st.return_bytes == 2 * 4 * TINY.vocab * (st.verify_batch + st.verify_len) for st in decode)


def test_psd_batch_manager_keeps_sub_batches_full_and_balanced(psd_run):
    cfg = psd_run.config
    steps = psd_run.steps
    # While prompts wait, every decode step finds both sub-batches full: refills go where the holes are.
    admitted = 0
    for st in steps:
        if not st.decode:
            admitted += st.prompts
        elif admitted < cfg.requests:
            assert st.batches == (cfg.m, cfg.m)
        if st.decode:  # one sub-batch verified, the other drafted
            assert st.verify_batch + st.draft_ahead_batch == sum(st.batches)
            assert st.verify_batch in st.batches
    # The first decode step is the init step; at the end nothing is left to draft ahead.
    decode = [st for st in steps if st.decode]
    assert not decode[0].parallelised and decode[1].parallelised
    assert decode[-1].draft_ahead_batch == 0


def test_no_request_is_lost_or_finished_twice_and_tokens_are_conserved(psd_run):
    cfg = psd_run.config
    reqs = psd_run.requests
    assert sorted(r.rid for r in reqs) == list(range(cfg.requests))
    assert all(r.generated == cfg.output_len and math.isfinite(r.end_s) for r in reqs)
    kept = sum(st.kept for st in psd_run.steps)
    assert kept == cfg.requests * cfg.output_len
    for st in psd_run.steps:
        if st.decode:  # each verified request emits its accepted drafts + 1
            assert st.generated - st.accepted == st.verify_batch
            assert st.accepted <= st.verify_len <= cfg.k * st.verify_batch
    # Each request was admitted once, and no step scheduled it after it had finished.
    prefills = Counter(tid for st in psd_run.steps if not st.decode for tid in st.requests)
    assert len(prefills) == cfg.requests and set(prefills.values()) == {1}
    end = {r.tid: r.end_s for r in reqs}
    assert all(st.start_s < end[tid] for st in psd_run.steps for tid in st.requests)
    lines = [json.loads(line) for line in Path(psd_run.trace_path).read_text().splitlines()]
    requests = [t for t in lines[0]["traces"] if t["type"] == "Request"]
    assert len(requests) == cfg.requests == len({t["tid"] for t in requests})


def test_traces_read_with_the_minedraft_reader(psd_run, tmp_path):
    built, _ = read_minedraft(psd_run.trace_path)
    kinds = Counter(s.kind for s in built.samples)
    assert kinds["verify"] > 10 and kinds["prefill"] >= 1 and kinds["draft"] >= 1  # PSD's init step
    sd = run(tiny(method="sd", trace_dir=tmp_path))
    built, _ = read_minedraft(sd.trace_path)
    draft = [s for s in built.samples if s.kind == "draft"]
    verify = [s for s in built.samples if s.kind == "verify"]
    decode = [st for st in sd.steps if st.decode]
    assert len(draft) == len(verify) == len(decode)
    assert [s.batch for s in verify] == [st.verify_batch for st in decode]  # inferred = recorded
    assert all(s.k == 3 for s in draft)
    record = json.loads(sd.trace_path.read_text())["traces"][len(sd.steps) - 1]
    assert record["psdsim_verify_context_tokens"] > 0 and "psdsim_draft_sync_context_tokens" in record


def test_ar_over_the_channel_traces_transfers(tmp_path):
    """`separate_verifier` puts AR's target in its own process: its trace times the channel, and
    the reader takes its decode steps as passes without speculation."""
    result = run(tiny(method="ar", separate_verifier=True, trace_dir=tmp_path))
    assert result.driver_pid != result.verifier_pid
    built, _ = read_minedraft(result.trace_path)
    verify = [s for s in built.samples if s.kind == "verify"]
    assert verify and all(s.k == 0 for s in verify)
    steps = [t for t in json.loads(result.trace_path.read_text())["traces"] if t["type"] == "Step"]
    decode = [t for t in steps if not t["is_prompt_run"]]
    assert all(t["psdsim_send_time"] > 0 for t in decode)
    assert all(t["psdsim_return_bytes"] == 8 * TINY.vocab * t["psdsim_verify_batch"] for t in decode)


def test_same_config_gives_the_same_tokens():
    cfg = tiny(method="psd", requests=5, output_len=12)
    assert run(cfg).outputs == run(cfg).outputs


def test_kineto_traces_carry_psdsim_ranges(tmp_path):
    result = run(tiny(method="psd", requests=4, output_len=8, trace_dir=tmp_path, profile=True))
    names = set()
    for path in result.kineto_paths:
        events = json.loads(path.read_text())["traceEvents"]
        names |= {e["name"].split(" ")[0] for e in events if e.get("cat") == "user_annotation"}
    assert {"psdsim:draft", "psdsim:verify", "psdsim:prefill", "psdsim:draft_prefill",
            "psdsim:reject", "psdsim:comm"} <= names
