"""The engine execution model (sim/execution.py), checked against figures worked out by hand.

Each test builds a pass of a catalog model under an engine profile whose constants make one side
dominate, then checks the wall time against the arithmetic written out in the test: how many
kernels the layer launches, what the CPU pays for them, how a sync or the framework adds."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsim.sim.catalog import EngineProfile, builtin_catalog
from psdsim.sim.costs import AnalyticCost
from psdsim.sim.errors import ScenarioError
from psdsim.sim.execution import EngineCost, PassModel, step_cost
from psdsim.sim.scenario import Scenario, catalog_for

CAT = builtin_catalog()
EAGER = CAT.engines["vllm-0.9.2-v0-eager"]


def _engine(**changes: float) -> EngineProfile:
    """The MineDraft engine with some constants replaced (and no sampler host work unless given)."""
    base = dict(sampler_host_ms=0.0, sampler_host_row_us=0.0, sampler_vocab_bytes=0.0)
    return dataclasses.replace(EAGER, **{**base, **changes})


def _pass(model: str, engine: EngineProfile, tp: int = 1, gpu: str = "h200") -> PassModel:
    return PassModel(CAT.models[model], CAT.gpus[gpu], tp, CAT.links["nvlink4"], engine, 0.81, 0.77)


def test_cpu_bound_eager_pass_costs_its_launches() -> None:
    # Qwen3-0.6B: 28 layers x (10 fused kernels + 2 q/k norms) + 13 per pass = 349 launches.
    # At 100 us each the CPU needs 34.9 ms; the GPU (a 1.2 GB read on an H200) far less, and
    # only its first layer's share shows: wall = 34.9 ms + gpu / 28.
    pm = _pass("qwen3-0.6b", _engine(launch_us=100.0))
    cpu = pm.cpu(0)
    assert cpu == pytest.approx(349 * 100e-6)
    gpu = pm.gpu(1, 1, 1024, 1024)
    assert gpu < cpu / 5
    assert pm.combine(cpu, gpu) == pytest.approx(34.9e-3 + gpu / 28)


def test_gpu_bound_pass_is_the_roofline_plus_kernel_time() -> None:
    # Qwen3-32B at TP=1 on an L40S: 64.6 GB of weights at 864 x 0.81 GB/s = 92 ms, far above
    # 64 x 12 + 13 = 781 launches at 1 us. GPU = roofline + 781 kernels x 5 us; the CPU shows
    # only for the first layer: wall = gpu + cpu / 64.
    pm = _pass("qwen3-32b", _engine(launch_us=1.0, kernel_us=5.0), gpu="l40s")
    gpu = pm.gpu(1, 1, 512, 512)
    kernels = 64 * 12 + 13
    assert pm.gpu_pass == pytest.approx(kernels * 5e-6)
    assert 0.09 < gpu - kernels * 5e-6 < 0.1                 # the weight read
    assert pm.cpu(0) == pytest.approx(kernels * 1e-6)
    assert pm.combine(pm.cpu(0), gpu) == pytest.approx(gpu + kernels * 1e-6 / 64)


def test_tensor_parallel_adds_collectives_to_both_sides() -> None:
    # TP=4 adds 2 all-reduces per layer: 128 more kernels, each 9 us more on the GPU in eager
    # mode than in a graph, and 10 us more to launch.
    one = _pass("qwen3-32b", _engine(launch_us=30.0), tp=1)
    four = _pass("qwen3-32b", _engine(launch_us=30.0), tp=4)
    assert four.cpu(0) - one.cpu(0) == pytest.approx(128 * (30.0 + 10.0) * 1e-6)
    assert four.gpu_pass - one.gpu_pass == pytest.approx(128 * (EAGER.kernel_us + 9.0) * 1e-6)


def test_cuda_graph_pass_pays_one_launch() -> None:
    graphs = _engine(cuda_graphs=True, graph_launch_us=15.0, launch_us=100.0)
    pm = _pass("qwen3-0.6b", graphs)
    assert pm.cpu(0) == pytest.approx(15e-6)
    gpu = pm.gpu(8, 8, 8192, 8192)
    assert pm.combine(pm.cpu(0), gpu) == pytest.approx(gpu + 15e-6)


def _cost(profile: EngineProfile, **fields: object) -> EngineCost:
    s = Scenario(**{"engine": "vllm-0.9.2-v0-eager", **fields})
    return EngineCost(s, catalog_for(s), profile)


def test_a_sync_exposes_the_cpu_work_around_a_gpu_bound_pass() -> None:
    # A GPU-bound target pass still pays, serially, the CPU work a sync separates from it:
    # preparing inputs (0.3 ms + 16 x 13.4 us), rank 1 rebuilding them from the broadcast
    # metadata (1.17 ms + 16 x metadata_request_us), the sampler's sync and the Timer's two.
    eng = _engine(launch_us=1.0)
    cost = _cost(eng)                       # psd: a dedicated drafter, MineDraft's extras apply
    t = cost.target
    tokens, ctx = 64, 16 * 700
    gpu = t.gpu(tokens, tokens, ctx, tokens * ctx / 16)
    assert t.cpu(tokens) < gpu
    host = 0.3e-3 + 16 * 13.4e-6 + 1.17e-3 + 16 * eng.metadata_request_us * 1e-6
    syncs = 3 * 20e-6
    assert cost.verify(16, tokens, ctx) == pytest.approx(host + t.combine(t.cpu(tokens), gpu) + syncs)


def test_chained_draft_passes_overlap_until_the_final_sync() -> None:
    # k draft passes run back to back (vLLM's GPU advance_step: no sync between them): the CPU's
    # k x 349 launches at 100 us overlap the GPU's passes, one sync at the end.
    cost = _cost(_engine(launch_us=100.0))
    d = cost.drafter
    gpu = d.draft_gpu(16, 3, 16 * 700)
    # the spec-decode worker's bookkeeping: 0.098 ms + 16 x 57.2 us + 16 x 3 x 2.92 us
    spec_worker = 0.098e-3 + 16 * 57.2e-6 + 16 * 3 * 2.92e-6
    expected = 0.3e-3 + 16 * 13.4e-6 + 3 * 349 * 100e-6 + gpu / (28 * 1) + 20e-6 + spec_worker
    assert d.cpu(16) == pytest.approx(349 * 100e-6)
    assert cost.draft(16, 3, 16 * 700) == pytest.approx(expected)


def test_the_spec_decode_worker_s_bookkeeping_is_paid_with_the_drafting() -> None:
    # vLLM V0's SpecDecodeWorker splits the proposals, adds the extra rows and builds the MQA
    # scorer's inputs on the driver, serially: 0.098 ms + 57.2 us per request + 2.92 us per
    # request per draft token, measured (docs/measurements/vllm_v0_host.md); none without drafts,
    # none under V1's profile.
    cost = _cost(EAGER)
    assert cost.spec_worker(16, 3) == pytest.approx(0.098e-3 + 16 * 57.2e-6 + 48 * 2.92e-6)
    without = _cost(dataclasses.replace(EAGER, spec_worker_ms=0.0, spec_worker_request_us=0.0,
                                        spec_worker_draft_us=0.0))
    assert cost.draft(16, 3, 9000) - without.draft(16, 3, 9000) == pytest.approx(cost.spec_worker(16, 3))
    assert cost.draft(16, 0, 9000) == 0.0
    v1 = _cost(CAT.engines["vllm-v1"], scheduler="vllm-v1", engine="vllm-v1")
    assert v1.spec_worker(16, 3) == 0.0


def test_framework_work_grows_with_the_batch() -> None:
    # V0 (no async output processing): 62.2 us + 13.6 us per running request (scheduling) +
    # 42.2 us per request emitting tokens (output processing), all on the critical path.
    cost = _cost(EAGER)
    assert cost.framework(32, 16) == pytest.approx(0.0622e-3 + 32 * 13.6e-6 + 16 * 42.2e-6)
    assert cost.framework(64, 32) - cost.framework(32, 16) == pytest.approx(32 * 13.6e-6 + 16 * 42.2e-6)
    v1 = _cost(CAT.engines["vllm-v1"], scheduler="vllm-v1", engine="vllm-v1")
    assert v1.framework(64, 32) == v1.framework(8, 4) == pytest.approx(0.15e-3)  # hidden but the gap


def test_minedraft_extras_only_where_the_driver_is_not_in_the_verifier_group() -> None:
    psd, sd = _cost(EAGER), _cost(EAGER, method="sd")
    assert psd.driver_prep(16, 64) > 0 and sd.driver_prep(16, 64) == 0.0
    assert psd.verify(16, 64, 8000) - sd.verify(16, 64, 8000) == pytest.approx(psd.metadata(16))


def test_roofline_engine_is_the_analytic_model() -> None:
    s = Scenario(engine="roofline")
    assert type(step_cost(s, catalog_for(s))) is AnalyticCost
    assert Scenario().engine_key == "vllm-0.9.2-v0-eager"
    assert Scenario(scheduler="vllm-v1").engine_key == "vllm-v1"


def test_unknown_engine_is_a_one_line_error() -> None:
    with pytest.raises(ScenarioError) as err:
        Scenario().replace(engine="vllm-0.1")
    assert "engine" in str(err.value) and "\n" not in str(err.value)


# -- the hot calls against the named terms they inline --------------------------------------
# sim/execution.py prices a pass in one call (`wall`, `draft_wall`, `EngineCost.draft`,
# `driver_prep`) for speed, beside the named terms the tests above check by hand (`gpu`, `cpu`,
# `combine`, `draft_gpu`, `prepare`, `metadata`). These keep the two spellings from drifting apart.

ENGINES = ("vllm-0.9.2-v0-eager", "vllm-v1")


@settings(max_examples=60, deadline=None)
@given(engine=st.sampled_from(ENGINES), tp=st.sampled_from((1, 4)), tokens=st.integers(0, 4096),
       rows=st.integers(0, 256), ctx=st.integers(0, 200_000), host_rows=st.integers(0, 256),
       k=st.integers(1, 8))
def test_one_call_pricing_equals_its_named_terms(engine, tp, tokens, rows, ctx, host_rows, k) -> None:
    pm = PassModel(CAT.models["qwen3-32b"], CAT.gpus["l40s"], tp, CAT.links["pcie4"], CAT.engines[engine],
                   0.81, 0.77)
    pairs = float(tokens * 7)
    wall, sample = pm.wall(tokens, rows, ctx, pairs, host_rows)
    assert wall == pytest.approx(pm.combine(pm.cpu(host_rows), pm.gpu(tokens, rows, ctx, pairs)), rel=1e-12)
    assert sample == pm.sample_gpu(rows)
    batch = max(rows, 1)
    assert pm.draft_wall(batch, k, ctx) == pytest.approx(
        pm.combine(k * pm.cpu(batch), pm.draft_gpu(batch, k, ctx)), rel=1e-12)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_step_s_hot_terms_equal_the_named_ones(engine: str) -> None:
    s = Scenario(engine=engine)
    cost = step_cost(s, catalog_for(s))
    assert isinstance(cost, EngineCost)
    for batch, k, ctx in ((1, 1, 0), (16, 3, 9000), (32, 5, 60_000)):
        assert cost.draft(batch, k, ctx) == pytest.approx(
            cost.prepare(batch, batch) + cost.drafter.draft_wall(batch, k, ctx) + cost._sync
            + cost.spec_worker(batch, k), rel=1e-12)
        expected = cost.prepare(batch, batch * 4) + cost.metadata(batch) if cost.parallel else 0.0
        assert cost.driver_prep(batch, batch * 4) == pytest.approx(expected, rel=1e-12)


def test_verify_parts_name_the_pass_whatever_was_priced_before():
    """The named parts of a pass are a function of the pass, not of the call before them."""
    from psdsim.sim.costs import Chunks

    cost = step_cost(Scenario(engine="vllm-0.9.2-v0-eager"), CAT)
    passes = [(8, 32, 4000, Chunks()), (16, 80, 9000, Chunks(64, 2048.0, 0, 1)), (4, 4, 900, Chunks())]
    alone = []
    for batch, tokens, ctx, chunks in passes:
        cost.verify(batch, tokens, ctx, chunks)
        alone.append(cost.verify_parts(batch, tokens, chunks))
    for (batch, tokens, _, chunks), parts in zip(reversed(passes), reversed(alone), strict=True):
        cost.verify(1, 1, 10)   # another pass priced in between
        assert cost.verify_parts(batch, tokens, chunks) == parts
        assert sum(parts) > 0


@settings(max_examples=60, deadline=None)
@given(engine=st.sampled_from(["vllm-0.9.2-v0-eager", "vllm-v1"]), tp=st.sampled_from([1, 4]),
       batch=st.integers(0, 64), k=st.integers(0, 6), ctx=st.integers(0, 100_000))
def test_a_passs_wall_time_is_its_cpu_and_gpu_combined(engine: str, tp: int, batch: int, k: int,
                                                        ctx: int) -> None:
    """`wall` and `draft_wall` are `combine(cpu, gpu)` of the same pass, to the last bit."""
    pm = _pass("qwen3-8b", CAT.engines[engine], tp)
    tokens, pairs = batch * (k + 1), float(batch * ctx)
    wall, sample = pm.wall(tokens, tokens, ctx, pairs, tokens)
    assert wall == pm.combine(pm.cpu(tokens), pm.gpu(tokens, tokens, ctx, pairs))
    assert sample == pm.sample_gpu(tokens)
    assert pm.draft_wall(batch, k, ctx) == pm.combine(k * pm.cpu(batch), pm.draft_gpu(batch, k, ctx))
