"""A system family outside the tree: new files only (a package with its stage table, one stage, one recipe, and the
entry point that names it), and `voxanon anonymise` runs its system, no shared module edited."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.errors import VoxanonError
from voxanon.pipeline.systems import registry
from voxanon.pipeline.systems.recipes import available_systems
from voxanon.pipeline.systems.registry import StageRegistry

FAMILY = {
    "toyfam/__init__.py": 'STAGES = {"toy_gain": ".gain:GainStage"}\n',
    "toyfam/gain.py": '''from voxanon.pipeline.systems.stage import Stage


class GainStage(Stage):
    name = "toy_gain"
    model_free = True

    def __init__(self, gain: float = 0.5):
        self.gain = float(gain)

    def process(self, utt):
        utt.audio = utt.audio * self.gain
        utt.record["toy_gain"] = self.gain
''',
    "toyfam/recipes/toy.yaml": "description: the toy family's one system\nstages: [toy_gain]\ntoy_gain:\n  gain: 0.25\n",
    # What pip writes for an installed distribution that declares the entry point.
    "toyfam-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: toyfam\nVersion: 0.1\n",
    "toyfam-0.1.dist-info/entry_points.txt": "[voxanon.families]\ntoy = toyfam\n",
}
CLI = "import sys; from voxanon.pipeline.cli import main; sys.exit(main(sys.argv[1:]))"


def _voxanon(site: Path, *arguments: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", CLI, *arguments], env=env, capture_output=True, text=True,
                          timeout=300)


def _install(site: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)


def test_a_family_installed_beside_the_package_runs_with_anonymise(tmp_path):
    site = tmp_path / "site"
    _install(site, FAMILY)
    data = make_corpus(tmp_path / "corpus", n_speakers=2, n_utts=1)

    listed = _voxanon(site, "systems")
    assert listed.returncode == 0, listed.stderr
    assert "toy_gain" in listed.stdout and "the toy family's one system" in listed.stdout

    done = _voxanon(site, "anonymise", "--system", "toy", "--data", str(data.path), "--out", str(tmp_path / "out"),
                    "--workers", "1", "--quiet")
    assert done.returncode == 0, done.stderr
    for utt, path in data.wav.items():
        source, _ = soundfile.read(path, dtype="int16")
        output, rate = soundfile.read(tmp_path / "out" / f"{data.name}_toy" / "wav" / f"{utt}.wav", dtype="int16")
        assert rate == 16000 and len(output) == len(source)
        assert np.abs(output.astype(int) - np.round(source * 0.25)).max() <= 1  # the recipe's gain, 16-bit rounding


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """Installs a family in this process (its folder on sys.path), the registry's caches cleared before and after."""
    site = tmp_path / "site"

    def install(files: dict[str, str]) -> Path:
        _install(site, files)
        monkeypatch.syspath_prepend(str(site))
        registry.installed_families.cache_clear()
        return site

    yield install
    registry.installed_families.cache_clear()
    for name in [name for name in sys.modules if name.split(".")[0] == "toyfam"]:
        del sys.modules[name]


def test_a_family_declaring_a_shipped_stage_name_is_refused_naming_both(installed):
    installed({**FAMILY, "toyfam/__init__.py": 'STAGES = {"mcadams": ".gain:GainStage"}\n'})
    with pytest.raises(VoxanonError) as refused:
        StageRegistry()["mcadams"]
    assert "'mcadams'" in str(refused.value) and "voxanon.pipeline.systems.mcadams:McAdamsStage" in str(refused.value) \
        and "toyfam.gain:GainStage" in str(refused.value)


def test_a_family_recipe_named_as_a_shipped_system_is_refused_naming_both(installed):
    site = installed({name.replace("toy.yaml", "b2.yaml"): text for name, text in FAMILY.items()})
    with pytest.raises(VoxanonError) as refused:
        available_systems()
    assert "'b2'" in str(refused.value) and "recipes/systems/b2.yaml" in str(refused.value) \
        and str(site / "toyfam" / "recipes" / "b2.yaml") in str(refused.value)
    assert "b2" in available_systems(installed=False)  # the help text's list reads no installed family
