"""Hugging Face config.json files written from catalog entries, for the readers of users' models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from psdsim.sim.catalog import Model, builtin_catalog

CAT = builtin_catalog()


AWQ = {"bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq",
       "version": "gemm", "zero_point": True}


FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}


def _common(m: Model) -> dict[str, Any]:
    return {"_name_or_path": m.hf_id, "hidden_size": m.hidden, "intermediate_size": m.intermediate,
            "num_attention_heads": m.heads, "num_hidden_layers": m.layers, "vocab_size": m.vocab,
            "tie_word_embeddings": m.tie_embeddings, "attention_dropout": 0.0, "hidden_act": "silu",
            "initializer_range": 0.02, "transformers_version": "4.51.0", "use_cache": True}


def _qwen3(m: Model) -> dict[str, Any]:
    cfg = {**_common(m), "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
           "attention_bias": False, "bos_token_id": 151643, "eos_token_id": 151645,
           "head_dim": m.head_dim, "num_key_value_heads": m.kv_heads, "max_position_embeddings": 40960,
           "max_window_layers": m.layers, "rms_norm_eps": 1e-06, "rope_scaling": None,
           "rope_theta": 1000000, "sliding_window": None, "use_sliding_window": False,
           "torch_dtype": "bfloat16"}
    if m.moe:
        cfg.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", decoder_sparse_step=1,
                   moe_intermediate_size=m.moe_intermediate, mlp_only_layers=[], norm_topk_prob=True,
                   num_experts=m.experts, num_experts_per_tok=m.experts_per_token,
                   output_router_logits=False, router_aux_loss_coef=0.001)
    return cfg


def _llama(m: Model) -> dict[str, Any]:
    cfg = {**_common(m), "architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": m.head_dim,
           "attention_bias": False, "mlp_bias": False, "max_position_embeddings": 131072,
           "num_key_value_heads": m.kv_heads, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"},
           "rope_theta": 500000.0, "torch_dtype": "bfloat16"}
    if m.kv_heads == m.heads:   # LLaMA-1-era (Vicuna v1.3): MHA, no num_key_value_heads, no head_dim
        for key in ("num_key_value_heads", "head_dim", "attention_bias", "mlp_bias", "rope_scaling"):
            del cfg[key]
        cfg.update(bos_token_id=1, eos_token_id=2, pad_token_id=0, max_position_embeddings=2048,
                   max_sequence_length=2048, torch_dtype="float16", transformers_version="4.28.1")
    return cfg


def config_of(key: str) -> dict[str, Any]:
    """The config.json of a catalog model, from its catalog values."""
    m = CAT.models[key]
    cfg = _qwen3(m) if m.qk_norm else _llama(m)
    if m.compute == "fp8":
        cfg["quantization_config"] = FP8
    elif m.bytes_per_param < 2:
        cfg.update(quantization_config=AWQ, torch_dtype="float16")
    return cfg


def write(folder: Path, cfg: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(cfg, indent=2))
    return path
