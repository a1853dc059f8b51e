"""Models from a local Hugging Face config.json: the derived entry of each catalog family equals its
hand-written catalog entry and simulates bit-identically; a config psdsim cannot price is one
line naming the key.

The configs are written here from the catalog's own values (each catalog entry was read from the
model's published config.json), in the shape Hugging Face writes them, realistic irrelevant keys
included.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from psdsim.cli import main
from psdsim.sim.catalog import CatalogError, load_catalog
from psdsim.sim.catalog.hf_config import ConfigError, derive_model, entry_toml
from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.scenario import catalog_for, load_scenario
from tests.helpers.hf_configs import AWQ, CAT, config_of, write
from tests.helpers.scenarios import small

DERIVABLE = sorted(k for k, m in CAT.models.items() if not m.eagle)


@pytest.mark.parametrize("key", DERIVABLE)
def test_derived_entry_equals_the_catalog_entry(tmp_path, key):
    derived = derive_model(write(tmp_path / key, config_of(key)), key=key).model
    assert replace(derived, source=CAT.models[key].source) == CAT.models[key]


DRAFT_OF_VOCAB = {151936: "qwen3-1.7b", 128256: "llama-3.1-8b", 32000: "vicuna-7b"}


def assert_simulates_as_the_catalog_entry(tmp_path: Path, key: str, cfg: dict[str, Any]) -> None:
    """The config at a path, with a config-path draft of its vocabulary, runs bit-identically to the
    catalog entry `key` with that draft's catalog entry."""
    path = str(write(tmp_path / key, cfg))
    kin = DRAFT_OF_VOCAB[CAT.models[key].vocab]   # a draft of the target's vocabulary, as vLLM needs
    draft = str(write(tmp_path / "draft", config_of(kin)))
    hardware = {"gpu": "h200"} if key == "qwen3-235b-a22b-fp8" else {}
    by_name = simulate(small(target=key, draft=kin, acceptance=0.6, **hardware)).summary
    by_path = simulate(small(target=path, draft=draft, acceptance=0.6, **hardware)).summary
    assert by_name["fits"] is True
    assert json.dumps(by_path) == json.dumps(by_name)


# Qwen3 dense with q/k norms (and its tied-embedding draft, qwen3-1.7b), Llama GQA, Llama-1 MHA,
# AWQ int4, and Qwen3-MoE with FP8 weights.
@pytest.mark.parametrize("key", ["qwen3-8b", "llama-3.1-8b", "vicuna-7b", "llama-3.3-70b-awq",
                                 "qwen3-235b-a22b-fp8"])
def test_a_config_path_simulates_as_the_catalog_entry(tmp_path, key):
    assert_simulates_as_the_catalog_entry(tmp_path, key, config_of(key))


def test_provenance_names_the_key_of_each_field(tmp_path):
    vicuna = derive_model(write(tmp_path / "v", config_of("vicuna-7b")))
    assert vicuna.provenance["kv_heads"] == "num_attention_heads (no num_key_value_heads: MHA)"
    assert vicuna.provenance["head_dim"] == "hidden_size / num_attention_heads (no head_dim)"
    assert vicuna.provenance["layers"] == "num_hidden_layers"
    awq = derive_model(write(tmp_path / "a", config_of("llama-3.3-70b-awq")))
    assert "(4 + 20/128) / 8 = 0.5195" in awq.provenance["bytes_per_param"]
    assert "W4A16" in awq.provenance["compute"]
    moe = derive_model(write(tmp_path / "m", config_of("qwen3-235b-a22b-fp8")))
    assert moe.provenance["experts"] == "num_experts"
    assert "activation_scheme dynamic: W8A8" in moe.provenance["compute"]


def test_catalog_add_prints_an_entry_that_loads_back_equal(tmp_path, capsys):
    path = write(tmp_path / "Qwen3-14B", config_of("qwen3-14b"))
    assert main(["catalog", "add", str(path.parent)]) == 0
    printed = capsys.readouterr().out
    assert '[models."qwen3-14b"]' in printed and "intermediate = 17408  # intermediate_size" in printed
    user = tmp_path / "mine.toml"
    user.write_text(printed)
    loaded = load_catalog(user).models["qwen3-14b"]
    assert replace(loaded, source=CAT.models["qwen3-14b"].source) == CAT.models["qwen3-14b"]
    assert entry_toml(derive_model(path), "qwen3-14b") == printed
    # Never a silent default: every key of the file is named, as a field's source or as left out.
    assert all(key in printed for key in config_of("qwen3-14b"))


