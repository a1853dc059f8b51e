"""Unfused elementwise kernels and an attention kernel priced apart (sim/execution.py).

Why: an unfused implementation's norms, rotary and activations run as their own memory-bound
kernels between the GEMMs, so their bytes add to a compute-bound prefill instead of hiding in
the pass's one roofline max; and its attention kernel runs at its own share of peak. The checks
are worked out by hand from the model's shape, and the profiles that set none of it are checked
to price every pass exactly as before."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsim.sim.catalog import EngineProfile, builtin_catalog
from psdsim.sim.costs import ForwardModel
from psdsim.sim.execution import PassModel, elementwise_bytes_per_token

CAT = builtin_catalog()
MODEL, GPU = CAT.models["qwen3-32b"], CAT.gpus["h200"]
EAGER = CAT.engines["vllm-0.9.2-v0-eager"]
MEM, COMP = 0.81, 0.77


def _pass(engine: EngineProfile, tp: int = 1) -> PassModel:
    return PassModel(MODEL, GPU, tp, CAT.links["nvlink4"], engine, MEM, COMP)


def _roof(tp: int = 1) -> ForwardModel:
    return ForwardModel(MODEL, GPU, tp, CAT.links["nvlink4"], MEM, COMP, 0.0)


@settings(max_examples=40, deadline=None)
@given(tokens=st.integers(1, 4096), ctx=st.integers(0, 65536), tp=st.sampled_from([1, 2, 4]))
def test_a_profile_without_them_prices_passes_as_before(tokens: int, ctx: int, tp: int) -> None:
    # every catalog profile leaves the new fields at 0: the pass is the one roofline plus the fixed
    # kernel time and the sampler, bit for bit
    pm = _pass(EAGER, tp)
    pairs = tokens * (ctx / max(tokens, 1) + 1)
    expected = _roof(tp).seconds(tokens, tokens, ctx, pairs) + pm.gpu_pass + pm.sample_gpu(tokens)
    assert pm.gpu(tokens, tokens, ctx, pairs) == expected


def test_elementwise_bytes_by_hand() -> None:
    # Qwen3-32B: hidden 5120, 64 x 128 query-head and 8 x 128 KV-head widths, MLP 25600, 64 layers.
    # One of each vector per token per layer, bf16: (5120 + 8192 + 1024 + 25600) x 2 B x 64 layers;
    # at TP = 2 the head and MLP vectors halve, the hidden one does not.
    one = dataclasses.replace(EAGER, elementwise_hidden=1, elementwise_heads=1, elementwise_kv_heads=1,
                              elementwise_mlp=1)
    assert elementwise_bytes_per_token(MODEL, one, 1) == (5120 + 8192 + 1024 + 25600) * 2 * 64
    assert elementwise_bytes_per_token(MODEL, one, 2) == (5120 + (8192 + 1024 + 25600) / 2) * 2 * 64


def test_elementwise_bytes_add_to_a_compute_bound_prefill() -> None:
    # 2048 prompt tokens: the GEMMs are compute-bound (131 TFLOP at 0.77 x 989 TFLOPS = 172 ms
    # against 64 GB of weights at 3.9 TB/s = 17 ms), so 10 hidden vectors per token per layer
    # (2048 x 10 x 5120 x 2 B x 64 = 13.4 GB, 3.45 ms at 0.81 x 4800 GB/s) add, not hide
    base = _pass(EAGER)
    unfused = _pass(dataclasses.replace(EAGER, elementwise_hidden=10))
    pairs = 2048 * 2049 / 2
    added = unfused.gpu(2048, 1, 0, pairs) - base.gpu(2048, 1, 0, pairs)
    assert added == pytest.approx(2048 * 10 * 5120 * 2 * 64 / (GPU.memory_bandwidth_gbps * 1e9 * MEM))
    assert added == pytest.approx(3.45e-3, rel=0.01)


def test_attention_at_its_own_efficiency() -> None:
    # 2048 x 2048 pairs, 4 x 64 heads x 128 x 64 layers FLOPs each = 8.8 TFLOP; at 35% of the
    # H200's peak it is its own kernel beside the GEMMs' roofline (which no longer carries it)
    eff = 0.35
    pm = _pass(dataclasses.replace(EAGER, attention_efficiency=eff))
    pairs = 2048 * 2048
    attention = pairs * 4 * 64 * 128 * 64 / (GPU.tflops("bf16") * 1e12 * eff)
    expected = _roof().seconds(2048, 1, 0, 0) + attention + pm.gpu_pass + pm.sample_gpu(1)
    assert pm.gpu(2048, 1, 0, pairs) == pytest.approx(expected, rel=1e-12)
    assert attention == pytest.approx(25.4e-3, rel=0.01)


def test_memory_bound_decode_attention_is_its_kv_reads() -> None:
    # a decode pass over 32 x 2048 cached tokens: both the GEMMs and the attention are
    # memory-bound, so pricing attention apart sums the same bytes the one roofline did
    apart = _pass(dataclasses.replace(EAGER, attention_efficiency=0.35))
    together = _pass(EAGER)
    ctx = 32 * 2048
    assert apart.gpu(32, 32, ctx, ctx) == pytest.approx(together.gpu(32, 32, ctx, ctx), rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 64), k=st.integers(1, 6), ctx=st.integers(0, 8192),
       eff=st.sampled_from([0.0, 0.35]), hidden=st.sampled_from([0.0, 10.0]))
def test_chained_draft_passes_are_single_passes_summed(batch: int, k: int, ctx: int, eff: float,
                                                       hidden: float) -> None:
    # pass j of k reads and attends over ctx + j x batch cached tokens, as the drafter's
    # unrolled roofline does
    pm = _pass(dataclasses.replace(EAGER, attention_efficiency=eff, elementwise_hidden=hidden))
    singles = sum(pm.gpu(batch, batch, ctx + j * batch, ctx + j * batch) for j in range(k))
    assert pm.draft_gpu(batch, k, ctx) == pytest.approx(singles, rel=1e-12)


ENGINE_TOML = ("[engines.e]\nname = 'E'\nkind = 'execution'\nsource = 's'\nkernels_per_layer = 10\n"
               "launch_us = 20.0\n")


@pytest.mark.parametrize("field, value, ok", [
    ("attention_efficiency", 0.35, True), ("attention_efficiency", 1.5, False),
    ("attention_efficiency", -0.1, False), ("elementwise_mlp", 5.0, True),
    ("elementwise_heads", -1.0, False)])
def test_a_user_profile_is_refused_naming_the_field(tmp_path, field: str, value: float, ok: bool) -> None:
    from psdsim.sim.catalog import CatalogError, load_catalog
    f = tmp_path / "e.toml"
    f.write_text(ENGINE_TOML + f"{field} = {value}\n")
    if ok:
        assert getattr(load_catalog(f).engines["e"], field) == value
    else:
        with pytest.raises(CatalogError, match=field):
            load_catalog(f)
