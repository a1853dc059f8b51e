"""Acceptance from what vLLM reports: its Prometheus counters, V1's SpecDecoding and V0's
Speculative metrics log lines, read into counts that match hand-computed ones, and turned into a
catalog prior under which the simulator accepts what the engine did."""

from __future__ import annotations

import json

import pytest

from psdsim.calibration.vllm_metrics import PROMETHEUS, V0_LOG, V1_LOG, read_acceptance
from psdsim.cli import main
from psdsim.sim.acceptance import accepted_per_draft, alpha_for_accepted
from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.scenario import load_scenario
from tests.helpers import paths

LABELS = 'engine="0",model_name="Qwen/Qwen3-32B"'
# 1200 drafts of k = 3; 600 accepted position 0, 400 positions 0-1, 300 all three: 1300 accepted.
PROM = f"""# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{{LABELS}}} 1200.0
vllm:spec_decode_num_drafts_created{{{LABELS}}} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{{{LABELS}}} 3600.0
vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}} 1300.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="0"}} 600.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="1"}} 400.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="2"}} 300.0
vllm:num_requests_running{{{LABELS}}} 0.0
"""
V1_LINE = ("INFO 05-01 10:00:{s:02d} [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.08, "
           "Accepted throughput: 13.00 tokens/s, Drafted throughput: 36.00 tokens/s, Accepted: {a} tokens, "
           "Drafted: {d} tokens, Per-position acceptance rate: 0.500, 0.333, 0.250, Avg Draft acceptance "
           "rate: 36.1%")
V1 = "\n".join(["INFO starting the server", V1_LINE.format(s=10, a=130, d=360),
                "INFO Avg prompt throughput: 10.0 tokens/s", V1_LINE.format(s=20, a=1170, d=3240)]) + "\n"
V0_LINE = ("INFO 10-16 19:05:{s:02d} metrics.py:367] Speculative metrics: Draft acceptance rate: {r:.3f}, "
           "System efficiency: 0.598, Number of speculative tokens: 3, Number of accepted tokens: {a}, "
           "Number of draft tokens: {d}, Number of emitted tokens: 2500.")
V0 = "".join(V0_LINE.format(s=s, r=a / d, a=a, d=d) + "\n" for s, a, d in ((1, 300, 1000), (6, 1300, 3600)))


def _file(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, text, source, per_position", [
    ("metrics.txt", PROM, PROMETHEUS, (600, 400, 300)),
    ("metrics.txt", PROM.replace("_total{", "{").replace("vllm:spec_decode_num_drafts{", "# gone{"),
     PROMETHEUS, (600, 400, 300)),     # no suffix, no num_drafts: 3600 draft tokens / k = 3
    ("server.log", V1, V1_LOG, (600, 400, 300)),     # 0.333 x (120 + 1080) rounds to 400
    ("server.log", V0, V0_LOG, ()),                  # the last line counts from the start
])
def test_each_source_counts_what_a_hand_count_does(tmp_path, name, text, source, per_position):
    counts = read_acceptance(_file(tmp_path, name, text))
    assert (counts.source, counts.k, counts.drafts, counts.draft_tokens, counts.accepted) == \
           (source, 3, 1200, 3600, 1300)
    assert counts.per_position == per_position
    assert counts.mean_accepted == pytest.approx(1300 / 1200)
    if per_position:
        assert counts.position_rates == pytest.approx((0.5, 1 / 3, 0.25))
        assert counts.conditional_rates == pytest.approx((0.5, 2 / 3, 0.75))
        # the expected accepted length under per-position rates p_i: sum over j of prod_{i<=j} p_i
        c = counts.conditional_rates
        assert c[0] + c[0] * c[1] + c[0] * c[1] * c[2] == pytest.approx(counts.mean_accepted, rel=1e-3)


VLLM_CPU = paths.DATA / "vllm_cpu"


