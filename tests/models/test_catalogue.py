"""The release catalogue drives ``voxanon models check`` and ``fetch``: a release is one catalogue entry (and its own
modules), and the shared check and command modules hold no branch per release."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from voxanon.models.checkpoints import catalogue
from voxanon.models.checkpoints.catalogue import CATALOGUE, FolderCheck, Release
from voxanon.models.checkpoints.registry import write_model_set
from voxanon.models.checkpoints.release_check import CheckReport, FileReport
from voxanon.pipeline.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _toy_release(monkeypatch, **fields) -> None:
    monkeypatch.setitem(CATALOGUE, "toy", Release("toy", "a toy release", "MIT", **fields))


def test_models_check_runs_the_check_of_the_release_whose_folder_it_is(tmp_path, monkeypatch, capsys):
    def run(folder, read):
        report = CheckReport(folder)
        report.files.append(FileReport("toy.bin", "the toy release's weights", keyed=False))
        return report

    _toy_release(monkeypatch, folder_check=FolderCheck(run, lambda folder: (folder / "toy.bin").is_file()))
    (tmp_path / "toy.bin").write_bytes(b"")
    assert main(["models", "check", str(tmp_path)]) == 0
    assert "the toy release's weights" in capsys.readouterr().out
    # A folder no release's check holds is read as the SSL-SAS layout's, which says what it lacks.
    (tmp_path / "toy.bin").unlink()
    assert main(["models", "check", str(tmp_path)]) == 1
    assert "no HiFi-GAN/<model>/g_* file" in capsys.readouterr().out


def test_models_check_loads_an_installed_set_with_its_releases_loaders(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path))
    weights = {"weight": torch.ones(3, 2)}
    loaded = []

    def loaders(model_set):
        return {"net": lambda: loaded.append(model_set.name) or SimpleNamespace(state_dict=lambda: weights)}

    _toy_release(monkeypatch, set_loaders=loaders)
    write_model_set("toy-set", {"net": weights}, {"release": "toy"}, source="test", random=True)
    assert main(["models", "check", "toy-set"]) == 0
    assert loaded == ["toy-set"] and "net (net.safetensors): would succeed (net 0.00 M parameters)" in \
        capsys.readouterr().out


def test_a_set_that_names_no_release_is_read_in_the_ssl_sas_layout():
    assert catalogue.set_release({}).name == "ssl-sas"
    assert catalogue.set_release({"release": "nac"}).name == "nac"


def test_no_shared_module_branches_on_a_release_name():
    for path in ("models/checkpoints/release_check.py", "models/checkpoints/model_check.py",
                 "pipeline/commands/models.py"):
        text = (ROOT / path).read_text(encoding="utf-8")
        assert "release ==" not in text and "entry.name ==" not in text, path
        for name in CATALOGUE:
            assert f'== "{name}"' not in text and f"== '{name}'" not in text, (path, name)
