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

from psdsim.sim.catalog.hf_context import config_context
from psdsim.sim.catalog.hf_reading import CONFIG_NAME, ConfigError, count
from psdsim.sim.catalog.hf_weights import weight_format
from psdsim.sim.catalog.schema import Model
from psdsim.sim.documents import DuplicateKey, load_json
from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import input_file, input_path

# What a model path must name, and how to fix one that does not
CONFIG_FILE = (f"a {CONFIG_NAME}", f"give a Hugging Face {CONFIG_NAME}, or a folder holding one")

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
        put(field, count(cfg, cfg_key), cfg_key)
    put("kv_heads", *_kv_heads(cfg, values["heads"]))
    put("head_dim", *_head_dim(cfg, values["hidden"], values["heads"]))
    put("tie_embeddings", *_tied(cfg, family))
    put("qk_norm", family.qk_norm,
        f"architectures {arch}" + (" (per-head q/k RMSNorm)" if family.qk_norm else " (no q/k norm)"))
    bpp, compute = weight_format(cfg, values["hidden"])
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
    return DerivedModel(model, prov, p, ignored, *config_context(cfg))


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
    kv = count(cfg, "num_key_value_heads")
    if heads % kv:
        raise ConfigError("num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}",
                          "write the model's num_key_value_heads (grouped-query attention groups evenly)")
    return kv, "num_key_value_heads"


def _head_dim(cfg: dict[str, Any], hidden: int, heads: int) -> tuple[int, str]:
    if cfg.get("head_dim") is not None:
        return count(cfg, "head_dim"), "head_dim"
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
    out = [("experts", count(cfg, experts_key), experts_key),
           ("experts_per_token", count(cfg, "num_experts_per_tok"), "num_experts_per_tok"),
           ("moe_intermediate", count(cfg, size_key), size_key + size_note)]
    if family.shared_expert:
        shared = count(cfg, "shared_expert_intermediate_size", allow_zero=True)
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
