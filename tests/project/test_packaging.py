"""The distribution owns one top-level name: a wheel built from this checkout holds `psdsim` and
nothing else beside its metadata, carries every package folder of the repository (and the catalog's
data), and works when imported from the wheel alone, away from the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import paths

ROOT = paths.ROOT
FOLDERS = {"psdsim": "psdsim", "sim": "psdsim/sim", "studies": "psdsim/studies", "engine": "psdsim/engine",
           "calibration": "psdsim/calibration", "theory": "psdsim/theory"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: a build in place would leave build/ and *.egg-info in the checkout.
    source = out / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "results", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"))
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(source)]
    subprocess.run(build, check=True, capture_output=True)
    return next(out.glob("psdsim-*.whl"))


def test_the_wheel_has_one_top_level_name_and_every_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"psdsim"}
    for folder, installed in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            inside = installed + "/" + init.relative_to(ROOT / folder).as_posix()
            assert inside in names, f"{init.relative_to(ROOT)} is not in the wheel: list it in pyproject.toml"
    assert any(n.startswith("psdsim/sim/catalog/") and n.endswith(".toml") for n in names)


def test_the_wheel_works_away_from_the_checkout(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (f"import sys; sys.path.insert(0, {str(site)!r})\n"
            "import psdsim, psdsim.sim.run as r\n"
            f"assert r.__file__.startswith({str(site)!r}), r.__file__\n"
            "s = psdsim.load_scenario(overrides=['requests=8', 'output_len=8', 'm=2'])\n"
            "print(psdsim.simulate(s).summary['requests'])")
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "8"
