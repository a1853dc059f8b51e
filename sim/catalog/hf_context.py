"""How long a sequence a model's config.json lets vLLM run: the least of its context keys,
stretched by rope_scaling as vLLM stretches it, and the check against a scenario's max_model_len."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from psdsim.sim.catalog.hf_reading import ConfigError, count
from psdsim.sim.numbers import finite

if TYPE_CHECKING:
    from psdsim.sim.catalog.hf_config import DerivedModel

CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length")
CONTEXT_CAP = 1 << 62   # positions: past every max_model_len the scenario accepts


def config_context(cfg: dict[str, Any]) -> tuple[int | None, str]:
    """(the longest max_model_len vLLM accepts for this config, the key stating it), as vLLM
    derives it: the least of the context keys given, times a rope_scaling factor (yarn scales
    its original_max_position_embeddings; llama3 and longrope state their own length)."""
    given = [(count(cfg, key), key) for key in CONTEXT_KEYS if cfg.get(key) is not None]
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
        length = count(scaling, "original_max_position_embeddings")
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