def test_the_header_names_the_model_and_the_scenario_keeps_the_path(tmp_path, monkeypatch, capsys):
    cfg = config_of("qwen3-8b")
    del cfg["_name_or_path"]
    write(tmp_path / "my-finetune", cfg)
    (tmp_path / "run.toml").write_text('target = "my-finetune"\nacceptance = 0.6\n'
                                       'requests = 8\noutput_len = 8\nprompt_len = 16\n')
    # A bare word is a catalog key, not a folder: only a value with a / or ending in .json is a path.
    with pytest.raises(ScenarioError, match="unknown model 'my-finetune'"):
        load_scenario(tmp_path / "run.toml")
    (tmp_path / "run.toml").write_text('target = "./my-finetune"\nacceptance = 0.6\n'
                                       'requests = 8\noutput_len = 8\nprompt_len = 16\n')
    monkeypatch.chdir(tmp_path.parent)   # relative to the scenario file, not to where psdsim runs
    s = load_scenario(tmp_path / "run.toml")
    assert s.target == str((tmp_path / "my-finetune").resolve())
    assert catalog_for(s).models[s.target].hf_id == "my-finetune"
    assert main(["run", str(tmp_path / "run.toml"), "--no-write"]) == 0
    assert "my-finetune on 4×l40s" in capsys.readouterr().out


# Published config.json files of families the built-in catalog has no entry for (the keys that
# matter, and a few that do not).
QWEN2_5_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
              "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
              "num_hidden_layers": 28, "vocab_size": 152064, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "use_sliding_window": False, "sliding_window": 131072,
              "max_window_layers": 28, "rope_theta": 1000000.0, "rms_norm_eps": 1e-06}
MISTRAL_7B = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
              "head_dim": 128, "num_hidden_layers": 32, "vocab_size": 32768, "sliding_window": None,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "rope_theta": 1000000.0}
QWEN1_5_MOE = {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048,
               "intermediate_size": 5632, "moe_intermediate_size": 1408, "num_experts": 60,
               "num_experts_per_tok": 4, "shared_expert_intermediate_size": 5632,
               "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24,
               "vocab_size": 151936, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
               "decoder_sparse_step": 1, "use_sliding_window": False, "sliding_window": 32768,
               "max_window_layers": 21, "norm_topk_prob": False, "rope_theta": 1000000.0}
MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
                "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2,
                "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
                "vocab_size": 32000, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                "sliding_window": None, "router_aux_loss_coef": 0.02, "rope_theta": 1e6}


def test_dense_families_without_a_catalog_entry_match_their_model_cards(tmp_path):
    # Qwen2.5-7B: model card 7.61B parameters, 6.53B non-embedding.
    model = derive_model(write(tmp_path / "q", QWEN2_5_7B)).model
    assert model.total_params == pytest.approx(7.61e9, rel=0.01)
    assert model.non_embedding_params == pytest.approx(6.53e9, rel=0.01)
    assert "q/k/v projection biases not counted" in model.source
    # Mistral-7B-v0.3 (no sliding window): 7.25B parameters.
    mistral = derive_model(write(tmp_path / "m", MISTRAL_7B)).model
    assert mistral.total_params == pytest.approx(7.25e9, rel=0.01)
    with pytest.raises(ConfigError, match="sliding-window"):
        derive_model(write(tmp_path / "w", MISTRAL_7B | {"sliding_window": 4096}))


def test_shared_expert_moe_counts_match_the_model_cards(tmp_path):
    # Qwen1.5-MoE-A2.7B: model card 14.3B parameters in total.
    model = derive_model(write(tmp_path / "q", QWEN1_5_MOE)).model
    assert model.shared_intermediate == 5632
    assert model.total_params == pytest.approx(14.3e9, rel=0.01)
    # Mixtral-8x7B: model card 46.7B parameters, experts of intermediate_size each.
    model = derive_model(write(tmp_path / "x", MIXTRAL_8X7B)).model
    assert (model.experts, model.moe_intermediate) == (8, 14336)
    assert model.total_params == pytest.approx(46.7e9, rel=0.01)


