"""A catalog model entry derived from a model's own Hugging Face `config.json`.

Users already have the config.json of the model they serve; this reads it (a local file, or a
folder holding one: no hub access) into the same `Model` a hand-written catalog entry makes, and
records for each field the config key it came from, so that `psdsim catalog add` can print the
entry for review. The rule is "never a silent default": every key of the file is either read
(and named in the provenance), listed in IRRELEVANT_KEYS as known not to change the weights, KV
cache or FLOPs the cost model prices, or an error naming it. Shapes the catalog cannot express
(DeepSeek's latent attention, sliding windows, MoE on only some layers) are errors naming the
key, never an approximation.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

from psdsim.sim.catalog.entries import MAX_NUMBER
from psdsim.sim.catalog.schema import Model
from psdsim.sim.documents import DuplicateKey, load_json
from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import input_file, input_path
from psdsim.sim.numbers import finite, shown

CONFIG_NAME = "config.json"
# What a model path must name, and how to fix one that does not
CONFIG_FILE = (f"a {CONFIG_NAME}", f"give a Hugging Face {CONFIG_NAME}, or a folder holding one")
# The catalog's hand-written bytes_per_param carry two decimals (docs/reference/
# hardware_models_workloads.md §1.1: AWQ "about 0.52"); a derived one is rounded alike so that a
# config.json gives the very entry the catalog holds for that checkpoint.
BYTES_DECIMALS = 2
SCALE_BITS = 16   # AWQ, GPTQ and compressed-tensors scales are 16-bit
FP8_SCALE_BITS = 32   # block-wise FP8 scales are fp32

# Keys read by no family that are known not to change what the cost model prices, with why.
IRRELEVANT_KEYS: dict[str, str] = {
    **dict.fromkeys(("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
                     "decoder_start_token_id"), "token ids"),
    **dict.fromkeys(("transformers_version", "auto_map", "_attn_implementation",
                     "_attn_implementation_autoset", "use_cache", "return_dict", "output_attentions",
                     "output_hidden_states", "output_router_logits", "torchscript", "is_decoder",
                     "is_encoder_decoder",
                     "id2label", "label2id", "problem_type", "finetuning_task", "tokenizer_class",
                     "task_specific_params", "prefix", "pruned_heads", "chunk_size_feed_forward"),
                    "library and training bookkeeping"),
    **dict.fromkeys(("rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings",
                     "max_sequence_length"),
                    "position encoding and context limit: no weights, the same FLOPs (the context "
                    "must hold max_model_len)"),
    **dict.fromkeys(("rms_norm_eps", "initializer_range", "hidden_act", "attention_dropout",
                     "pretraining_tp"), "numerics and training settings: the same matrices"),
    **dict.fromkeys(("norm_topk_prob", "router_aux_loss_coef", "router_jitter_noise"),
                    "MoE routing numerics and training loss: the same experts read"),
}
# Keys the checks below read to refuse what the catalog cannot price; when they pass, the entry
# has no field for them.
CHECKED_KEYS: dict[str, str] = {
    **dict.fromkeys(("use_sliding_window", "sliding_window", "max_window_layers", "layer_types"),
                    "checked: full attention on every layer"),
    **dict.fromkeys(("attention_bias", "mlp_bias"), "checked: biases, if any, named in source"),
    **dict.fromkeys(("decoder_sparse_step", "mlp_only_layers"), "checked: MoE on every layer"),
    "model_type": "checked: matches architectures",
}
# DeepSeek-V2/V3 multi-head latent attention: low-rank K/V the catalog's attention shape cannot hold.
MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
SHAPE_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
              "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings", "torch_dtype",
              "dtype", "quantization_config", "_name_or_path", "architectures", "model_type")
QWEN_MOE_KEYS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step",
                 "mlp_only_layers")
QWEN_WINDOW_KEYS = ("use_sliding_window", "sliding_window", "max_window_layers", "layer_types")
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 2.0}   # fp32 checkpoints are served 16-bit


class ConfigError(ValueError):
    """A config.json psdsim cannot turn into a catalog entry; `key` names the offending key
    ("" for the file as a whole)."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        self.key, self.problem, self.fix = key, problem, fix
        super().__init__(f"{key}: {problem}; fix: {fix}")


