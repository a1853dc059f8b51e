"""Hostile acceptance inputs to `psdsim calibrate`: vLLM logs and metrics that would hang it, crash
it, or make it write a prior or a run command psdsim refuses. Each is refused in one line naming
the input and the bound, or (where the input is legitimately at a bound) written with a note."""

from __future__ import annotations

import json

import pytest

from psdsim.cli import main
from psdsim.sim.acceptance import accepted_per_draft, alpha_for_accepted

PAIR = ["--draft", "qwen3-1.7b", "--target", "qwen3-32b"]
V0_LINE = ("INFO 10-16 19:05:06 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.361, "
           "System efficiency: 0.598, Number of speculative tokens: {k}, Number of accepted tokens: {a}, "
           "Number of draft tokens: {d}, Number of emitted tokens: 2500.\n")
PROM = "vllm:spec_decode_num_drafts_total {n}\nvllm:spec_decode_num_draft_tokens_total {d}\n" \
       "vllm:spec_decode_num_accepted_tokens_total {a}\n"


def _calibrate(tmp_path, monkeypatch, capsys, text: str, *extra: str) -> tuple[int, str, str]:
    """Run calibrate on one file holding `text`: its exit code, stdout and stderr."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.txt").write_text(text)
    code = main(["calibrate", "m.txt", *PAIR, "--out", "a.toml", *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("text", [V0_LINE.format(k=3, a=1300, d=3600), PROM.format(n=1200, d=3600, a=1300)])
def test_sources_without_per_position_counts_make_a_prior(tmp_path, monkeypatch, capsys, text):
    code, out, err = _calibrate(tmp_path, monkeypatch, capsys, text)
    assert (code, err) == (0, "")
    assert "1,200 drafts of k = 3" in out and "alpha 0." in out
    assert "per_position" not in (tmp_path / "a.toml").read_text()


@pytest.mark.parametrize("k", [1, 3, 32])
@pytest.mark.parametrize("alpha", [0.3, 0.9])
def test_the_population_mean_holds_over_every_spread_a_scenario_allows(alpha, k):
    # near spread 0 each request accepts all (rate 1, with probability alpha) or nothing: a
    # request at 1 needs 1 verification per k + 1 tokens, one at 0 needs one per token
    bernoulli = alpha * k / (k + 1) / ((1 - alpha) + alpha / (k + 1))
    assert accepted_per_draft(alpha, k, 1e-300) == pytest.approx(bernoulli, rel=1e-12)
    # a vast spread is one rate for every request
    assert accepted_per_draft(alpha, k, 1e9) == pytest.approx(accepted_per_draft(alpha, k), rel=1e-8)
    for spread in (1e-300, 1e-3, 20.0, 3e3, 1e5, 1e9):
        mean = accepted_per_draft(alpha, k, spread)
        assert alpha_for_accepted(mean, k, spread) == pytest.approx(alpha, rel=1e-9)


V1_LINE = ("INFO 10-16 19:05:06 [metrics.py:100] SpecDecoding metrics: Accepted: {a} tokens, Drafted: {d} "
           "tokens, Per-position acceptance rate: {rates}\n")
PER_POS = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {n}\n'


def _refused(tmp_path, monkeypatch, capsys, text: str, *extra: str) -> str:
    """The one line calibrate refuses `text` with, having written nothing."""
    code, out, err = _calibrate(tmp_path, monkeypatch, capsys, text, *extra)
    assert (code, out) == (2, "") and err.startswith("psdsim: error: ") and err.count("\n") == 1
    assert "Traceback" not in err and not (tmp_path / "a.toml").exists()
    return err


@pytest.mark.parametrize("text", [V0_LINE.format(k=100000000, a=1000, d=300000000000000),
                                  PROM.format(n=1, d=1e9, a=10), V0_LINE.format(k=64, a=300, d=6400),
                                  V1_LINE.format(a=10, d=33 * 10, rates=", ".join(["0.030"] * 33))])
def test_drafts_longer_than_a_scenario_allows_are_refused_at_once(tmp_path, monkeypatch, capsys, text):
    assert "past the 32 a scenario's k may be" in _refused(tmp_path, monkeypatch, capsys, text)


@pytest.mark.parametrize("spread", ["1e300", "inf", "0", "-1", "nan"])
def test_an_acceptance_spread_the_scenario_refuses_is_refused(tmp_path, monkeypatch, capsys, spread):
    err = _refused(tmp_path, monkeypatch, capsys, PROM.format(n=1000, d=3000, a=1000),
                   "--acceptance-spread", spread)
    assert err.startswith("psdsim: error: --acceptance-spread: must be in (0, 1e+09]")


@pytest.mark.parametrize(("text", "says"), [
    ('vllm:spec_decode_num_drafts_total{e="0"} 1.7e308\nvllm:spec_decode_num_drafts_total{e="1"} 1.7e308\n'
     "vllm:spec_decode_num_draft_tokens_total 1e9\nvllm:spec_decode_num_accepted_tokens_total 10\n",
     "the sum of its vllm:spec_decode_num_drafts counters is past a float's range"),
    (PROM.format(n=100, d=300, a="3e308"), "line 3: a count that is not finite (3e308 is past a float's "
     "range)"),
    (PROM.format(n=1e308, d=300, a=30), "counts more drafts (1e+308) than draft tokens (300)"),
])
def test_counts_past_a_float_or_the_draft_tokens_are_named(tmp_path, monkeypatch, capsys, text, says):
    assert says in _refused(tmp_path, monkeypatch, capsys, text)


@pytest.mark.parametrize(("text", "says"), [
    (V1_LINE.format(a=63, d=90, rates="1.500, 0.500, 0.100"), "position 0 is accepted at rate 1.5, above 1"),
    (PROM.format(n=1000, d=2000, a=100) + PER_POS.format(i=0, n=0) + PER_POS.format(i=1, n=100),
     "position 1 is accepted more often (0.1) than position 0 (0), where a draft token is accepted only "
     "if every one before it was"),
    (V1_LINE.format(a=45, d=90, rates="0.300, 0.600, 0.600"), "position 1 is accepted more often"),
    (V1_LINE.format(a=90, d=90, rates="0.600, 0.300, 0.100"), "line 1: its per-position rates count 30 "
     "accepted tokens, not the 90 the line says"),
])
def test_per_position_counts_no_engine_reports_are_refused(tmp_path, monkeypatch, capsys, text, says):
    assert says in _refused(tmp_path, monkeypatch, capsys, text)


@pytest.mark.parametrize(("text", "says"), [
    (V1_LINE.format(a="9" * 400, d="9" * 400, rates="0.500, 0.300, 0.200"),
     "line 1: its Drafted count is past a float's range"),
    (V1_LINE.format(a=0, d="1" + "0" * 308, rates="0.000, 0.000, 0.000") * 2,
     "the sum of its Drafted counts is past a float's range"),
    (V0_LINE.format(k=3, a="9" * 400, d="9" * 400), "line 1: its Number of accepted tokens is past a float's "
     "range"),
    (V0_LINE.format(k="9" * 400, a=5, d=10), "line 1: its Number of speculative tokens has 400 digits"),
    (V0_LINE.format(k=3, a=5, d=10), "line 1: counts 10 draft tokens, not a whole number of drafts of 3"),
])
def test_log_counts_past_a_float_or_a_whole_draft_are_named(tmp_path, monkeypatch, capsys, text, says):
    assert says in _refused(tmp_path, monkeypatch, capsys, text)


def test_no_accepted_draft_token_is_refused(tmp_path, monkeypatch, capsys):
    err = _refused(tmp_path, monkeypatch, capsys, V0_LINE.format(k=3, a=0, d=300))
    assert "0 of 300 draft tokens accepted" in err and "below the simulator's smallest, 1e-12" in err


def test_every_token_accepted_is_held_at_the_bound_with_a_note(tmp_path, monkeypatch, capsys):
    code, out, err = _calibrate(tmp_path, monkeypatch, capsys, V0_LINE.format(k=3, a=300, d=300))
    assert (code, err) == (0, "")
    assert "every draft token accepted in 300: acceptance is at least 0.990064 at 95%" in out
    assert "alpha = 0.999999999\n" in (tmp_path / "a.toml").read_text()
    (tmp_path / "a.toml").unlink()
    code, out, err = _calibrate(tmp_path, monkeypatch, capsys, V0_LINE.format(k=3, a=300, d=300), "--json")
    entry = json.loads(out)
    assert (entry["alpha"], entry["fitted_alpha"]) == (0.999999999, 1.0) and "at 95%" in entry["notes"][0]


@pytest.mark.parametrize("text", [V0_LINE.format(k=3, a=300, d=300), V0_LINE.format(k=32, a=1, d=3200),
                                  V0_LINE.format(k=3, a=1300, d=3600),
                                  V1_LINE.format(a=30, d=90, rates="0.600, 0.300, 0.100")])
@pytest.mark.parametrize("spread", ["1e-300", "20", "1e9"])
def test_the_printed_run_command_runs(tmp_path, monkeypatch, capsys, text, spread):
    code, out, _ = _calibrate(tmp_path, monkeypatch, capsys, text, "--acceptance-spread", spread)
    assert code == 0
    use = next(line for line in out.splitlines() if "use it: psdsim run" in line).split("psdsim ", 1)[1]
    assert main([*use.split(), "--set", "requests=4"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("second", ["same", "link", "hard link"])
def test_one_file_given_twice_is_refused(tmp_path, monkeypatch, capsys, second):
    (tmp_path / "m.txt").write_text(PROM.format(n=1000, d=3000, a=1000))
    other = {"same": "m.txt", "link": "s.txt", "hard link": "h.txt"}[second]
    if second == "link":
        (tmp_path / other).symlink_to("m.txt")
    elif second == "hard link":
        (tmp_path / other).hardlink_to(tmp_path / "m.txt")
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", "m.txt", other, *PAIR, "--out", "a.toml"]) == 2
    err = capsys.readouterr().err
    assert err == (f"psdsim: error: traces: m.txt and {other} are the same file, whose counts would be added "
                   "twice; fix: give each engine's metrics once\n")
    assert not (tmp_path / "a.toml").exists()


def test_sources_whose_counts_sum_past_a_float_are_refused(tmp_path, monkeypatch, capsys):
    for name in ("b1.txt", "b2.txt"):
        (tmp_path / name).write_text(PROM.format(n=5e307, d=1.5e308, a=1e308))
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", "b1.txt", "b2.txt", *PAIR, "--out", "a.toml"]) == 2
    err = capsys.readouterr().err
    assert err == ("psdsim: error: traces: the sum of the sources' draft_tokens is past a float's range; "
                   "fix: give the counts as vLLM reported them\n")
    assert not (tmp_path / "a.toml").exists()


@pytest.mark.parametrize(("text", "says"), [
    (V0_LINE.format(k="9" * 5000, a=10, d=20), "its Number of speculative tokens has 5000 digits"),
    (PROM.format(n=10, d=30, a=20) + PER_POS.format(i="9" * 5000, n=5), "its position label has 5000 digits"),
])
def test_digit_strings_past_any_count_are_named(tmp_path, monkeypatch, capsys, text, says):
    # past 4,300 digits Python's int() raises a ValueError of its own
    assert says in _refused(tmp_path, monkeypatch, capsys, text)