@pytest.mark.parametrize("name, source", [("metrics.txt", PROMETHEUS), ("server.log", V1_LOG)])
def test_what_a_real_vllm_reported_is_read_as_its_own_counters(name, source):
    """vllm-cpu 0.32's own output of one SD run on the tiny pair (tests/data/vllm_cpu/capture.py):
    its whole /metrics text and its whole server log, read to the counts LLM.get_metrics() gave."""
    want = json.loads((VLLM_CPU / "counters.json").read_text())
    counts = read_acceptance(VLLM_CPU / name)
    assert (counts.source, counts.k) == (source, 3)
    assert (counts.drafts, counts.draft_tokens, counts.accepted) == (
        want["vllm:spec_decode_num_drafts"], want["vllm:spec_decode_num_draft_tokens"],
        want["vllm:spec_decode_num_accepted_tokens"])
    assert counts.per_position == tuple(want["vllm:spec_decode_num_accepted_tokens_per_pos"])


def test_per_position_counts_that_do_not_sum_to_the_accepted_ones_are_refused(tmp_path):
    with pytest.raises(ScenarioError, match="per-position counts sum to 1400, not the 1300 accepted"):
        read_acceptance(_file(tmp_path, "metrics.txt", PROM.replace("} 400.0", "} 500.0")))


def test_drafts_shorter_than_k_are_refused(tmp_path):
    with pytest.raises(ScenarioError, match="3500 draft tokens in 1200 drafts, not 3 each"):
        read_acceptance(_file(tmp_path, "metrics.txt", PROM.replace("3600.0", "3500.0")))


def test_engines_are_summed(tmp_path):
    two = PROM + PROM.replace('engine="0"', 'engine="1"')
    counts = read_acceptance(_file(tmp_path, "metrics.txt", two))
    assert (counts.drafts, counts.accepted, counts.per_position) == (2400, 2600, (1200, 800, 600))


def test_the_prior_is_what_the_closed_form_inverts():
    # every request at 0.5: 0.5 + 0.25 + 0.125 accepted per draft of 3
    assert accepted_per_draft(0.5, 3) == 0.875
    assert alpha_for_accepted(0.875, 3) == 0.5
    # a Beta population's drafts accept less than its mean's: the slow requests are verified most
    assert accepted_per_draft(0.5, 3, 20.0) < 0.875
    assert alpha_for_accepted(accepted_per_draft(0.6, 3, 20.0), 3, 20.0) == pytest.approx(0.6, abs=1e-12)


