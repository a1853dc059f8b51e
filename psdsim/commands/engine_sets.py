"""`--set` in the commands that drive a real engine (validate, engine run), with the one meaning
it has everywhere: a bare FIELD is a scenario field, as in run, compare and plan; the engine's own
settings live in namespaces.

    --set FIELD=VALUE          a scenario field; the engine runs the scenario's workload fields
    --set engine.FIELD=VALUE   a field of the engine's configuration (EngineConfig, VllmConfig)
    --set model.FIELD=VALUE    a field of the engine's built-in models (the reference engine's
                               ModelConfig; vLLM's tiny local pair)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psdsim.commands.common import user_error
from psdsim.sim.user_input import did_you_mean

SET_HELP = ("FIELD=VALUE: a scenario field (the engine runs its workload fields: k, m, requests, output_len, "
            "prompt_len, seed, max_num_batched_tokens); engine.FIELD=VALUE: the engine's configuration, e.g. "
            "engine.warmup_passes=1; model.FIELD=VALUE: its built-in models, e.g. model.draft_noise=0.3")
# Scenario fields a real engine runs: the offline workload (every request arrives at the start).
WORKLOAD = ("k", "m", "requests", "output_len", "prompt_len", "seed", "max_num_batched_tokens")


@dataclass
class EngineSets:
    """--set items sorted by namespace, each still `NAME=VALUE` with the namespace taken off."""

    scenario: list[str] = field(default_factory=list)
    engine: list[str] = field(default_factory=list)
    model: list[str] = field(default_factory=list)


def split_sets(items: Iterable[str], engine_fields: Iterable[str]) -> EngineSets:
    """Sort --set items by namespace; a bare name that is an engine field and no scenario field is
    refused with the spelling that sets it (the old meaning of --set in these commands)."""
    from psdsim.sim.scenario import FIELDS

    sets, engine_fields = EngineSets(), set(engine_fields)
    for item in items:
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name:
            raise user_error("--set", f"expected FIELD=VALUE, got {item!r}",
                             "write e.g. --set requests=32, --set engine.warmup_passes=1 or "
                             "--set model.draft_noise=0.3")
        space, dot, short = name.partition(".")
        if dot and space in ("engine", "model") and short:
            getattr(sets, space).append(f"{short}={value}")
        elif name not in FIELDS and name in engine_fields:
            raise user_error(name, "is a field of the engine's configuration, not a scenario field",
                             f"write --set engine.{name}={value}")
        else:
            sets.scenario.append(f"{name}={value}")
    return sets


def engine_error(exc: Exception, engine_fields: Iterable[str], model_fields: Iterable[str]) -> Exception:
    """An engine configuration's complaint (`NAME = VALUE must …`, `--set NAME: no such field`) as
    the CLI's one-line error, naming the field as --set spells it (engine.NAME, model.NAME)."""
    text = str(exc).removeprefix("--set ")
    name = text.split(" ", 1)[0].split("=", 1)[0].rstrip(":")
    space, dot, short = name.partition(".")
    model = bool(dot) and space in ("model", "tiny")
    short = short if model else name
    spelled = f"{'model' if model else 'engine'}.{short}"
    if "no such" in text:
        known = list(model_fields if model else engine_fields)
        space = spelled.rsplit(".", 1)[0]
        fix = did_you_mean(short, known, f"use one of: {', '.join(known)}", lambda name: f"{space}.{name}")
        return user_error(spelled, "no such field", fix)
    return user_error(spelled, text, f"give {spelled} a value the message allows (--set {spelled}=VALUE), "
                                     "or leave it at its default")


def scenario_workload(path: Path | None, overrides: Sequence[str],
                      allowed: Sequence[str] = WORKLOAD) -> dict[str, Any]:
    """The workload fields (of `allowed`) of the scenario file with the bare --set fields on top;
    without a file, only the fields --set names (so `--set prompt_len=8` does not bring in the
    built-in scenario's 16-request batches). A scenario field the engine does not run is refused
    rather than silently ignored: with --set, or in the file at a value other than its default (a
    whole `psdsim scenario` file passes; its `rate = 5.0` does not; its `name` only labels)."""
    from psdsim.sim.documents import read_toml
    from psdsim.sim.scenario import FIELDS, load_scenario

    if path is None and not overrides:
        return {}
    for item in overrides:
        name = item.partition("=")[0]
        if name in FIELDS and name not in allowed:
            raise user_error(name, "is a scenario field the engine does not run (it runs "
                                   f"{', '.join(allowed)})",
                             f"remove --set {name}=…; the engine's own fields are --set engine.FIELD=VALUE")
    s = load_scenario(path, overrides)   # reads and checks the file first: its errors name its fields
    if path is not None:
        doc = read_toml(Path(path), "--scenario", "a .toml scenario")[1]
        named = [sub for key, value in doc.items() for sub in (value if isinstance(value, dict) else [key])]
        file = Path(path).name
        for name in named:
            if name in FIELDS and name not in (*allowed, "name") and getattr(s, name) != FIELDS[name].default:
                raise user_error(name, f"is a scenario field the engine does not run, set in {file} (it "
                                       f"runs {', '.join(allowed)})",
                                 f"remove {name} from {file}, or pass a scenario with only those fields")
    if path is None:   # no file: the fields named, typed and checked, and not the default's others
        named = {item.partition("=")[0] for item in overrides}
        return {name: getattr(s, name) for name in allowed if name in named}
    out = {name: getattr(s, name) for name in allowed if name != "prompt_len"}
    if "prompt_len" in allowed and s.prompt_len:
        out["prompt_len"] = s.prompt_len
    return out
