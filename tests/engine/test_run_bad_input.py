"""`psdsim engine run` on small but valid runs (which must run) and on values the reference engine
cannot use (which must be refused in one line, exit code 2, before any process or folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from psdsim.cli import main

TINY = ["engine", "run", "--k", "2", "--m", "2", "--requests", "4", "--output-len", "8",
        "--set", "prompt_len=8", "--set", "engine.warmup_passes=1"]


@pytest.mark.parametrize("argv", [
    [*TINY, "--output-len", "1"],                                       # E1: warm-up past the cache
    ["engine", "run", "--method", "sd", "--k", "1", "--output-len", "1", "--requests", "2"],
    ["engine", "run", "--method", "ar", "--requests", "2", "--output-len", "2", "--set", "prompt_len=4"],
    [*TINY, "--output-len", "1", "--set", "engine.warmup_passes=40"],   # more passes than positions
    [*TINY, "--set", "model.vocab=2"],                                  # E2: warm-up ids past the vocabulary
    [*TINY, "--method", "pearl", "--set", "model.vocab=1"],
])
def test_small_valid_runs_succeed(argv, capsys):
    assert main(argv) == 0, capsys.readouterr().err[-2000:]


def _refused(argv: list[str], capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 2, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("psdsim: error: "), err[-2000:]
    assert "Traceback" not in err
    return lines[0]


BAD = [
    # E3: non-finite, and finite values that overflow float32 logits
    (["--set", "engine.temperature=nan"], "engine.temperature"),
    (["--set", "engine.temperature=1e-300"], "engine.temperature"),
    (["--set", "model.residual_scale=nan"], "model.residual_scale"),
    (["--set", "model.residual_scale=inf"], "model.residual_scale"),
    (["--set", "model.residual_scale=1e308"], "model.residual_scale"),
    (["--set", "model.logit_std=nan"], "model.logit_std"),
    (["--set", "model.logit_std=inf"], "model.logit_std"),
    (["--set", "model.logit_std=1e308"], "model.logit_std"),
    # E4: seeds torch cannot take
    (["--set", "engine.seed=18446744073709551616"], "engine.seed"),
    (["--set", "seed=1180591620717411303424"], "seed"),
    (["--set", "model.seed=18446744073709551616"], "model.seed"),
    # E6: the models are set field by field
    (["--set", "engine.model=x"], "engine.model"),
    (["--set", "engine.model="], "engine.model"),
    # E7: more memory than the machine has (refused before anything is allocated)
    (["--m", "100000"], "engine.m"),
    (["--output-len", "1000000000"], "engine.output_len"),
    (["--method", "ar", "--k", "1000000"], "engine.k"),
    (["--set", "model.vocab=1000000000"], "model.vocab"),
    (["--set", "model.hidden=1048576"], "model.hidden"),
    (["--set", "model.layers=1000000"], "model.layers"),
    (["--set", "model.mlp=1000000000"], "model.mlp"),
    (["--set", f"model.hidden={10**400}"], "model.hidden"),
    # E11: model fields named and listed as the model's
    (["--set", "model.nosuch=1"], "model.nosuch"),
    (["--set", "model.vocab=abc"], "model.vocab"),
]


@pytest.mark.parametrize(("extra", "field"), BAD, ids=[" ".join(e) for e, _ in BAD])
def test_bad_values_are_one_line(extra, field, capsys, monkeypatch):
    # A machine's memory varies: give every machine the same 16 GB (the tiny runs need far less).
    monkeypatch.setattr("psdsim.engine.reference.runner.available_bytes", lambda: 16 * 10**9)
    line = _refused([*TINY, *extra], capsys)
    assert line.startswith(f"psdsim: error: {field}: "), line


def test_memory_refusal_names_the_dominant_field_and_what_fits(capsys, monkeypatch):
    monkeypatch.setattr("psdsim.engine.reference.runner.available_bytes", lambda: 16 * 10**9)
    line = _refused([*TINY, "--set", "model.vocab=1000000000"], capsys)
    assert "GB of memory are available" in line and "fits" in line


def test_unknown_model_field_lists_the_models_fields(capsys):
    line = _refused([*TINY, "--set", "model.nosuch=1"], capsys)
    assert "draft_noise" in line and "warmup_passes" not in line


def test_cuda_without_a_gpu_is_refused_before_the_trace_folder(tmp_path: Path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "traces"
    line = _refused([*TINY, "--set", "engine.device=cuda", "--trace-dir", str(out)], capsys)
    assert line.startswith("psdsim: error: engine.device: ") and not out.exists()


@pytest.mark.parametrize("text", ["rate = 5.0\n", "[workload]\nrate = 5.0\n"])
def test_a_scenario_field_the_engine_ignores_is_refused_in_a_file_as_with_set(text, tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(text)
    from_file = _refused([*TINY, "--scenario", str(path)], capsys)
    from_set = _refused([*TINY, "--set", "rate=5"], capsys)
    assert from_file.startswith("psdsim: error: rate: ") and from_set.startswith("psdsim: error: rate: ")


# --trace-dir: its traces land beside a user's files, never over them, and never where a file is.


def test_the_trace_folder_is_checked_before_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("mine")
    assert "'afile' is a file, not a folder" in _refused([*TINY, "--trace-dir", "afile"], capsys)
    assert "is a file, not a folder" in _refused([*TINY, "--trace-dir", "afile/sub"], capsys)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "reference_psd_k2_m2.jsonl").write_text("my own trace\n")
    for spelling in ("runs", "new/../runs"):
        line = _refused([*TINY, "--trace-dir", spelling], capsys)
        assert line.startswith("psdsim: error: --trace-dir: ") and "did not write" in line
    assert (tmp_path / "runs" / "reference_psd_k2_m2.jsonl").read_text() == "my own trace\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "runs"]


def test_a_trace_folder_takes_its_own_traces_again(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "notes.txt").write_text("mine")
    for _ in range(2):   # the second run replaces what the first wrote: JSONL and Kineto traces
        assert main([*TINY, "--trace-dir", "runs", "--profile"]) == 0, capsys.readouterr().err[-2000:]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        ".reference_psd_k2_m2.jsonl.psdsim.json",   # the JSONL's record (psdsim writes it; torch the rest)
        "notes.txt", "reference_psd_k2_m2.jsonl", "reference_psd_k2_m2_driver.pt.trace.json",
        "reference_psd_k2_m2_verifier.pt.trace.json"]


def test_a_trace_folder_is_made_where_it_lands(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link").symlink_to("target")          # a link to a folder not made yet
    assert main([*TINY, "--trace-dir", "link"]) == 0, capsys.readouterr().err[-2000:]
    assert (tmp_path / "target" / "reference_psd_k2_m2.jsonl").is_file()
    assert main([*TINY, "--trace-dir", "new/../runs"]) == 0, capsys.readouterr().err[-2000:]
    assert (tmp_path / "runs" / "reference_psd_k2_m2.jsonl").is_file() and not (tmp_path / "new").exists()


def test_a_whole_scenario_file_gives_its_workload(tmp_path, capsys, monkeypatch):
    # `psdsim scenario > s.toml` names every field at its default: only a changed one is refused
    monkeypatch.chdir(tmp_path)
    assert main(["scenario"]) == 0
    (tmp_path / "s.toml").write_text(capsys.readouterr().out)
    assert main([*TINY, "--scenario", "s.toml"]) == 0, capsys.readouterr().err[-2000:]