@dataclass(frozen=True)
class Family:
    """What an architecture's config keys mean for the catalog's shape."""

    model_type: str
    qk_norm: bool             # per-head q/k RMSNorm (Qwen3)
    moe: str = ""             # "" dense; "qwen": num_experts of moe_intermediate_size; "mixtral"
    shared_expert: bool = False   # Qwen2-MoE: one always-active expert with a sigmoid gate
    window: str = ""          # how a sliding window is switched on: "qwen" (use_sliding_window) or
    #                           "sliding_window" (any non-null value)
    extra_keys: tuple[str, ...] = ()   # keys of this family read by the checks below
    notes: tuple[str, ...] = ()        # what the catalog shape leaves out, said in the entry's source


QWEN2_BIAS = "q/k/v projection biases not counted (under 0.01% of the weights)"
FAMILIES: dict[str, Family] = {
    "LlamaForCausalLM": Family("llama", qk_norm=False, extra_keys=("attention_bias", "mlp_bias")),
    "MistralForCausalLM": Family("mistral", qk_norm=False, window="sliding_window",
                                 extra_keys=("sliding_window",)),
    "Qwen2ForCausalLM": Family("qwen2", qk_norm=False, window="qwen", extra_keys=QWEN_WINDOW_KEYS,
                               notes=(QWEN2_BIAS,)),
    "Qwen3ForCausalLM": Family("qwen3", qk_norm=True, window="qwen",
                               extra_keys=(*QWEN_WINDOW_KEYS, "attention_bias")),
    "Qwen3MoeForCausalLM": Family("qwen3_moe", qk_norm=True, moe="qwen", window="qwen",
                                  extra_keys=(*QWEN_WINDOW_KEYS, *QWEN_MOE_KEYS, "attention_bias")),
    "Qwen2MoeForCausalLM": Family("qwen2_moe", qk_norm=False, moe="qwen", shared_expert=True,
                                  window="qwen", notes=(QWEN2_BIAS,),
                                  extra_keys=(*QWEN_WINDOW_KEYS, *QWEN_MOE_KEYS,
                                              "shared_expert_intermediate_size")),
    "MixtralForCausalLM": Family("mixtral", qk_norm=False, moe="mixtral", window="sliding_window",
                                 extra_keys=("sliding_window", "num_local_experts", "num_experts_per_tok")),
}
BIAS_NOTE = "{key} true: its biases not counted (under 0.01% of the weights)"


@dataclass(frozen=True)
class DerivedModel:
    """A model derived from a config.json, and for each field set the config key it came from."""

    model: Model
    provenance: dict[str, str]
    path: Path
    ignored: dict[str, str]   # keys of the file that set no field, and why that is safe
    context: int | None = None   # the longest sequence vLLM lets it run (max_model_len), if stated
    context_key: str = ""        # the key that states it


def is_config_path(value: object) -> bool:
    """Whether a scenario's target/draft names a config.json rather than a catalog key: a value
    ending in .json, or holding a path separator (a folder: `./my-model`)."""
    return isinstance(value, str) and (value.endswith(".json") or "/" in value or os.sep in value)


def display_name(path: str | Path) -> str:
    """The config's path shortened for an error line: its folder and its name."""
    p = Path(path)
    if os.path.isdir(p):   # False, not an error, for a name the system cannot follow
        p = p / CONFIG_NAME
    return str(Path(p.parent.name) / p.name) if p.parent.name else p.name


def derive_model(path: str | Path, key: str | None = None) -> DerivedModel:
    """The catalog entry of the config.json at `path` (or in the folder `path`), keyed `key`
    (default: the path as given). Raises ConfigError naming the key at fault."""
    try:
        p = input_path(path, "", CONFIG_FILE[1])
        p = input_file(p / CONFIG_NAME if p.is_dir() else p, "", *CONFIG_FILE)
    except ScenarioError as exc:
        raise ConfigError("", exc.problem, exc.fix) from None
    return _derive(str(p), p.stat().st_mtime_ns, str(path) if key is None else key)


@cache
def _derive(path: str, mtime_ns: int, key: str) -> DerivedModel:
    """Cached by the file's path and modification time: a run looks its models up many times."""
    return _from_config(_read(Path(path)), Path(path), key)


