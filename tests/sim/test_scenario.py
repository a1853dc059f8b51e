"""Scenario files: flat or sectioned TOML, --set overrides, strict one-line errors."""

from __future__ import annotations

import pytest

from psdsim.sim.errors import ScenarioError
from psdsim.sim.scenario import FIELDS, Scenario, load_scenario, parse_override, scenario_to_toml


def test_default_mirrors_the_papers_setting_2():
    s = load_scenario()
    assert (s.method, s.target, s.draft) == ("psd", "qwen3-32b", "qwen3-1.7b")
    assert (s.gpu, s.link, s.tensor_parallel_size) == ("l40s", "pcie4", 4)
    assert (s.m, s.k, s.requests, s.output_len, s.dataset) == (16, 3, 1000, 256, "sharegpt")


def test_flat_and_sectioned_files_load_the_same(tmp_path):
    flat = tmp_path / "flat.toml"
    flat.write_text('k = 4\nlink = "nvlink4"\nrequests = 10\n')
    sect = tmp_path / "sect.toml"
    sect.write_text('[run]\nk = 4\n[hardware]\nlink = "nvlink4"\n[workload]\nrequests = 10\n')
    a, b = load_scenario(flat), load_scenario(sect)
    assert a.replace(name="x") == b.replace(name="x")
    assert a.name == "flat"  # the file's stem names the run unless `name` is given


def test_overrides_apply_after_the_file(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text("k = 2\n")
    s = load_scenario(f, ["k=5", "rate=2.5", "acceptance=0.7"], method="sd")
    assert (s.k, s.rate, s.acceptance, s.method) == (5, 2.5, 0.7, "sd")
    assert load_scenario(None, ["rate=none"]).rate is None


def test_resolved_toml_round_trips(tmp_path):
    s = Scenario(k=5, rate=3.0, acceptance=0.55, drafter_gpu="h100-sxm", name="rt")
    f = tmp_path / "r.toml"
    f.write_text(scenario_to_toml(s))
    assert load_scenario(f) == s
    assert s.digest() == load_scenario(f).digest()


@pytest.mark.parametrize("text, field", [
    ("kk = 3\n", "kk"),
    ("[hardware]\nk = 3\n", "hardware.k"),
    ("[nonsense]\nk = 3\n", "[nonsense]"),
    ('k = "three"\n', "k"),
    ("k = 0\n", "k"),
    ("m = 0\n", "m"),
    ('target = "gpt-5"\n', "target"),
    ('gpu = "tpu"\n', "gpu"),
    ('link = "ethernet"\n', "link"),
    ('dataset = "mmlu"\n', "dataset"),
    ("requests = 481\ndataset = \"spec-bench\"\n", "requests"),
    ("tensor_parallel_size = 3\n", "tensor_parallel_size"),
    ("gpu_memory_utilization = 1.5\n", "gpu_memory_utilization"),
    ("acceptance = 1.0\n", "acceptance"),
    ("rate = 0\n", "rate"),
    ("output_len = 2000\n", "output_len"),
    ("prompt_len = 2000\n", "prompt_len"),
    ("max_num_batched_tokens = 100\n", "max_num_batched_tokens"),
    ('draft = "qwen3-4b"\ntarget = "qwen3-8b"\n', "acceptance"),   # a pair without a prior
    ("mem_efficiency = 0\n", "mem_efficiency"),
    ("k = 3\nk = 4\n", "scenario"),
])
def test_bad_files_name_the_field(tmp_path, text, field):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(f)
    assert err.value.field == field
    message = str(err.value)
    assert "\n" not in message and "fix:" in message


@pytest.mark.parametrize("text", ["k", "=3", "nope=1", "k=x", "rate=fast"])
def test_bad_overrides(text):
    with pytest.raises(ScenarioError):
        load_scenario(None, [text])


def test_a_draft_of_another_vocabulary_is_refused_and_every_prior_pairs_one():
    from psdsim.sim.catalog import builtin_catalog
    from psdsim.sim.scenario import validate
    with pytest.raises(ScenarioError) as err:
        validate(Scenario(target="llama-3.3-70b", draft="qwen3-0.6b", acceptance=0.6))
    assert err.value.field == "draft"
    assert "qwen3-0.6b's vocab_size 151,936 differs from target llama-3.3-70b's 128,256" in err.value.problem
    validate(Scenario(method="ar", target="llama-3.3-70b", draft="qwen3-0.6b"))   # AR drafts nothing
    models = builtin_catalog().models
    assert all(models[d].vocab == models[t].vocab for d, t in builtin_catalog().acceptance)


def test_ar_needs_no_acceptance_prior():
    s = Scenario(method="ar", draft="qwen3-4b", target="llama-3.1-8b")
    assert s.replace(k=2).k == 2


def test_every_field_is_documented_and_sectioned():
    for name, f in FIELDS.items():
        assert f.metadata["doc"] and f.metadata["section"], name
    assert parse_override("k=7") == ("k", 7)


def test_warnings_flag_what_no_real_system_has():
    from psdsim.sim.scenario import warnings
    assert warnings(Scenario()) == []
    assert any("hypothetical: nvlink4" in w for w in warnings(Scenario(link="nvlink4")))
    assert warnings(Scenario(gpu="h100-sxm", drafter_gpu="h100-sxm", link="nvlink4")) == []
    assert any("beyond the paper" in w for w in warnings(Scenario(sub_batches=3, drafters=2)))
    assert any("compact" in w for w in warnings(Scenario(sampler_output="compact")))


def test_a_path_scenario_toml_cannot_record_is_refused_naming_its_field(tmp_path):
    """A file name with a byte that is not UTF-8 reaches Python as a lone surrogate; written into
    scenario.toml it would make a file that does not load back, so it is refused up front."""
    trace = tmp_path / "a\udcffb.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,4\n")
    with pytest.raises(ScenarioError, match=r"^trace: .*not UTF-8"):
        load_scenario(overrides=[f"trace={trace}"])


def test_acceptance_is_bounded_as_a_trace_row_is():
    """The trace reader refuses an acceptance past 1 - 1e-9; the scenario did not, and clamped it."""
    from psdsim.sim.acceptance import MAX_ACCEPTANCE
    assert load_scenario(overrides=[f"acceptance={MAX_ACCEPTANCE!r}"]).acceptance == MAX_ACCEPTANCE
    with pytest.raises(ScenarioError, match=r"^acceptance: must be in \(0, 1 - 1e-9\]"):
        load_scenario(overrides=["acceptance=0.9999999999"])


def test_an_empty_scenario_path_is_named_as_empty():
    """Path('') is '.', which was reported as "'.' is not a regular file"."""
    with pytest.raises(ScenarioError, match=r"^scenario: the path is empty"):
        load_scenario("")
