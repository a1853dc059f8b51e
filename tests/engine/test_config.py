"""The reference engine's configuration and command line: checked without torch installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from psdsim.engine.reference import EngineConfig, EngineConfigError, ModelConfig
from psdsim.engine.reference.__main__ import config_from_args, main


def test_importing_the_engine_does_not_import_torch():
    code = ("import sys, engine.reference as e; e.EngineConfig().check(); "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_config_errors_name_the_field():
    with pytest.raises(EngineConfigError, match="method"):
        EngineConfig(method="tetris").check()
    with pytest.raises(EngineConfigError, match=r"model\.draft_layers"):
        EngineConfig(model=ModelConfig(draft_layers=9)).check()
    with pytest.raises(EngineConfigError, match=r"model\.draft_noise"):
        EngineConfig(model=ModelConfig(draft_noise=1.5)).check()
    with pytest.raises(EngineConfigError, match="max_num_batched_tokens"):
        EngineConfig(prompt_len=100, max_num_batched_tokens=64).check()
    with pytest.raises(EngineConfigError, match="unknown field"):
        EngineConfig().with_changes(**{"model.depth": 3})


def test_running_caps_follow_minedraft():
    assert EngineConfig(method="psd", m=4).max_running == 8
    assert EngineConfig(method="pearl", m=4).max_running == 4
    assert EngineConfig(method="sd").two_processes is False
    assert EngineConfig(method="sd", separate_verifier=True).two_processes is True


def test_command_line_builds_the_config(capsys):
    cfg, as_json = config_from_args(["--method", "sd", "--k", "2", "--set", "model.draft_noise=0.4",
                                     "--set", "same_prompt=true", "--json"])
    assert (cfg.method, cfg.k, cfg.model.draft_noise, cfg.same_prompt, as_json) == ("sd", 2, 0.4, True, True)
    assert main(["--set", "k=x"]) == 2
    assert main(["--method", "tetris"]) == 2
    assert "error: method" in capsys.readouterr().err


def test_k_is_bounded_as_the_scenario_bounds_it():
    """k = 100000 drafted one forward pass a token ran for minutes without a word."""
    from psdsim.engine.reference.config import MAX_K
    from psdsim.sim.scenario import MAX_K as SCENARIO_MAX_K
    assert MAX_K == SCENARIO_MAX_K
    EngineConfig(k=MAX_K).check()
    with pytest.raises(EngineConfigError, match=rf"k = {MAX_K + 1} is past {MAX_K}"):
        EngineConfig(k=MAX_K + 1).check()


def test_engine_set_values_read_as_the_scenarios_do():
    """One reader of `--set` text for the scenario and the engines (sim/user_input.py): the same
    words for true and false, quotes a shell passed through dropped, the same refusals."""
    from psdsim.engine.reference.config import parse_field
    assert parse_field(EngineConfig, "profile", "yes") is True
    assert parse_field(EngineConfig, "profile", "off") is False
    assert parse_field(ModelConfig, "vocab", "512") == 512
    with pytest.raises(EngineConfigError, match=r"--set model\.vocab=5x: not an integer"):
        parse_field(ModelConfig, "vocab", "5x")
    with pytest.raises(EngineConfigError, match="--set profile=maybe: not true or false"):
        parse_field(EngineConfig, "profile", "maybe")
    with pytest.raises(EngineConfigError, match="--set k=３: not an integer"):
        parse_field(EngineConfig, "k", "３")   # a full-width digit, refused as the scenario refuses it
