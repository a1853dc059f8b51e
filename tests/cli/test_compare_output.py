"""`psdsim compare` and `psdsim run` as a newcomer reads them: every method checked before any is
simulated, ratio columns that keep their names apart, and the abbreviations and the offline
arrivals explained under the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from psdsim.cli import main
from psdsim.sim.output.report import TABLE_WIDTH

FAST = ["--set", "requests=24", "--set", "output_len=16", "--set", "m=4", "--set", "prompt_len=32"]
SIX = "sd,sd-2m,sd-5gpu,pearl,psd,psd+tetris"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_a_field_one_method_needs_is_refused_before_any_method_runs(capsys, monkeypatch):
    def no_simulation(*args, **kwargs):
        raise AssertionError("a method was simulated before every method was checked")

    monkeypatch.setattr("psdsim.sim.run.simulate", no_simulation)
    assert main(["compare", *FAST, "--methods", SIX]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("psdsim: error: extra: ")
    assert "--methods psd+tetris" in err and "fix: set extra=1" in err
    assert not Path("results").exists()


def test_six_methods_keep_every_column_name_apart_within_the_width(capsys):
    assert main(["compare", *FAST, "--methods", SIX, "--set", "extra=1", "--no-write"]) == 0
    out = capsys.readouterr().out
    words = out.split()
    assert {"psd/sd", "psd+tetris/sd", "psd/sd-2m", "psd/sd-5gpu", "psd/pearl"} <= set(words)
    assert "k=3 m=4 extra=1" in out
    table = [line for line in out.splitlines() if "×" in line or "psd/sd" in line or "tok/s" in line]
    assert table and max(len(line) for line in table) <= TABLE_WIDTH
    heads = [line.split() for line in out.splitlines() if "sd-2m" in line.split()[:2]]
    assert heads == [SIX.split(",")], "the methods' header holds the methods only"
    assert any(line.split()[:2] == ["psd/sd", "psd+tetris/sd"] for line in out.splitlines()), (
        "the ratios are a table of their own, under their own header")


def test_three_methods_stay_one_table_with_the_ratios_beside_them(capsys):
    assert main(["compare", *FAST, "--no-write"]) == 0
    out = capsys.readouterr().out
    head = next(line for line in out.splitlines() if "psd/sd" in line)
    assert head.split() == ["ar", "sd", "psd", "psd/sd", "psd/ar", "sd/ar"]
    assert "extra=" not in out


@pytest.mark.parametrize("command", ["run", "compare"])
def test_offline_arrivals_and_the_abbreviations_are_explained(capsys, command):
    assert main([command, *FAST, "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "offline: all 24 requests arrive at t = 0, so latency includes queueing" in out
    assert "E2EL = makespan / requests" in out and "VSR = accepted / verified" in out
    assert "docs/summary.md" in out
    if command == "run":
        assert "trim80" in out and "|B1-B0| = " in out


def test_poisson_arrivals_say_their_rate(capsys):
    assert main(["run", *FAST, "--set", "rate=2.5", "--no-write"]) == 0
    assert "Poisson arrivals at 2.5 requests/s" in capsys.readouterr().out
