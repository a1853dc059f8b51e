"""The catalog: every entry sourced, derived model quantities matching published configs."""

from __future__ import annotations

import pytest

from psdsim.sim.catalog import builtin_catalog

CAT = builtin_catalog()

# Published totals (docs/reference/hardware_models_workloads.md §2.2, from the model cards).
PUBLISHED = {
    "qwen3-0.6b": (0.596e9, 114_688),
    "qwen3-1.7b": (1.721e9, 114_688),
    "qwen3-4b": (4.022e9, 147_456),
    "qwen3-8b": (8.191e9, 147_456),
    "qwen3-14b": (14.768e9, 163_840),
    "qwen3-32b": (32.762e9, 262_144),
    "qwen3-235b-a22b-fp8": (235.09e9, 192_512),
    "llama-3.1-8b": (8.030e9, 131_072),
    "llama-3.3-70b": (70.554e9, 327_680),
    "llama-3.3-70b-awq": (70.554e9, 327_680),
    "vicuna-7b": (6.738e9, 524_288),
    "vicuna-13b": (13.016e9, 819_200),
    "vicuna-33b": (32.529e9, 1_597_440),
    "eagle-vicuna-7b": (0.236e9, 16_384),      # own parameters; the LM head is the target's
    "eagle-vicuna-13b": (0.370e9, 20_480),
    "eagle-vicuna-33b": (0.557e9, 6_656),
}


def test_every_entry_names_a_source():
    groups = [CAT.gpus, CAT.links, CAT.models, CAT.datasets, CAT.acceptance]
    for group in groups:
        assert group
        for entry in group.values():
            assert len(entry.source.strip()) > 20


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_parameter_counts_and_kv_bytes_match_published(key):
    model = CAT.models[key]
    params, kv = PUBLISHED[key]
    assert model.total_params == pytest.approx(params, rel=0.01)
    assert model.kv_bytes_per_token == kv


def test_issue_catalog_is_complete():
    assert {"l40s", "h100-sxm", "h100-pcie", "h200", "a100-80g", "b200"} <= CAT.gpus.keys()
    assert {"pcie4", "pcie4-switch", "pcie5", "pcie5-switch", "nvlink3", "nvlink4",
            "nvlink5"} <= CAT.links.keys()
    assert set(PUBLISHED) <= CAT.models.keys()
    assert {"sharegpt", "arena", "spec-bench", "tough"} <= CAT.datasets.keys()


def test_moe_active_parameters_and_expert_traffic():
    m = CAT.models["qwen3-235b-a22b-fp8"]
    assert m.non_embedding_params == pytest.approx(233.85e9, rel=0.01)
    # the model card's "22B active" counts both embedding matrices
    assert m.active_params + m.embedding_params == pytest.approx(22.19e9, rel=0.01)
    touched = [m.experts_touched(b) for b in (1, 16, 32, 64)]
    # docs/reference/hardware_models_workloads.md §2.2
    assert touched == pytest.approx([8, 82.4, 111.8, 125.9], abs=0.1)
    assert m.weight_bytes / 1e9 == pytest.approx(236, rel=0.01)       # FP8 checkpoint


def test_quantised_weights():
    awq = CAT.models["llama-3.3-70b-awq"]
    # docs/reference/hardware_models_workloads.md §2.2 estimate
    assert awq.weight_bytes / 1e9 == pytest.approx(39.8, rel=0.01)
    assert awq.compute == "bf16" and CAT.models["qwen3-235b-a22b-fp8"].compute == "fp8"
    assert CAT.gpus["a100-80g"].tflops("fp8") == CAT.gpus["a100-80g"].bf16_tflops  # no FP8 cores
    assert CAT.gpus["h100-sxm"].tflops("fp8") == 1979.0  # datasheet FP8 dense


def test_every_model_pair_prior_refers_to_known_models():
    for (draft, target), prior in CAT.acceptance.items():
        assert draft in CAT.models and target in CAT.models and 0 < prior.alpha < 1


def test_kv_heads_replicate_when_fewer_than_tp_ranks():
    model = CAT.models["qwen3-32b"]  # 8 KV heads
    assert model.kv_bytes_per_token_per_gpu(4) == model.kv_bytes_per_token / 4
    assert model.kv_bytes_per_token_per_gpu(16) == model.kv_bytes_per_token / 8


