"""The helpers every reader of user input shares (sim/user_input.py): the nearest names for a
misspelt one, a document's fields flat or in their tables, values held to a field's type."""

from __future__ import annotations

import pytest

from psdsim.sim.errors import ScenarioError
from psdsim.sim.user_input import (
    FieldTables,
    bracketed,
    close_names,
    did_you_mean,
    parsed,
    typed,
    unknown_table,
)

TABLES = FieldTables({"k": "run", "m": "run", "rate": "workload", "requests": "workload"},
                     ("run", "workload"), "see the list")


def _error(doc: dict, where: str = "", reserved: tuple[str, ...] = ()) -> str:
    with pytest.raises(ScenarioError) as err:
        dict(TABLES.flatten(doc, "f.toml", where, reserved))
    return str(err.value)


def test_close_names_take_names_begun_then_typos_at_most_three() -> None:
    known = ["max_model_len", "max_num_batched_tokens", "m", "requests", "rate"]
    assert close_names("max", known) == ["max_model_len", "max_num_batched_tokens"]
    assert close_names("reqests", known) == ["requests"]
    assert close_names("zzz", known) == []
    assert len(close_names("", known)) == 3


def test_did_you_mean_spells_each_name_or_says_otherwise() -> None:
    assert did_you_mean("gird", ["base", "grid"], "use [base]") == "did you mean 'grid'?"
    assert did_you_mean("gird", ["base", "grid"], "x", bracketed) == "did you mean [grid]?"
    assert did_you_mean("zzz", ["base", "grid"], "use [base]") == "use [base]"
    assert str(unknown_table("gird", ["grid"], "s.toml", "x")) == (
        "[gird]: unknown table in s.toml; fix: did you mean [grid]?")


def test_fields_flat_and_in_their_tables_come_out_in_order() -> None:
    doc = {"k": 3, "workload": {"rate": 2.0}, "m": 4}
    assert list(TABLES.flatten(doc, "f.toml")) == [("k", 3), ("rate", 2.0), ("m", 4)]
    assert list(TABLES.flatten({"n": 2, "k": [1]}, "s.toml", "sample", ("n",))) == [("k", [1])]


def test_a_whole_file_names_its_unknown_misplaced_and_twice_given_fields() -> None:
    assert _error({"reqests": 5}) == "reqests: unknown field in f.toml; fix: did you mean 'requests'?"
    assert _error({"run": {"zz": 1}}) == "run.zz: unknown field in f.toml; fix: see the list"
    assert _error({"run": {"rate": 1.0}}) == (
        "run.rate: belongs in [workload]; fix: move rate to the [workload] table or write it flat")
    assert _error({"k": 3, "run": {"k": 4}}) == (
        "k: given twice in f.toml, at the top level and in [run]; fix: keep one k (in [run] or at the "
        "top, not both)")
    assert _error({"wrokload": {"rate": 1.0}}) == (
        "[wrokload]: unknown table in f.toml; fix: did you mean [workload]?")


def test_inside_a_table_names_are_dotted_and_a_table_value_may_be_a_field() -> None:
    assert _error({"kk": [2]}, "grid") == "grid.kk: unknown key in [grid]; fix: did you mean 'k'?"
    assert _error({"bogus": {"range": [1, 2]}}, "sample", ("n",)) == (
        "sample.bogus: unknown key in [sample]; fix: see the list; [sample] also takes n")
    assert _error({"run": {"rate": [1.0]}}, "grid") == (
        "grid.run.rate: belongs in [workload]; fix: move rate to the [grid.workload] table or write it flat")
    assert _error({"k": [2], "run": {"k": [3]}}, "grid") == (
        "grid.k: given twice in f.toml, in [grid] and in [grid.run]; fix: keep one k (in [grid.run] or "
        "in [grid], not both)")
    assert list(TABLES.flatten({"rate": {"range": [1, 2]}}, "s.toml", "sample")) == [
        ("rate", {"range": [1, 2]})]


@pytest.mark.parametrize(("value", "kind", "expected"), [
    (3, float, 3.0), (2.5, float, 2.5), (3, int, 3), (True, bool, True), ("x", str, "x")])
def test_typed_keeps_or_widens_a_value_of_the_field_type(value, kind, expected) -> None:
    out = typed(value, kind)
    assert out == expected and type(out) is kind


@pytest.mark.parametrize(("value", "kind", "error"), [
    (True, int, TypeError), (1, bool, TypeError), (True, float, TypeError), (3.0, int, TypeError),
    ("3", int, TypeError), (3, str, TypeError), (float("inf"), float, ValueError),
    (float("nan"), float, ValueError), (10**400, float, ValueError)])
def test_typed_refuses_another_type_and_numbers_a_float_cannot_hold(value, kind, error) -> None:
    with pytest.raises(error):
        typed(value, kind)


def test_parsed_reads_set_text_by_the_type() -> None:
    words = ("true", "Yes", "on", "1", "false", "NO", "off", "0")
    assert [parsed(w, bool) for w in words] == [True] * 4 + [False] * 4
    assert parsed("4", int) == 4 and parsed("0.5", float) == 0.5 and parsed('"a b"', str) == "a b"
    for text, kind in (("maybe", bool), ("4.0", int), ("３", int), ("abc", float)):
        with pytest.raises(ValueError):
            parsed(text, kind)
