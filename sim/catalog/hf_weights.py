"""The weight format of a model's `config.json`: bytes per parameter and the compute type.

Quantized checkpoints say how they are stored in `quantization_config` (AWQ, GPTQ, block-wise FP8,
compressed-tensors); each reader here turns one format's keys into the bytes a weight costs
(its bits, its scales and zero points spread over their group) and refuses a key it does not
know, naming it, as the rest of the config reader does.
"""

from __future__ import annotations

from typing import Any

from psdsim.sim.catalog.hf_reading import ConfigError, Provenanced

# The catalog's hand-written bytes_per_param carry two decimals (docs/reference/
# hardware_models_workloads.md §1.1: AWQ "about 0.52"); a derived one is rounded alike so that a
# config.json gives the very entry the catalog holds for that checkpoint.
BYTES_DECIMALS = 2
SCALE_BITS = 16   # AWQ, GPTQ and compressed-tensors scales are 16-bit
FP8_SCALE_BITS = 32   # block-wise FP8 scales are fp32
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 2.0}   # fp32 checkpoints are served 16-bit




def weight_format(cfg: dict[str, Any], hidden: int) -> tuple[Provenanced, Provenanced]:
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