# The catalog entry a user would write by hand for each, from the same config.json.
SHAPE = "layers = {}\nhidden = {}\nintermediate = {}\nheads = {}\nkv_heads = {}\nhead_dim = {}\nvocab = {}\n"
HAND_WRITTEN = {
    "qwen2.5-7b": (QWEN2_5_7B, SHAPE.format(28, 3584, 18944, 28, 4, 128, 152064)),
    "mistral-7b": (MISTRAL_7B, SHAPE.format(32, 4096, 14336, 32, 8, 128, 32768)),
    "qwen1.5-moe": (QWEN1_5_MOE, SHAPE.format(24, 2048, 5632, 16, 16, 128, 151936)
                    + "experts = 60\nexperts_per_token = 4\nmoe_intermediate = 1408\n"
                    "shared_intermediate = 5632\n"),
    "mixtral-8x7b": (MIXTRAL_8X7B, SHAPE.format(32, 4096, 14336, 32, 8, 128, 32000)
                     + "experts = 8\nexperts_per_token = 2\nmoe_intermediate = 14336\n"),
}


@pytest.mark.parametrize("key", sorted(HAND_WRITTEN))
def test_a_family_without_a_catalog_entry_simulates_as_its_hand_written_entry(tmp_path, key):
    cfg, shape = HAND_WRITTEN[key]
    catalog = tmp_path / "mine.toml"
    catalog.write_text(f'[models."{key}"]\nhf_id = "{key}"\n{shape}tie_embeddings = false\nqk_norm = false\n'
                       'bytes_per_param = 2.0\nsource = "written by hand from its config.json"\n')
    path = str(write(tmp_path / key, cfg | {"_name_or_path": key}))
    derived = derive_model(path, key=key).model
    assert replace(derived, source="") == replace(load_catalog(catalog).models[key], source="")
    # a self-draft keeps the vocabulary; AR and SD both price the target's passes (on H200s under
    # vLLM V1, which sizes the KV cache with SD's co-located draft counted: even Mixtral's 93 GB)
    system = {"acceptance": 0.6, "gpu": "h200", "gpu_memory_utilization": 0.9, "scheduler": "vllm-v1"}
    for method in ("ar", "sd"):
        by_name = simulate(small(method=method, catalog=str(catalog), target=key, draft=key, **system))
        by_path = simulate(small(method=method, target=path, draft=path, **system))
        assert by_name.summary["fits"] is True
        assert json.dumps(by_path.summary) == json.dumps(by_name.summary)