def test_a_user_catalog_adds_and_overrides(tmp_path):
    from psdsim.sim.catalog import load_catalog
    f = tmp_path / "mine.toml"
    f.write_text("""
[gpus.rtx-pro-6000]
name = "RTX PRO 6000"
memory_gb = 96.0
memory_bandwidth_gbps = 1790.0
bf16_tflops = 500.0
nvlink = false
host_link = "pcie5"
source = "my own measurement, 2026-11"

[links.pcie4]
name = "our PCIe Gen4 boxes"
nvlink = false
p2p_latency_us = 12.0
p2p_bandwidth_gbps = 18.0
allreduce_latency_us = 40.0
allreduce_busbw_gbps = 15.0
source = "nccl-tests on our servers, 2026-11"

[acceptance."qwen3-0.6b -> qwen3-14b"]
alpha = 0.5
source = "our traces"
""")
    cat = load_catalog(f)
    assert cat.gpus["rtx-pro-6000"].memory_gb == 96.0
    assert cat.links["pcie4"].p2p_bandwidth_gbps == 18.0          # overridden
    assert cat.links["nvlink4"] == CAT.links["nvlink4"]           # untouched
    assert cat.acceptance_prior("qwen3-0.6b", "qwen3-14b").alpha == 0.5


@pytest.mark.parametrize("text, words", [
    ("[gpus.x]\nname = 'x'\n", "missing field"),
    ("[tpus.x]\nname = 'x'\n", "unknown table [tpus]; did you mean [gpus]?"),
    ("[gpus.x]\nname = 'x'\nmemroy_gb = 48.0\n", "unknown field 'memroy_gb'; did you mean 'memory_gb'?"),
    ("[links.x]\nzzz = 1\n", "unknown field 'zzz'; use name, nvlink, p2p_latency_us"),
    ("[gpus.x]\nname = ' '\n", "field 'name' must be str, got ' '"),
    ("[models.m]\nhf_id='a'\nlayers=1\nhidden=8\nintermediate=8\nheads=1\nkv_heads=1\n"
     "head_dim=8\nvocab=10\ntie_embeddings=true\nqk_norm=false\nbytes_per_param=2.0\n"
     "source='s'\ncompute='fp4'\n", "compute"),
    ("not toml [", "not valid TOML"),
])
def test_a_bad_user_catalog_is_a_one_line_error(tmp_path, text, words):
    from psdsim.sim.errors import ScenarioError
    from psdsim.sim.scenario import Scenario, validate
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ScenarioError) as err:
        validate(Scenario(catalog=str(f)))
    assert err.value.field == "catalog" and words in str(err.value) and "\n" not in str(err.value)


MODEL = {"hf_id": "'a/b'", "layers": 2, "hidden": 64, "intermediate": 128, "heads": 4, "kv_heads": 2,
         "head_dim": 16, "vocab": 100, "tie_embeddings": "true", "qk_norm": "false",
         "bytes_per_param": 2.0, "source": "'s'"}
MOE = {"experts": 4, "experts_per_token": 2, "moe_intermediate": 32}


def _model_toml(**changes) -> str:
    fields = {**MODEL, **changes}
    return "[models.m]\n" + "".join(f"{name} = {value}\n" for name, value in fields.items())


@pytest.mark.parametrize("name", ["layers", "hidden", "intermediate", "heads", "kv_heads", "head_dim",
                                  "vocab", "moe_intermediate"])
def test_a_model_size_of_zero_is_refused_naming_it(tmp_path, name):
    """Each is a count or a divisor of the cost and memory models (a head_dim of 0 divided by 0)."""
    from psdsim.sim.catalog import CatalogError, load_catalog
    f = tmp_path / "m.toml"
    f.write_text(_model_toml(**({**MOE, name: 0} if name == "moe_intermediate" else {name: 0})))
    with pytest.raises(CatalogError, match=f"field '{name}' must be >= 1"):
        load_catalog(f)


@pytest.mark.parametrize("bpp, ok", [(0.0, False), (0.05, False), (0.125, True)])
def test_weights_take_at_least_a_tenth_of_a_byte(tmp_path, bpp, ok):
    from psdsim.sim.catalog import CatalogError, load_catalog
    f = tmp_path / "m.toml"
    f.write_text(_model_toml(bytes_per_param=bpp))
    if ok:
        assert load_catalog(f).models["m"].bytes_per_param == bpp   # 1-bit weights
    else:
        with pytest.raises(CatalogError, match=r"'bytes_per_param' must be at least 0\.1"):
            load_catalog(f)


@pytest.mark.parametrize("fp8, ok", [(0.0, True), (1e-300, False), (1500.0, True)])
def test_fp8_tflops_is_none_or_a_real_rate(tmp_path, fp8, ok):
    from psdsim.sim.catalog import CatalogError, load_catalog
    f = tmp_path / "g.toml"
    f.write_text(f"[gpus.g]\nname = 'G'\nmemory_gb = 48.0\nmemory_bandwidth_gbps = 864.0\n"
                 "bf16_tflops = 181.0\n"
                 f"fp8_tflops = {fp8}\nnvlink = false\nhost_link = 'pcie4'\nsource = 's'\n")
    if ok:
        assert load_catalog(f).gpus["g"].fp8_tflops == fp8
    else:
        with pytest.raises(CatalogError, match="fp8_tflops must be 0"):
            load_catalog(f)
