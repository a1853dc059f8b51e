"""`--set` has one meaning in every command: a bare FIELD is a scenario field,
engine.FIELD the real engine's configuration, model.FIELD its built-in models. Checked on the
configurations the engine commands build (no engine runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from psdsim.cli import build_parser, main
from psdsim.commands.validate import validate_config
from psdsim.engine.reference import __main__ as reference_main


@pytest.fixture
def engine_config(monkeypatch):
    """The EngineConfig `psdsim engine run` would run, captured instead of run."""
    seen = {}

    def capture(cfg, as_json):
        cfg.check()
        seen["cfg"] = cfg
        return 0

    monkeypatch.setattr(reference_main, "run_config", capture)

    def build(*argv: str):
        assert main(["engine", "run", *argv]) == 0
        return seen["cfg"]
    return build


def test_engine_run_takes_scenario_fields_bare_and_engine_fields_namespaced(engine_config, tmp_path: Path):
    cfg = engine_config("--set", "requests=7", "--set", "engine.warmup_passes=0",
                        "--set", "model.draft_noise=0.2")
    # requests from the scenario field, nothing else of the built-in scenario (its m is 16)
    assert (cfg.requests, cfg.m, cfg.warmup_passes, cfg.model.draft_noise) == (7, 4, 0, 0.2)
    scenario = tmp_path / "s.toml"
    scenario.write_text("m = 3\nrequests = 5\noutput_len = 12\nseed = 4\n")
    cfg = engine_config("--scenario", str(scenario), "--m", "2")
    assert (cfg.m, cfg.requests, cfg.output_len, cfg.seed) == (2, 5, 12, 4)   # flags over the file


@pytest.mark.parametrize(("argv", "line"), [
    (["--set", "warmup_passes=1"], "psdsim: error: warmup_passes: is a field of the engine's configuration, "
                                   "not a scenario field; fix: write --set engine.warmup_passes=1"),
    (["--set", "engine.warmup_pases=1"], "psdsim: error: engine.warmup_pases: no such field; "
                                         "fix: did you mean engine.warmup_passes?"),
    (["--set", "link=nvlink4"], "psdsim: error: link: is a scenario field the engine does not run"),
    (["--set", "model.draft_noise=3"], "psdsim: error: model.draft_noise: model.draft_noise = 3.0 must be"),
])
def test_engine_run_set_errors_name_the_spelling(capsys, argv, line):
    assert main(["engine", "run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1, err


def _validate(*argv: str):
    args = build_parser(["validate", *argv]).parse_args(["validate", *argv])
    return validate_config(args)


def test_validate_reads_the_same_namespaces(tmp_path: Path):
    cfg = _validate("--set", "prompt_len=8", "--set", "engine.prompt_len_max=24",
                    "--set", "model.draft_noise=0.1", "--out", str(tmp_path / "v"))
    assert (cfg.engine.prompt_len, cfg.engine.prompt_len_max, cfg.engine.model.draft_noise) == (8, 24, 0.1)
    assert (cfg.engine.m, cfg.engine.requests) == (4, 32)          # validate's defaults, not the scenario's
    assert _validate("--set", "k=2", "--out", str(tmp_path / "v")).ks == (2,)   # the scenario's k


def test_run_and_validate_name_unknown_fields_alike(capsys):
    assert main(["run", "--no-write", "--set", "reqests=5"]) == 2
    run_err = capsys.readouterr().err
    assert run_err == "psdsim: error: reqests: unknown field; fix: did you mean 'requests'?\n"
    assert main(["validate", "--set", "reqests=5"]) == 2
    assert capsys.readouterr().err == run_err