def tensors(weights: dict[str, Any], inputs: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A compressed-tensors quantization_config (llm-compressor) with one scheme over every Linear."""
    args = {"dynamic": False, "observer": "minmax", "observer_kwargs": {}, "symmetric": True,
            "block_structure": None, "group_size": None}
    group = {"targets": ["Linear"], "output_activations": None, "weights": {**args, **weights},
             "input_activations": inputs and {**args, "dynamic": True, "observer": None, **inputs}}
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": group},
            "format": "pack-quantized", "global_compression_ratio": 1.5, "ignore": ["lm_head"],
            "kv_cache_scheme": None, "quantization_status": "compressed", **extra}


W4A16 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}
FP8_BLOCK = {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]}
FP8_TOKENS = {"num_bits": 8, "type": "float", "strategy": "token"}


# AutoGPTQ's quantize_config as a GPTQ checkpoint's config.json carries it: 4-bit, groups of 128,
# a 16-bit scale and a 4-bit zero per group, as AWQ's (the catalog's 0.52 bytes per weight).
GPTQ = {"bits": 4, "group_size": 128, "damp_percent": 0.01, "desc_act": False, "static_groups": False,
        "sym": True, "true_sequential": True, "model_name_or_path": None, "model_file_base_name": "model",
        "quant_method": "gptq"}


@pytest.mark.parametrize(("key", "qc"), [
    ("llama-3.3-70b-awq", GPTQ),
    ("llama-3.3-70b-awq", tensors(W4A16)),
    ("qwen3-235b-a22b-fp8", tensors(FP8_BLOCK, FP8_TOKENS, ignore=["lm_head", "re:.*mlp.gate$"])),
    ("qwen3-235b-a22b-fp8", tensors({**FP8_BLOCK, "strategy": "channel", "block_structure": None},
                                    FP8_TOKENS)),
])
def test_gptq_and_compressed_tensors_give_and_simulate_the_catalog_entry_of_that_format(tmp_path, key, qc):
    cfg = config_of(key) | {"quantization_config": qc}
    derived = derive_model(write(tmp_path / "m", cfg), key=key).model
    expected = CAT.models[key]
    assert replace(derived, source=expected.source) == expected
    assert_simulates_as_the_catalog_entry(tmp_path, key, cfg)


def test_8_bit_gptq_is_priced_by_its_bits_not_as_int4(tmp_path):
    derived = derive_model(write(tmp_path / "m", config_of("llama-3.3-70b-awq")
                                 | {"quantization_config": GPTQ | {"bits": 8}}))
    # (8 + (16 + 8)/128) / 8 = 1.0234
    assert derived.model.bytes_per_param == 1.02
    assert derived.provenance["bytes_per_param"].startswith("quantization_config gptq: 8-bit weights")
    assert derived.model.compute == "bf16"


def test_a_shared_expert_on_a_dense_catalog_model_is_refused(tmp_path):
    user = tmp_path / "mine.toml"
    user.write_text("[models.m]\nhf_id='a'\nlayers=1\nhidden=8\nintermediate=8\nheads=1\nkv_heads=1\n"
                    "head_dim=8\nvocab=8\ntie_embeddings=false\nqk_norm=false\nbytes_per_param=2.0\n"
                    "source='a hand-written entry for this test'\nshared_intermediate=8\n")
    with pytest.raises(CatalogError, match="shared_intermediate is for MoE models"):
        load_catalog(user)


DROP = object()


def _qwen8(**changes: Any) -> dict[str, Any]:
    """Qwen3-8B's config with keys changed (DROP: removed)."""
    cfg = config_of("qwen3-8b")
    cfg.update(changes)
    return {k: v for k, v in cfg.items() if v is not DROP}


BAD = {
    "unknown architecture": (_qwen8(architectures=["GemmaForCausalLM"]), "architectures"),
    "unknown quant_method": (_qwen8(quantization_config={"quant_method": "bitsandbytes"}),
                             "quantization_config.quant_method"),
    "missing key": (_qwen8(hidden_size=DROP), "hidden_size"),
    "DeepSeek MLA": (_qwen8(architectures=["DeepseekV3ForCausalLM"], kv_lora_rank=512), "kv_lora_rank"),
    "unknown key": (_qwen8(num_nextn_predict_layers=1), "num_nextn_predict_layers"),
    "sliding window": (_qwen8(use_sliding_window=True), "use_sliding_window"),
    "3-bit GPTQ": (_qwen8(quantization_config={"quant_method": "gptq", "bits": 3, "group_size": 128}),
                   "quantization_config.bits"),
    "unknown quantization key": (_qwen8(quantization_config={**AWQ, "modules_in_block_to_quantize": []}),
                                 "quantization_config.modules_in_block_to_quantize"),
    "MoE on some layers": (config_of("qwen3-235b-a22b-fp8") | {"decoder_sparse_step": 2},
                           "decoder_sparse_step"),
    "INT8 activations": (_qwen8(quantization_config=tensors({**W4A16, "num_bits": 8},
                                                            {"num_bits": 8, "type": "int"})),
                         "quantization_config.config_groups.group_0.input_activations"),
    "FP8 KV cache": (_qwen8(quantization_config=tensors(W4A16, kv_cache_scheme={"num_bits": 8})),
                     "quantization_config.kv_cache_scheme"),
    "wrong type": (_qwen8(num_hidden_layers="36"), "num_hidden_layers"),
    "no dtype": (_qwen8(torch_dtype=DROP), "torch_dtype"),
    "two dtypes": (_qwen8(dtype="float32"), "dtype"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_config_psdsim_cannot_price_is_one_line_naming_the_key(tmp_path, capsys, case):
    cfg, key = BAD[case]
    path = write(tmp_path / "m", cfg)
    with pytest.raises(ConfigError) as info:
        derive_model(path)
    assert info.value.key == key
    assert main(["run", "--set", f"target={path}", "--set", "acceptance=0.6", "--no-write"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"psdsim: error: target=m/config.json: {key}: ")
    assert "Traceback" not in err and "; fix: " in err
    assert main(["catalog", "add", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"psdsim: error: m/config.json: {key}: ")


@pytest.mark.parametrize("vocab", [1, 151_936 * 2])
def test_a_draft_of_another_vocabulary_is_refused_naming_both_sizes(tmp_path, capsys, vocab):
    """vLLM's spec decode asserts the draft's and the target's vocab_size equal (a smaller one too)."""
    draft = write(tmp_path / "d", config_of("qwen3-1.7b") | {"vocab_size": vocab})
    assert main(["run", "--set", f"draft={draft}", "--set", "acceptance=0.6", "--no-write"]) == 2
    assert capsys.readouterr().err == (
        f"psdsim: error: draft: draft d/config.json's vocab_size {vocab:,} differs from target qwen3-32b's "
        "151,936: vLLM's speculative decoding needs the two equal; fix: pick a draft with the target's "
        "vocab_size, 151,936 (a model of its family)\n")


def test_a_missing_config_is_one_line(tmp_path, capsys):
    assert main(["run", "--set", f"draft={tmp_path}/none.json", "--set", "acceptance=0.6", "--no-write"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psdsim: error: draft=") and "not found" in err


@pytest.mark.parametrize("context, rope_scaling, refused", [
    (64, None, True), (2048, None, False),
    (1024, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}, False),
    (1024, {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 1024}, True),
    (8, {"rope_type": "dynamic", "factor": 1e308}, False)])
def test_a_context_shorter_than_max_model_len_is_refused_naming_the_key(tmp_path, capsys, context,
                                                                        rope_scaling, refused):
    """vLLM refuses a max_model_len (2048 here) past the model's context, so no such run exists."""
    draft = write(tmp_path / "d", config_of("qwen3-1.7b") | {"max_position_embeddings": context,
                                                             "rope_scaling": rope_scaling})
    code = main(["run", "--no-write", "--set", f"draft={draft}", "--set", "acceptance=0.6",
                 "--set", "requests=4", "--set", "output_len=8", "--set", "m=4"])
    err = capsys.readouterr().err
    if refused:
        assert code == 2, err
        assert err.startswith("psdsim: error: draft=d/config.json: max_position_embeddings: "), err
        assert err.count("\n") == 1 and "max_model_len" in err
    else:
        assert code == 0, err


def test_a_tp_that_splits_no_heads_evenly_lists_the_heads_divisors(tmp_path, capsys):
    target = write(tmp_path / "t", _qwen8(num_attention_heads=6, num_key_value_heads=6))
    assert main(["run", "--no-write", "--set", f"target={target}", "--set", "tensor_parallel_size=4",
                 "--set", "acceptance=0.6"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("6 attention heads, got 4; fix: use one of its divisors: 1, 2, 3 or 6\n"), err


def test_a_count_of_hundreds_of_digits_is_quoted_short(tmp_path):
    with pytest.raises(ConfigError) as info:
        derive_model(write(tmp_path / "m", _qwen8(vocab_size=10**400)))
    assert info.value.key == "vocab_size" and len(info.value.problem) < 200


def test_a_key_given_twice_is_refused_not_taken_last(tmp_path):
    text = json.dumps(config_of("qwen3-8b"))
    assert '"num_hidden_layers": 36' in text
    path = tmp_path / "config.json"
    twice = '"num_hidden_layers": 36, "num_hidden_layers": 2'
    path.write_text(text.replace('"num_hidden_layers": 36', twice))
    with pytest.raises(ConfigError) as err:
        derive_model(path)
    assert err.value.key == "num_hidden_layers" and "given twice" in err.value.problem
