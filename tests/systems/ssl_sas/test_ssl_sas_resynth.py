"""Model registry, ``voxanon models`` and the resynth system end to end on random tiny models."""
from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile

from tests.helpers.corpora import make_corpus
from voxanon.models.checkpoints.registry import ModelNotInstalledError, installed, load_model_set, write_model_set
from voxanon.pipeline.cli import main
from voxanon.pipeline.systems.recipes import STAGES


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


def test_ssl_sas_stages_are_registered():
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


def reference_chain(audio: np.ndarray) -> np.ndarray:
    """SSL-SAS ``inference.py`` on one utterance: each model called on it alone, then peak 0.95."""
    import torch

    from voxanon.models.f0.extract import yaapt_f0
    from voxanon.pipeline.systems.ssl_sas.loader import load_ssl_sas_models

    content, speaker, vocoder = load_ssl_sas_models("ssl-sas")
    audio = audio[:len(audio) // 320 * 320]
    audio = audio / np.max(np.abs(audio)) * 0.95
    with torch.no_grad():
        wave = torch.from_numpy(audio)[None]
        frames = vocoder.layout.frames(content(wave)[0], torch.from_numpy(yaapt_f0(audio)), speaker(wave)[0])
        output = vocoder.generator(frames[None])[0, 0].numpy()
    return output / np.max(np.abs(output)) * 0.95


@pytest.mark.usefixtures("one_torch_thread")
def test_batched_chain_equals_one_utterance_at_a_time(voxanon_home):
    from voxanon.pipeline.systems.recipes import build_system, load_system_config

    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    rng = np.random.default_rng(5)
    t = np.arange(16000) / 16000
    waves = [(0.3 * np.sin(2 * np.pi * (110 + 40 * i) * t[:n]) + 0.02 * rng.standard_normal(n)).astype(np.float32)
             for i, n in enumerate((16000, 9650, 12345, 7000))]
    system = build_system(load_system_config("resynth"))
    batch = [system.new_utterance(f"u{i}", "spk", None, w) for i, w in enumerate(waves)]
    for stage in system.stages:
        stage.process_batch(batch)
    for utt, wave in zip(batch, waves):
        expected = reference_chain(wave)
        assert len(utt.audio) == len(expected) == len(wave) // 320 * 320
        np.testing.assert_allclose(utt.audio, expected, atol=1e-5, rtol=0)


def test_model_set_names_are_names_not_paths(tmp_path):
    import torch

    from voxanon.data_prep.errors import VoxanonError

    with pytest.raises(VoxanonError, match="a name, not a path"):
        write_model_set("../escaped", {"part": {"w": torch.zeros(1)}}, {}, source="test", random=False, root=tmp_path)
    assert not (tmp_path.parent / "escaped").exists()


def test_train_vocoder_refuses_bad_install_names_and_sets_without_encoders(voxanon_home, tmp_path, capsys):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=1, seconds=0.6)
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    assert main(["models", "import", "hubert-soft", "--random-init", "--size", "tiny"]) == 0
    common = ["train", "vocoder", "--data", str(data.path), "--out", str(tmp_path / "ckpt"), "--steps", "1",
              "--quiet", "--workers", "1"]
    assert main([*common, "--install", "../../escaped"]) == 2
    assert "give a new model set name" in capsys.readouterr().err
    assert main([*common, "--install", "hubert-soft"]) == 2
    assert "an imported model set of that name exists" in capsys.readouterr().err
    assert main([*common, "--models", "hubert-soft"]) == 2
    assert "model set 'hubert-soft' has no vocoder" in capsys.readouterr().err
    assert main([*common, "--layout", "speaker_dim=100"]) == 2
    assert "speaker_dim 100 differs from the 192-d speaker model" in capsys.readouterr().err
    assert not (tmp_path / "ckpt").exists()  # refused before the feature pass
