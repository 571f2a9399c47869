"""Model registry, ``voxanon models`` and the resynth system end to end on random tiny models."""
from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile

from conftest import make_corpus
from voxanon.models.registry import ModelNotInstalledError, installed, load_model_set, write_model_set
from voxanon.pipeline.cli import main
from voxanon.pipeline.systems import STAGES


@pytest.fixture
def voxanon_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("VOXANON_HOME", str(home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return home


def test_missing_model_set_names_file_and_install_command(voxanon_home):
    with pytest.raises(ModelNotInstalledError, match=r"manifest.json missing.*voxanon models import ssl-sas"):
        load_model_set("ssl-sas")


def test_random_init_import_is_marked_and_verified(voxanon_home, capsys, caplog):
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    manifest = installed()["ssl-sas"]
    assert manifest["random"] is True
    assert set(manifest["files"]) == {"content.safetensors", "generator.safetensors", "speaker.safetensors",
                                      "config.json"}
    model_set = load_model_set("ssl-sas")
    assert "RANDOM WEIGHTS" in caplog.text
    assert model_set.config["generator"]["in_channels"] == 393
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "RANDOM WEIGHTS" in out and "resynth: ssl-sas (installed)" in out
    (voxanon_home / "models" / "ssl-sas" / "speaker.safetensors").write_bytes(b"tampered")
    with pytest.raises(ModelNotInstalledError, match="speaker.safetensors does not match"):
        load_model_set("ssl-sas")


def test_import_needs_a_source_or_random_init(voxanon_home, capsys):
    assert main(["models", "import", "ssl-sas"]) == 2
    assert "--random-init" in capsys.readouterr().err
    assert main(["models", "import", "ssl-sas", str(voxanon_home / "nowhere")]) == 2
    assert "no g_* vocoder checkpoint" in capsys.readouterr().err


def test_list_shows_missing_checkpoints(voxanon_home, capsys):
    assert main(["models", "list"]) == 0
    assert "resynth: ssl-sas (MISSING)" in capsys.readouterr().out


def test_registry_round_trip(tmp_path):
    import torch

    write_model_set("demo", {"part": {"w": torch.arange(3.0)}}, {"k": 1}, source="test", random=False, root=tmp_path)
    model_set = load_model_set("demo", root=tmp_path)
    assert not model_set.random and model_set.config == {"k": 1}
    assert model_set.tensors("part")["w"].tolist() == [0.0, 1.0, 2.0]


def test_neural_stages_are_registered():
    assert {"ssl_sas_input", "f0", "content", "speaker", "vocoder"} <= set(STAGES)


def test_resynth_end_to_end_keeps_trimmed_length(voxanon_home, tmp_path, capsys):
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    data = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=0.5)
    out = tmp_path / "out"
    assert main(["anonymise", "--system", "resynth", "--data", str(data.path), "--out", str(out),
                 "--workers", "1", "--quiet"]) == 0
    out_dir = next(p for p in out.iterdir() if p.is_dir())
    journal = [json.loads(line) for line in (out_dir / ".journal.jsonl").read_text().splitlines()]
    assert len(journal) == 4
    for utt, source in data.wav.items():
        original = soundfile.info(source).frames
        produced, rate = soundfile.read(out_dir / "wav" / f"{utt}.wav")
        assert rate == 16000
        assert len(produced) == original // 320 * 320
        assert np.max(np.abs(produced)) == pytest.approx(0.95, abs=1e-3)
    assert all(entry["record"]["trimmed_samples"] == entry["samples"] for entry in journal)
