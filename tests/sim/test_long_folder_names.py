"""A study's default results folder is named after its spec file; a file name of up to 255 bytes
(the file system's own limit) must still give a folder name that can be made, staging folder
beside it included (.NAME.psdsim-MARK-XXXXXXXX), and keep the hash that tells runs apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from psdsim.commands.common import study_out
from psdsim.sim.output.locks import staging_prefix
from psdsim.sim.output.results import write_folder

LIMIT = 255


@pytest.mark.parametrize("stem", ["p" * 245, "é" * 122, "x" * 250])
def test_a_long_spec_name_gives_a_folder_that_can_be_staged_and_keeps_its_hash(tmp_path, stem):
    folder = study_out("plan", Path(stem + ".toml"), "6b357a90")
    staged = staging_prefix(tmp_path / folder.name) + "abcd1234"
    assert len(staged.encode()) <= LIMIT
    assert folder.name.startswith("plan-" + stem[:20]) and folder.name.endswith("-6b357a90")
    folder.name.encode().decode()   # cut between characters, never inside one
    write_folder(tmp_path / folder.name, {"plan.csv": "a\n", "figures/x.svg": "<svg/>"}, "plan")
    assert (tmp_path / folder.name / "plan.csv").read_bytes() == b"a\n"


def test_two_long_names_that_differ_only_at_the_end_keep_their_own_folders():
    a = study_out("sweep", Path("s" * 240 + "a.toml"))
    b = study_out("sweep", Path("s" * 240 + "b.toml"))
    assert a != b


def test_a_short_name_is_untouched():
    assert study_out("plan", Path("mine.toml"), "6b357a90") == Path("results/plan-mine-6b357a90")
