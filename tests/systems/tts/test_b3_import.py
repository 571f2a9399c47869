"""``voxanon models import sttts DIR`` and ``voxanon models check`` on B3's whole release, each file written as its
publisher's code writes it (``tests/helpers/sttts_*_fixtures.py``, tiny sizes) into the recipe's
``exp/sttts_models`` layout: the set imports and loads strictly, a missing file and a ``__reduce__`` payload are
refused by name (the payload never runs), and the recipe's cache of generated vectors beside the release is not read.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.sttts_asr_fixtures import write_asr_zip
from tests.helpers.sttts_prosody_fixtures import write_aligner
from tests.helpers.sttts_speaker_fixtures import write_embedding_function, write_wgan
from tests.helpers.sttts_tts_fixtures import write_fastspeech2, write_hifigan
from voxanon.models.checkpoints.sttts import COMPONENTS, FILES, load_component
from voxanon.models.checkpoints.sttts_speaker import packaged_vad_path
from voxanon.pipeline.cli import main

WRITERS = {"asr": write_asr_zip, "style": write_embedding_function, "wgan": write_wgan, "aligner": write_aligner,
           "fastspeech2": write_fastspeech2, "hifigan": write_hifigan}


def write_release(models_dir: Path) -> Path:
    """B3's six files at tiny sizes, laid out as the recipe's ``exp/sttts_models``."""
    for component, relative in FILES.items():
        path = models_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        WRITERS[component](path, size="tiny", seed=1)
    return models_dir


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return write_release(tmp_path_factory.mktemp("release") / "exp" / "sttts_models")


class Payload:
    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.slow  # the fixtures take seconds (the WGAN's train loop); each file's import is tested beside its component
def test_the_release_imports_checks_and_loads(release, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    # The recipe's cache of generated vectors (models_dir/anonymization/style-embed_wgan.pt), not a release file.
    torch.save(torch.zeros(3, 128), release / "anonymization" / "style-embed_wgan.pt")
    assert main(["models", "check", str(release)]) == 0
    report = capsys.readouterr().out
    assert all(relative in report for relative in FILES.values())
    assert main(["models", "import", "sttts", str(release)]) == 0
    assert main(["models", "check", "sttts"]) == 0
    from voxanon.models.checkpoints.registry import load_model_set

    model_set = load_model_set("sttts")
    assert {component: model_set.config["files"][component] for component in FILES} == FILES
    assert model_set.config["files"]["vad"] == str(packaged_vad_path())
    assert all(isinstance(load_component(model_set, component), torch.nn.Module) for component in COMPONENTS)


def test_a_missing_file_is_refused_naming_it(tmp_path, monkeypatch, capsys):
    """Refused before any file is read: empty files stand in for the others."""
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    partial = tmp_path / "partial"
    for component, relative in FILES.items():
        if component != "hifigan":
            (partial / relative).parent.mkdir(parents=True, exist_ok=True)
            (partial / relative).touch()
    assert main(["models", "import", "sttts", str(partial)]) == 2
    assert FILES["hifigan"] in capsys.readouterr().err


@pytest.mark.slow
def test_a_reduce_payload_is_refused_and_never_runs(release, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    poisoned = tmp_path / "poisoned"
    for relative in FILES.values():
        (poisoned / relative).parent.mkdir(parents=True, exist_ok=True)
        (poisoned / relative).symlink_to(release / relative)
    marker = tmp_path / "ran"
    payload = Payload()
    payload.marker = marker
    aligner = poisoned / FILES["aligner"]
    aligner.unlink()
    torch.save({"asr_model": payload}, aligner)
    assert main(["models", "import", "sttts", str(poisoned)]) == 2
    assert str(aligner) in capsys.readouterr().err
    assert not marker.exists()