def test_the_calibrated_prior_makes_the_simulator_accept_what_vllm_did(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _file(tmp_path, "metrics.txt", PROM)
    assert main(["calibrate", "metrics.txt", "--draft", "qwen3-0.6b", "--target", "qwen3-32b",
                 "--dataset", "sharegpt"]) == 0
    assert "1,300 of 3,600 draft tokens accepted" in capsys.readouterr().out
    text = (tmp_path / "acceptance.toml").read_text()
    assert text.startswith("# psdsim calibrate: acceptance")
    assert '[acceptance."qwen3-0.6b -> qwen3-32b"]' in text
    # long outputs, so that a request's last, shorter drafts weigh little
    s = load_scenario(overrides=["catalog=acceptance.toml", "draft=qwen3-0.6b", "method=sd", "requests=600",
                                 "output_len=1024", "max_model_len=4096", "max_num_batched_tokens=4096"])
    vsr = simulate(s).summary["vsr"]
    assert vsr == pytest.approx(1300 / 3600, abs=0.01)
    # the same run again replaces its own file
    assert main(["calibrate", "metrics.txt", "--draft", "qwen3-0.6b", "--target", "qwen3-32b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["position_rates"] == pytest.approx([0.5, 1 / 3, 0.25])


@pytest.mark.parametrize("name, text, line", [
    ("metrics.txt", PROM.replace("3600.0", "lots"), 5),
    ("metrics.txt", PROM.replace(',position="1"', ""), 8),
    ("server.log", V1.replace("Per-position acceptance rate: 0.500, 0.333, 0.250, ", "", 1), 2),
    ("server.log", V1 + V1_LINE.format(s=30, a=1, d=4).replace("0.250,", "0.250, 0.100,"), 5),
    ("server.log", V0.replace("Number of accepted tokens: 1300", "Number of accepted tokens: many"), 2),
    ("server.log", V1.replace("Mean acceptance length: 2.08", "Mean acceptance length: 2.50", 1), 2),
])
def test_a_line_psdsim_cannot_read_is_named(tmp_path, monkeypatch, capsys, name, text, line):
    path = _file(tmp_path, name, text)
    with pytest.raises(ScenarioError, match=rf"line {line}\b"):
        read_acceptance(path)
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", name, "--draft", "qwen3-0.6b", "--target", "qwen3-32b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdsim: error: ") and f"line {line}" in err and "\n" not in err
    assert not (tmp_path / "acceptance.toml").exists()


@pytest.mark.parametrize("argv, field", [
    (["metrics.txt", "--target", "qwen3-32b"], "--draft"),
    (["metrics.txt", "--draft", "qwen3-0.6b", "--target", "qwen3-32b", "--plot", "f.png"], "--plot"),
    (["metrics.txt", "other.jsonl", "--draft", "qwen3-0.6b", "--target", "qwen3-32b"], "traces"),
    (["metrics.txt", "--draft", "qwen3-0.6b", "--target", "qwen3-32b", "--out", "mine.toml"], "--out"),
])
def test_what_cannot_make_a_prior_is_one_line(tmp_path, monkeypatch, capsys, argv, field):
    monkeypatch.chdir(tmp_path)
    _file(tmp_path, "metrics.txt", PROM)
    _file(tmp_path, "other.jsonl", '{"traces": []}\n')
    _file(tmp_path, "mine.toml", "# a user's own catalog\n")
    assert main(["calibrate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"psdsim: error: {field}: ") and "\n" not in err
    assert (tmp_path / "mine.toml").read_text() == "# a user's own catalog\n"


def test_a_prior_for_models_given_by_their_config_json_simulates_as_the_catalog_pairs(tmp_path, monkeypatch,
                                                                                      capsys):
    from tests.helpers.hf_configs import config_of, write

    monkeypatch.chdir(tmp_path)
    _file(tmp_path, "metrics.txt", PROM)
    write(tmp_path / "draft", config_of("qwen3-0.6b"))
    write(tmp_path / "target", config_of("qwen3-32b"))
    assert main(["calibrate", "metrics.txt", "--draft", "./draft", "--target", "target/config.json",
                 "--out", "paths.toml"]) == 0
    assert main(["calibrate", "metrics.txt", "--draft", "qwen3-0.6b", "--target", "qwen3-32b",
                 "--out", "keys.toml"]) == 0
    out = capsys.readouterr().out
    # written under the absolute paths a scenario resolves its target and draft to
    draft, target = str(tmp_path / "draft"), str(tmp_path / "target" / "config.json")
    assert f'[acceptance."{draft} -> {target}"]' in (tmp_path / "paths.toml").read_text()
    assert f"--set draft={draft} --set target={target}" in out
    run = ["method=sd", "requests=40", "output_len=64"]
    by_path = simulate(load_scenario(overrides=["catalog=paths.toml", f"draft={draft}", f"target={target}",
                                                *run]))
    by_key = simulate(load_scenario(overrides=["catalog=keys.toml", "draft=qwen3-0.6b", *run]))
    assert json.dumps(by_path.summary) == json.dumps(by_key.summary)


def test_a_config_json_psdsim_cannot_price_is_one_line_naming_the_flag_and_key(tmp_path, monkeypatch, capsys):
    from tests.helpers.hf_configs import config_of, write

    monkeypatch.chdir(tmp_path)
    _file(tmp_path, "metrics.txt", PROM)
    write(tmp_path / "t", config_of("qwen3-32b") | {"architectures": ["GemmaForCausalLM"]})
    assert main(["calibrate", "metrics.txt", "--draft", "qwen3-0.6b", "--target", "./t"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psdsim: error: --target: architectures: ") and err.count("\n") == 1
    assert not (tmp_path / "acceptance.toml").exists()
