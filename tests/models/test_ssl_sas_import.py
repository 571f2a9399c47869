"""``voxanon models import ssl-sas DIR`` on a synthetic release written in the published layout."""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pytest
import torch

from tests.helpers.hubert import TINY as TINY_CONTENT
from voxanon.models.checkpoints.ssl_sas import ZLLR_VC_LAYOUT, import_ssl_sas
from voxanon.models.checkpoints.safe import CheckpointError, UnsafeCheckpointError
from voxanon.models.checkpoints.registry import load_model_set
from voxanon.pipeline.cli import main
from voxanon.pipeline.systems.ssl_sas.loader import load_ssl_sas_models
from tests.helpers.ssl_sas_release import write_release


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_release_imports_and_reproduces_the_generator(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    reference, _, ecapa = write_release(tmp_path / "release")
    assert main(["models", "import", "ssl-sas", str(tmp_path / "release")]) == 0
    model_set = load_model_set("ssl-sas")
    assert not model_set.random and model_set.config["speaker"]["channels"] == [32, 32, 32, 32, 96]
    content, speaker, vocoder = load_ssl_sas_models("ssl-sas")
    frames = torch.randn(1, 393, 12)
    with torch.no_grad():
        torch.testing.assert_close(vocoder.generator(frames), reference(frames), atol=1e-5, rtol=0)
        for key, value in ecapa.state_dict().items():
            torch.testing.assert_close(speaker.embedding_model.state_dict()[key], value)
    assert content.encode([np.zeros(3200, dtype=np.float32) + 0.01])[0].shape == (10, 200)


def test_separate_files_are_used_when_g_lacks_submodels(tmp_path):
    write_release(tmp_path, embed_submodels=False)
    components, config = import_ssl_sas(tmp_path)
    assert config["content"]["hidden_size"] == TINY_CONTENT.hidden_size
    assert "W" in components["content"] and "fc.conv.weight" in components["speaker"]


def test_hubert_base_file_must_match(tmp_path):
    _, content_state, _ = write_release(tmp_path)
    fairseq = {k[len("ssl_model."):]: v for k, v in content_state.items() if k.startswith("ssl_model.")}
    torch.save({"args": argparse.Namespace(arch="hubert"), "model": fairseq}, tmp_path / "hubert_base_ls960.pt")
    import_ssl_sas(tmp_path, tmp_path / "hubert_base_ls960.pt")
    fairseq["post_extract_proj.weight"] = torch.zeros(5, 5)
    torch.save({"args": argparse.Namespace(arch="hubert"), "model": fairseq}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="shapes differ"):
        import_ssl_sas(tmp_path, tmp_path / "other.pt")


class Payload:
    def __reduce__(self):
        import subprocess
        return subprocess.call, (["true"],)


def test_malicious_release_is_refused(tmp_path):
    write_release(tmp_path, payload=Payload())
    with pytest.raises(UnsafeCheckpointError, match="subprocess.call"):
        import_ssl_sas(tmp_path)


# zLLR-VC (ICASSP 2023): the SSL-SAS release layout with its own vocoder folder and conditioning ------------

ZLLR_VOCODER = "libri_tts_clean_100_fbank_xv_ssl_freeze_xvnorm"
"""A stand-in name: the release's folder name is not assumed, the importer takes the only one."""


def test_zllr_vc_release_imports_with_its_conditioning(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    reference, _, _ = write_release(tmp_path / "release", vocoder_subdir=ZLLR_VOCODER)
    assert main(["models", "import", "zllr-vc", str(tmp_path / "release")]) == 0
    model_set = load_model_set("zllr-vc")
    assert model_set.manifest["source"].startswith("ICASSP 2023 zLLR-VC release")
    layout = model_set.config["layout"]
    assert (layout["standardise_content"], layout["l2_normalise_speaker"], layout["layer_norm_speaker"]) == \
        (True, True, False)
    assert layout["layer_norm_content"] is True
    content, _, vocoder = load_ssl_sas_models("zllr-vc")
    assert vocoder.layout.standardise_content and not vocoder.layout.layer_norm_speaker
    frames = torch.randn(1, 393, 12)
    with torch.no_grad():
        torch.testing.assert_close(vocoder.generator(frames), reference(frames), atol=1e-5, rtol=0)
    # The layout matters: the same inputs condition the generator differently from SSL-SAS.
    content_frames = torch.randn(6, 200) * 3 + 1
    f0, speaker = torch.full((12,), 120.0), torch.randn(192) * 4
    ssl_sas_frames = dataclasses.replace(vocoder.layout, **{k: not v for k, v in ZLLR_VC_LAYOUT.items()})
    assert not torch.allclose(vocoder.layout.frames(content_frames, f0, speaker),
                              ssl_sas_frames.frames(content_frames, f0, speaker))
    torch.testing.assert_close(vocoder.layout.frames(content_frames, f0, speaker)[-192:, 0],
                               speaker / speaker.norm())


def test_zllr_vc_needs_one_vocoder_folder_or_the_option(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    write_release(tmp_path, vocoder_subdir=ZLLR_VOCODER)
    write_release(tmp_path, vocoder_subdir="other_model")
    with pytest.raises(CheckpointError, match=r"one HiFi-GAN/<model> folder.*'libri_tts_clean_100_fbank_xv_ssl_"
                                              r"freeze_xvnorm', 'other_model'"):
        import_ssl_sas(tmp_path, vocoder_dir=None, layout=ZLLR_VC_LAYOUT)
    assert main(["models", "import", "zllr-vc", str(tmp_path), "--vocoder-dir", f"HiFi-GAN/{ZLLR_VOCODER}"]) == 0
    assert load_model_set("zllr-vc").config["layout"]["l2_normalise_speaker"] is True


def test_zllr_vc_random_init_has_the_layout(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    assert main(["models", "import", "zllr-vc", "--random-init", "--size", "tiny"]) == 0
    model_set = load_model_set("zllr-vc")
    assert model_set.random and model_set.config["layout"]["standardise_content"] is True
    assert model_set.config["generator"]["in_channels"] == 393
    assert main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert "zllr-vc: content, generator, speaker  RANDOM WEIGHTS" in listing
    assert "zllr-vc (installed); also needs flow:" in listing
    assert main(["models", "import", "zllr-vc"]) == 2
    assert "ICASSP 2023 zLLR-VC release" in capsys.readouterr().err
