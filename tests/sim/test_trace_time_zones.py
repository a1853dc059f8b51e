"""An Azure trace's date-times on different clocks: aware ones with different UTC offsets are each
converted to UTC exactly (and the run says so); naive ones mixed with aware ones are refused,
since nobody can tell which clock a naive one is on."""

from __future__ import annotations

import pytest

from psdsim.sim.errors import ScenarioError
from psdsim.sim.trace_replay import read_trace

HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _trace(tmp_path, *stamps):
    p = tmp_path / "azure.csv"
    p.write_text(HEAD + "".join(f"{t},10,5\n" for t in stamps))
    return p


@pytest.mark.parametrize("stamps, line", [
    (("2024-05-10 00:00:00+00:00", "2024-05-10 00:00:01"), "line 3"),
    (("2024-05-10 00:00:00", "2024-05-10 00:00:01", "2024-05-10 00:00:02Z"), "line 4"),
    (("2024-05-10 00:00:00-05:00", "2024-05-10 00:00:01.5"), "line 3"),
])
def test_naive_mixed_with_aware_is_refused_naming_the_row(tmp_path, stamps, line):
    with pytest.raises(ScenarioError) as err:
        read_trace(_trace(tmp_path, *stamps), 4096)
    assert err.value.field == "trace" and line in str(err.value) and "TIMESTAMP" in str(err.value)
    assert "UTC offset" in err.value.fix


def test_two_offsets_are_converted_to_utc_exactly_and_said(tmp_path):
    # 02:00:01+02:00 is 00:00:01 UTC: one second after the first request, not two hours and one.
    t = read_trace(_trace(tmp_path, "2024-05-10 00:00:00+00:00", "2024-05-10 02:00:01.5+02:00"), 4096)
    assert t.arrival_s.tolist() == [0.0, 1.5]
    assert any("UTC offsets" in note and "+02:00" in note for note in t.notes)


def test_one_offset_or_all_naive_reads_without_a_note(tmp_path):
    for stamps in (("2024-05-10 00:00:00+00:00", "2024-05-10 00:00:01Z"),
                   ("2023-11-16 18:15:46.6805900", "2023-11-16 18:15:47")):
        t = read_trace(_trace(tmp_path, *stamps), 4096)
        assert t.notes == ()
