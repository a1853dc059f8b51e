"""`psdsim theory`: closed forms, published constants, tail, bridge, figures, errors."""

from __future__ import annotations

import json
import warnings

import pytest

from psdsim.cli import main


def test_default_prints_optima_and_the_published_disagreement(capsys):
    assert main(["theory"]) == 0
    out = capsys.readouterr().out
    assert "t* = 1.40754" in out and "R = T_SD*/T_PSD* = 1.979998" in out
    assert "not 1.59" in out and "0.1878 <= alpha*V <= 5.2111" in out


@pytest.mark.parametrize(("c", "words"),
                         [("3", "R = T_SD*/T_PSD* = 0.865244  (PSD 15.6% more time per token)"),
                          ("1e308", "(PSD 2.45e+307x the time per token)")])
def test_a_slower_psd_is_said_as_time_it_costs(capsys, c, words):
    assert main(["theory", "--c", c]) == 0
    assert words in capsys.readouterr().out


def test_json_and_whole_k(capsys):
    assert main(["theory", "--alpha", "0.05", "--V", "40", "--c", "5", "--bonus", "1",
                 "--t-token", "8", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["psd"]["t"] == pytest.approx(45.0)
    assert doc["whole_k"]["psd"]["k"] == 5 and doc["whole_k"]["sd"]["k"] >= 1
    assert doc["published"]["a0"] == pytest.approx(1.678347, abs=1e-6)


def test_plots_are_written(tmp_path, capsys):
    assert main(["theory", "--plot", str(tmp_path / "fig")]) == 0
    names = sorted(p.name for p in (tmp_path / "fig").iterdir() if not p.name.startswith("."))  # no records
    assert names == ["theory_per_token.png", "theory_per_token.svg", "theory_ratio.png",
                     "theory_ratio.svg"]


def test_tail_uses_the_scenario(capsys):
    assert main(["theory", "--tail", "--set", "requests=32", "--json"]) == 0
    tail = json.loads(capsys.readouterr().out)["tail"]
    assert tail["exact"] is True and tail["requests"] == 32
    assert 0.9 < tail["parallelization_rate"] < 1.0


def test_bridge_on_a_small_scenario(capsys):
    assert main(["theory", "--bridge", "--ks", "1-3", "--set", "requests=40", "--set", "output_len=48",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)["bridge"]
    assert len(rep["measurements"]) == 3
    assert set(rep["simulated_best_k"]) == {"sd", "psd"}


@pytest.mark.parametrize("args, flag", [(["--alpha", "0"], "--alpha"), (["--V", "-1"], "--V"),
                                        (["--c", "-2"], "--c"), (["--t-token", "0"], "--t-token"),
                                        (["--bridge", "--ks", "3"], "--ks"),
                                        (["--tail", "--set", "rate=2"], "rate")])
def test_bad_theory_input(capsys, args, flag):
    assert main(["theory", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"psdsim: error: {flag}:") and "\n" not in err


@pytest.mark.parametrize("argv, named", [(["--c-drafter", "1e308", "--c", "1e308"],
                                          "--c 1e+308, --c-drafter 1e+308"),
                                         (["--V", "1e-308"], "--V 1e-308")])
def test_an_overflow_is_one_line_naming_the_inputs_it_came_from(capsys, argv, named):
    """numpy warns of no overflow on stderr, and the one line blames the inputs that overflowed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["theory", *argv]) == 2
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    line, = capsys.readouterr().err.splitlines()
    assert line.startswith("psdsim: error: theory: ") and f"from {named};" in line, line