def _read(p: Path) -> dict[str, Any]:
    try:
        doc = load_json(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read it ({exc.__class__.__name__})", "give a readable UTF-8 file") \
            from None
    except json.JSONDecodeError as exc:
        raise ConfigError("", f"not valid JSON ({exc})", f"give the model's {CONFIG_NAME}") from None
    except DuplicateKey as exc:
        raise ConfigError(exc.key, "given twice (which value is meant?)", "keep one of the two") from None
    if not isinstance(doc, dict):
        raise ConfigError("", f"must be a JSON object, got {type(doc).__name__}",
                          f"give the model's {CONFIG_NAME}")
    return doc


def _no_latent_attention(cfg: dict[str, Any]) -> None:
    """Named before the architecture: "MLA is not expressible" says more than "unknown family"."""
    for mla in MLA_KEYS:
        if mla in cfg:
            raise ConfigError(mla, "multi-head latent attention (DeepSeek MLA) has low-rank K/V the "
                              "catalog's attention shape cannot express",
                              "no config-derived entry exists for MLA models; pick another model")


def _from_config(cfg: dict[str, Any], p: Path, key: str) -> DerivedModel:
    _no_latent_attention(cfg)
    arch, family = _family(cfg)
    _known_keys(cfg, family)
    _no_window(cfg, family)
    values: dict[str, Any] = {}
    prov: dict[str, str] = {}
    notes = list(family.notes)

    def put(field: str, value: Any, source: str) -> None:
        values[field], prov[field] = value, source

    put("hf_id", *_name(cfg, p))
    for field, cfg_key in (("layers", "num_hidden_layers"), ("hidden", "hidden_size"),
                           ("intermediate", "intermediate_size"), ("heads", "num_attention_heads"),
                           ("vocab", "vocab_size")):
        put(field, _count(cfg, cfg_key), cfg_key)
    put("kv_heads", *_kv_heads(cfg, values["heads"]))
    put("head_dim", *_head_dim(cfg, values["hidden"], values["heads"]))
    put("tie_embeddings", *_tied(cfg, family))
    put("qk_norm", family.qk_norm,
        f"architectures {arch}" + (" (per-head q/k RMSNorm)" if family.qk_norm else " (no q/k norm)"))
    bpp, compute = _weight_format(cfg, values["hidden"])
    put("bytes_per_param", *bpp)
    put("compute", *compute)
    for field, value, source in _moe(cfg, family):
        put(field, value, source)
    notes += [BIAS_NOTE.format(key=k) for k in ("attention_bias", "mlp_bias") if cfg.get(k) is True]
    source = f"derived by psdsim from {p}" + "".join(f"; {n}" for n in notes)
    model = Model(key=key, source=source, **values)
    _consistent(model)
    left_out = {**IRRELEVANT_KEYS, **CHECKED_KEYS}
    ignored = {name: left_out[name] for name in cfg if name in left_out}
    return DerivedModel(model, prov, p, ignored, *_context(cfg))


CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length")
CONTEXT_CAP = 1 << 62   # positions: past every max_model_len the scenario accepts


def _context(cfg: dict[str, Any]) -> tuple[int | None, str]:
    """(the longest max_model_len vLLM accepts for this config, the key stating it), as vLLM
    derives it: the least of the context keys given, times a rope_scaling factor (yarn scales
    its original_max_position_embeddings; llama3 and longrope state their own length)."""
    given = [(_count(cfg, key), key) for key in CONTEXT_KEYS if cfg.get(key) is not None]
    if not given:
        return None, ""
    length, key = min(given)
    return _scaled(length, cfg.get("rope_scaling")), key


def _scaled(length: int, scaling: Any) -> int:
    """A context length stretched by rope_scaling as vLLM stretches it: times its factor (from
    original_max_position_embeddings for yarn); su, longrope and llama3 state their own length."""
    if not isinstance(scaling, dict):
        return length
    kind = scaling.get("rope_type", scaling.get("type"))
    factor = finite(scaling.get("factor"))
    if kind in ("su", "longrope", "llama3") or factor is None or factor < 1:
        return length
    if kind == "yarn" and "original_max_position_embeddings" in scaling:
        length = _count(scaling, "original_max_position_embeddings")
    # a factor large enough to overflow a float stretches the context past any max_model_len:
    # capped there, since only the comparison with max_model_len uses the length
    return int(min(length * factor, float(CONTEXT_CAP)))


def check_context(derived: DerivedModel, max_model_len: int) -> None:
    """ConfigError naming the context key when the model cannot hold max_model_len tokens: vLLM
    refuses such a max_model_len at start-up, so no run of it exists to simulate."""
    if derived.context is not None and derived.context < max_model_len:
        raise ConfigError(derived.context_key, f"{derived.context} positions, fewer than max_model_len "
                          f"{max_model_len} (vLLM refuses a max_model_len past the model's context)",
                          f"set max_model_len to at most {derived.context}, or use a model with a "
                          "longer context")


def _family(cfg: dict[str, Any]) -> tuple[str, Family]:
    """The architecture, from `architectures` (one entry), cross-checked with `model_type`."""
    archs = cfg.get("architectures")
    supported = ", ".join(FAMILIES)
    if archs is None:
        by_type = {f.model_type: a for a, f in FAMILIES.items()}
        kind = cfg.get("model_type")
        if kind not in by_type:
            raise ConfigError("model_type" if "model_type" in cfg else "architectures",
                              f"architecture not given or not one psdsim can price ({kind!r})",
                              f"use a config with architectures one of {supported}")
        return by_type[kind], FAMILIES[by_type[kind]]
    if not (isinstance(archs, list) and len(archs) == 1 and isinstance(archs[0], str)):
        raise ConfigError("architectures", f"must list one architecture, got {archs!r}",
                          f"write e.g. \"architectures\": [\"{next(iter(FAMILIES))}\"]")
    arch = archs[0]
    if arch not in FAMILIES:
        raise ConfigError("architectures", f"{arch!r} is not a family psdsim can price",
                          f"use one of {supported}, or write a catalog entry by hand (docs/methods.md, "
                          "Your own model)")
    family = FAMILIES[arch]
    if cfg.get("model_type", family.model_type) != family.model_type:
        raise ConfigError("model_type", f"{cfg['model_type']!r} does not match architectures {arch!r}",
                          f"write \"model_type\": \"{family.model_type}\", or fix architectures")
    return arch, family


def _known_keys(cfg: dict[str, Any], family: Family) -> None:
    """Every key is read, or known not to change the cost: an unknown one might change the shape."""
    known = {*SHAPE_KEYS, *family.extra_keys, *IRRELEVANT_KEYS}
    for name in cfg:
        if name not in known:
            raise ConfigError(name, "not a key psdsim knows for this architecture, so it cannot tell "
                              "whether it changes the weights, KV cache or FLOPs",
                              "if it does not, delete it from a copy of the file; if it does, write a "
                              "catalog entry by hand (docs/methods.md, Your own model)")


def _no_window(cfg: dict[str, Any], family: Family) -> None:
    """Sliding-window attention keeps only the last tokens' KV; the catalog prices full attention."""
    fix = "if your engine serves it with full attention, switch the window off in a copy of the file"
    problem = "sliding-window attention is not modelled (the catalog prices full attention)"
    if family.window == "qwen" and cfg.get("use_sliding_window", False) is not False:
        raise ConfigError("use_sliding_window", problem, fix + " (use_sliding_window false)")
    if family.window == "sliding_window" and cfg.get("sliding_window") is not None:
        raise ConfigError("sliding_window", problem, fix + " (sliding_window null)")
    layer_types = cfg.get("layer_types")
    if layer_types is not None and (not isinstance(layer_types, list)
                                    or set(layer_types) - {"full_attention"}):
        raise ConfigError("layer_types", problem + "; every layer must be full_attention", fix)


def _count(cfg: dict[str, Any], name: str, allow_zero: bool = False) -> int:
    """A required whole-number shape key."""
    if name not in cfg or cfg[name] is None:
        raise ConfigError(name, "missing: the catalog entry needs it",
                          f"add \"{name}\" from the model's {CONFIG_NAME}")
    value = cfg[name]
    lowest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= MAX_NUMBER:
        raise ConfigError(name, f"must be a whole number in {lowest}..{MAX_NUMBER:g}, got {shown(value)}",
                          f"write the model's {name} from its {CONFIG_NAME}")
    return value


def _name(cfg: dict[str, Any], p: Path) -> tuple[str, str]:
    """The name a result's header shows: `_name_or_path`, else the folder (or file) name."""
    given = cfg.get("_name_or_path")
    if isinstance(given, str) and given.strip():
        return given, "_name_or_path"
    if p.name == CONFIG_NAME and p.parent.name:
        return p.parent.name, "folder name (no _name_or_path)"
    return p.stem, "file name (no _name_or_path)"


def _kv_heads(cfg: dict[str, Any], heads: int) -> tuple[int, str]:
    if cfg.get("num_key_value_heads") is None:
        return heads, "num_attention_heads (no num_key_value_heads: MHA)"
    kv = _count(cfg, "num_key_value_heads")
    if heads % kv:
        raise ConfigError("num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}",
                          "write the model's num_key_value_heads (grouped-query attention groups evenly)")
    return kv, "num_key_value_heads"


def _head_dim(cfg: dict[str, Any], hidden: int, heads: int) -> tuple[int, str]:
    if cfg.get("head_dim") is not None:
        return _count(cfg, "head_dim"), "head_dim"
    if hidden % heads:
        raise ConfigError("head_dim", f"absent, and hidden_size {hidden} is not a multiple of "
                          f"num_attention_heads {heads}", "add the model's \"head_dim\"")
    return hidden // heads, "hidden_size / num_attention_heads (no head_dim)"


def _tied(cfg: dict[str, Any], family: Family) -> tuple[bool, str]:
    """`tie_word_embeddings`; absent, the default of the family's transformers config class, which
    is false for every family here (and what the model loads with)."""
    value = cfg.get("tie_word_embeddings")
    if value is None:
        return False, f"no tie_word_embeddings: the {family.model_type} config's default, false"
    if not isinstance(value, bool):
        raise ConfigError("tie_word_embeddings", f"must be true or false, got {value!r}",
                          "write \"tie_word_embeddings\": false (or true)")
    return value, "tie_word_embeddings"


Provenanced = tuple[Any, str]


def _weight_format(cfg: dict[str, Any], hidden: int) -> tuple[Provenanced, Provenanced]:
    """(bytes_per_param, compute) of the non-embedding weights, each with where it came from."""
    dtype_key = "torch_dtype" if "torch_dtype" in cfg else "dtype"
    dtype = cfg.get(dtype_key)
    if "dtype" in cfg and cfg["dtype"] != dtype:
        raise ConfigError("dtype", f"{cfg['dtype']!r} differs from torch_dtype {dtype!r}",
                          "keep the one dtype the weights are stored in")
    if dtype is not None and dtype not in DTYPE_BYTES:
        raise ConfigError(dtype_key, f"unknown weight dtype {dtype!r}",
                          f"use one of {', '.join(DTYPE_BYTES)}, or a quantization_config")
    qc = cfg.get("quantization_config")
    if qc is None:
        if dtype is None:
            raise ConfigError("torch_dtype", "missing, and no quantization_config: the weights' bytes "
                              "are unknown", "add \"torch_dtype\": \"bfloat16\" (the dtype you serve)")
        served = " (served 16-bit, as vLLM's dtype auto does)" if dtype == "float32" else ""
        return (DTYPE_BYTES[dtype], f"{dtype_key} {dtype}{served}"), ("bf16", "no quantization_config")
    if not isinstance(qc, dict):
        raise ConfigError("quantization_config", f"must be an object, got {qc!r}",
                          "give the quantization_config your quantizer wrote")
    method = qc.get("quant_method")
    readers = {"awq": _awq_gptq, "gptq": _awq_gptq, "fp8": _fp8,
               "compressed-tensors": _compressed_tensors}
    if method not in readers:
        raise ConfigError("quantization_config.quant_method", f"{method!r} is not a weight format "
                          "psdsim can price", f"use one of {', '.join(readers)} (or bf16 weights: no "
                          "quantization_config), or write a catalog entry with bytes_per_param by hand")
    return readers[method](qc, hidden)


AWQ_KEYS = ("quant_method", "bits", "group_size", "zero_point", "version", "modules_to_not_convert",
            "backend")
GPTQ_KEYS = ("quant_method", "bits", "group_size", "desc_act", "sym", "damp_percent", "true_sequential",
             "static_groups", "model_name_or_path", "model_file_base_name", "checkpoint_format",
             "modules_to_not_convert", "backend", "use_exllama", "exllama_config", "dataset", "tokenizer",
             "use_cuda_fp16", "cache_block_outputs", "batch_size", "max_input_length", "pack_dtype",
             "module_name_preceding_first_block", "meta")
FP8_KEYS = ("quant_method", "activation_scheme", "fmt", "weight_block_size", "modules_to_not_convert",
            "ignored_layers")
TENSORS_KEYS = ("quant_method", "config_groups", "format", "global_compression_ratio", "ignore",
                "kv_cache_scheme", "quantization_status", "sparsity_config", "version")
TENSORS_GROUP_KEYS = ("targets", "weights", "input_activations", "output_activations", "format")
TENSORS_ARGS_KEYS = ("num_bits", "type", "symmetric", "strategy", "group_size", "block_structure",
                     "dynamic", "observer", "observer_kwargs", "actorder", "zp_dtype", "scale_dtype")
# Modules an unquantized list may name without changing the price: embeddings and the LM head are
# 16-bit in every catalog entry; MoE routers (mlp.gate) are under 0.1% of the weights.
KEPT_16BIT = ("lm_head", "embed_tokens", "mlp.gate", "shared_expert_gate")
GPTQ_BITS = (4, 8)


def _subkeys(where: str, table: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for name in table:
        if name not in allowed:
            raise ConfigError(f"{where}.{name}", "not a key of this weight format psdsim knows, so it "
                              "cannot tell whether it changes the weights' bytes",
                              "delete it from a copy of the file if it does not, or write a catalog "
                              "entry with bytes_per_param by hand")


def _kept_16bit(where: str, modules: Any) -> None:
    """Modules left unquantized: only those the catalog keeps 16-bit anyway (or prices alike)."""
    for module in modules or ():
        name = module.removeprefix("re:").removesuffix("$") if isinstance(module, str) else ""
        if not name.endswith(KEPT_16BIT):
            raise ConfigError(where, f"{module!r} left unquantized changes the weights' bytes in a way "
                              "the catalog cannot express", "write a catalog entry with bytes_per_param "
                              "by hand")


def _grouped(bits: int, extra_bits: int, span: int, what: str) -> Provenanced:
    """Bytes per parameter of `bits`-bit weights with `extra_bits` of scale (and zero) per `span`
    weights, rounded to the catalog's precision, and the arithmetic that gave it."""
    exact = (bits + extra_bits / span) / 8
    return _rounded(exact), (f"{what} = ({bits} + {extra_bits}/{span}) / 8 = {exact:.4f}, to "
                             f"{BYTES_DECIMALS} decimals")


def _rounded(exact: float) -> float:
    return round(exact, BYTES_DECIMALS)


def _group_span(where: str, group: Any, hidden: int) -> tuple[int, str]:
    """Weights per scale: `group_size`, or (-1: per output channel) a row of hidden_size."""
    if isinstance(group, bool) or not isinstance(group, int) or not (group == -1 or group >= 1):
        raise ConfigError(where, f"must be a whole number >= 1 or -1, got {group!r}",
                          "write the group_size your quantizer used, e.g. 128")
    return (hidden, f"hidden_size {hidden} (per channel)") if group == -1 else (group, str(group))


def _awq_gptq(qc: dict[str, Any], hidden: int) -> tuple[Provenanced, Provenanced]:
    """AWQ/GPTQ: `bits`-bit weights with, per group of `group_size`, a 16-bit scale and a
    `bits`-bit zero point (AWQ without zero_point: no zero), computed at the 16-bit rate (W4A16)."""
    method = qc["quant_method"]
    _subkeys("quantization_config", qc, AWQ_KEYS if method == "awq" else GPTQ_KEYS)
    _kept_16bit("quantization_config.modules_to_not_convert", qc.get("modules_to_not_convert"))
    bits = qc.get("bits")
    allowed = (4,) if method == "awq" else GPTQ_BITS
    if bits not in allowed or isinstance(bits, bool):
        raise ConfigError("quantization_config.bits", f"{bits!r}-bit {method} is not a format psdsim "
                          f"prices", f"use bits {' or '.join(map(str, allowed))}")
    span, span_text = _group_span("quantization_config.group_size", qc.get("group_size"), hidden)
    zero_key = qc.get("zero_point", True) if method == "awq" else True
    if not isinstance(zero_key, bool):
        raise ConfigError("quantization_config.zero_point", f"must be true or false, got {zero_key!r}",
                          "write \"zero_point\": true")
    zero = f" + {bits}-bit zero" if zero_key else ""
    bpp = _grouped(bits, SCALE_BITS + (bits if zero_key else 0), span,
                   f"quantization_config {method}: {bits}-bit weights + 16-bit scale{zero} per {span_text}")
    return bpp, ("bf16", f"quantization_config {method}: W{bits}A16, activations at the 16-bit rate")


def _fp8(qc: dict[str, Any], hidden: int) -> tuple[Provenanced, Provenanced]:
    """FP8 weights (one byte, fp32 scales per block if block-wise) with FP8 activations (W8A8)."""
    _subkeys("quantization_config", qc, FP8_KEYS)
    for name in ("modules_to_not_convert", "ignored_layers"):
        _kept_16bit(f"quantization_config.{name}", qc.get(name))
    scheme = qc.get("activation_scheme")
    if scheme not in ("dynamic", "static"):
        raise ConfigError("quantization_config.activation_scheme", f"{scheme!r} is not an FP8 activation "
                          "scheme psdsim knows", "write \"activation_scheme\": \"dynamic\" (or static)")
    if qc.get("fmt", "e4m3") not in ("e4m3", "e5m2"):
        raise ConfigError("quantization_config.fmt", f"{qc['fmt']!r} is not an FP8 format",
                          "write \"fmt\": \"e4m3\"")
    block = qc.get("weight_block_size")
    if block is None:
        bpp: Provenanced = (1.0, "quantization_config fp8: 1-byte weights, per-tensor scales")
    elif _pair(block):
        bpp = _grouped(8, FP8_SCALE_BITS, block[0] * block[1], f"quantization_config fp8: 1-byte weights "
                       f"+ fp32 scale per {block[0]}x{block[1]} block")
    else:
        raise ConfigError("quantization_config.weight_block_size", f"must be [rows, columns], got {block!r}",
                          "write \"weight_block_size\": [128, 128], or null for per-tensor scales")
    return bpp, ("fp8", f"quantization_config fp8, activation_scheme {scheme}: W8A8 at the FP8 rate")


def _compressed_tensors(qc: dict[str, Any], hidden: int) -> tuple[Provenanced, Provenanced]:
    """llm-compressor's format, in the schemes the catalog can price: int4/int8 or FP8 weights with
    16-bit activations (W4A16, W8A16), or FP8 weights with FP8 activations (W8A8); int8
    activations would need an INT8 rate the catalog's GPUs lack."""
    where, weights, inputs = _one_scheme(qc)
    kind = (weights.get("type"), weights.get("num_bits"))
    if kind not in (("int", 4), ("int", 8), ("float", 8)):
        raise ConfigError(f"{where}.weights", f"{kind[1]!r}-bit {kind[0]!r} weights are not a format "
                          "psdsim prices (4- or 8-bit int, 8-bit float)",
                          "write a catalog entry with bytes_per_param by hand")
    activations = (inputs.get("type"), inputs.get("num_bits")) if inputs else None
    if activations is not None and (activations, kind) != (("float", 8), ("float", 8)):
        raise ConfigError(f"{where}.input_activations", f"{activations[1]!r}-bit {activations[0]!r} "
                          f"activations with {kind[1]}-bit {kind[0]} weights are not priced (FP8 W8A8 "
                          "only)", "write a catalog entry with bytes_per_param and compute by hand")
    bpp = _tensors_bytes(f"{where}.weights", weights, hidden)
    if activations:
        return bpp, ("fp8", f"{where}: FP8 input_activations, W8A8 at the FP8 rate")
    return bpp, ("bf16", f"{where}: no input_activations, W{kind[1]}A16 at the 16-bit rate")


def _one_scheme(qc: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """(where, weights, input_activations) of the one scheme a compressed-tensors config applies to
    every Linear; a KV-cache scheme, sparsity or mixed schemes are refused by key."""
    where = "quantization_config"
    _subkeys(where, qc, TENSORS_KEYS)
    _kept_16bit(f"{where}.ignore", qc.get("ignore"))
    for name in ("kv_cache_scheme", "sparsity_config"):
        if qc.get(name):
            raise ConfigError(f"{where}.{name}", "a quantized KV cache or sparse weights are not modelled "
                              "(the catalog prices a 16-bit KV cache and dense weights)",
                              "write a catalog entry by hand, or serve without it")
    groups = qc.get("config_groups")
    if not (isinstance(groups, dict) and len(groups) == 1):
        raise ConfigError(f"{where}.config_groups", "must hold one group (mixed schemes are not modelled)",
                          "write a catalog entry with bytes_per_param by hand")
    name, group = next(iter(groups.items()))
    where = f"{where}.config_groups.{name}"
    if not isinstance(group, dict):
        raise ConfigError(where, f"must be an object, got {group!r}", "give the config your quantizer wrote")
    _subkeys(where, group, TENSORS_GROUP_KEYS)
    if group.get("targets") != ["Linear"] or group.get("output_activations"):
        raise ConfigError(f"{where}.targets", "only one scheme over every Linear layer is modelled",
                          "write a catalog entry with bytes_per_param by hand")
    weights, inputs = group.get("weights"), group.get("input_activations")
    for part, args in (("weights", weights), ("input_activations", inputs or {})):
        if not isinstance(args, dict):
            raise ConfigError(f"{where}.{part}", f"must be an object, got {args!r}",
                              "give the config your quantizer wrote")
        _subkeys(f"{where}.{part}", args, TENSORS_ARGS_KEYS)
    assert isinstance(weights, dict)   # checked just above
    return where, weights, inputs


def _tensors_bytes(where: str, weights: dict[str, Any], hidden: int) -> Provenanced:
    """Bytes per parameter of packed weights with a 16-bit scale per tensor, output channel, group
    or block (and a zero of the same bits if asymmetric)."""
    bits, strategy = weights["num_bits"], weights.get("strategy")
    what = f"{where}: {bits}-bit {weights['type']} weights"
    if strategy == "tensor":
        return bits / 8, what + ", one scale per tensor"
    if strategy in ("channel", "group"):
        group = weights.get("group_size") if strategy == "group" else -1
        span, span_text = _group_span(f"{where}.group_size", group, hidden)
    elif strategy == "block":
        if not _pair(weights.get("block_structure")):
            raise ConfigError(f"{where}.block_structure", f"must be [rows, columns], got "
                              f"{weights.get('block_structure')!r}", "write e.g. [128, 128]")
        rows, columns = weights["block_structure"]
        span, span_text = rows * columns, f"{rows}x{columns} block"
    else:
        raise ConfigError(f"{where}.strategy", f"{strategy!r} scales are not modelled (tensor, channel, "
                          "group or block are)", "write a catalog entry with bytes_per_param by hand")
    zero = 0 if weights.get("symmetric", True) else bits
    return _grouped(bits, SCALE_BITS + zero, span,
                    what + " + 16-bit scale" + (f" + {bits}-bit zero" if zero else "") + f" per {span_text}")


def _pair(value: Any) -> bool:
    """[rows, columns] of positive whole numbers (a block of weights sharing a scale)."""
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value))


def _moe(cfg: dict[str, Any], family: Family) -> list[tuple[str, Any, str]]:
    """(field, value, source) of the MoE fields; none for a dense family."""
    if not family.moe:
        return []
    experts_key, size_key = (("num_experts", "moe_intermediate_size") if family.moe == "qwen"
                             else ("num_local_experts", "intermediate_size"))
    if cfg.get("decoder_sparse_step", 1) != 1:
        raise ConfigError("decoder_sparse_step", f"MoE on every {cfg['decoder_sparse_step']!r}th layer only "
                          "is not modelled (the catalog prices every layer alike)",
                          "no config-derived entry for it; the catalog needs all layers MoE")
    if cfg.get("mlp_only_layers"):
        raise ConfigError("mlp_only_layers", "dense layers among MoE ones are not modelled (the catalog "
                          "prices every layer alike)", "no config-derived entry for it")
    size_note = " (Mixtral: each expert's size)" if family.moe == "mixtral" else ""
    out = [("experts", _count(cfg, experts_key), experts_key),
           ("experts_per_token", _count(cfg, "num_experts_per_tok"), "num_experts_per_tok"),
           ("moe_intermediate", _count(cfg, size_key), size_key + size_note)]
    if family.shared_expert:
        shared = _count(cfg, "shared_expert_intermediate_size", allow_zero=True)
        out.append(("shared_intermediate", shared, "shared_expert_intermediate_size"))
    return out


def _consistent(model: Model) -> None:
    if model.moe and model.experts_per_token > model.experts:
        raise ConfigError("num_experts_per_tok", f"{model.experts_per_token} is more than the "
                          f"{model.experts} experts", "write the model's num_experts_per_tok")


def entry_toml(derived: DerivedModel, key: str) -> str:
    """The derived entry as a `[models.KEY]` table of a user catalog file, each field commented with
    the config key it came from, then the keys left out and why (a JSON string, number or bool is
    also a TOML one)."""
    m = derived.model
    lines = [f"# Derived from {derived.path} by `psdsim catalog add`: review it, then put it in a",
             "# catalog file named in a scenario's `catalog` field (docs/methods.md, Your own model).",
             f"[models.{json.dumps(key)}]"]
    for f in fields(Model):
        if f.name in derived.provenance:
            lines.append(f"{f.name} = {json.dumps(getattr(m, f.name))}  # {derived.provenance[f.name]}")
    lines.append(f"source = {json.dumps(m.source)}")
    reasons: dict[str, list[str]] = {}
    for name, why in derived.ignored.items():
        reasons.setdefault(why, []).append(name)
    lines += [f"# not priced ({why}): {', '.join(names)}" for why, names in reasons.items()]
    return "\n".join(lines) + "\n"
