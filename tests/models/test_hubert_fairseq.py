"""Parity with fairseq itself (the optional ``fairseq`` extra, PyPI ``fairseq-fixed``).

A randomly initialised fairseq ``HubertModel`` is saved the way fairseq saves
``hubert_base_ls960.pt`` (``{"cfg": <omegaconf config>, "model": state}``, weight-norm pair on the
positional convolution, pretraining-only parameters included); our import reads it without
fairseq and without unpickling its config classes, and the SSL-SAS soft content computed with
fairseq's model (``model(wav, mask=False, features_only=True)["x"]``, then SSL-SAS's quirks)
equals ours to 1e-4. Install the extra with ``pip install -e '.[fairseq]'``; without it this
module is not collected (see ``conftest.py``).

A release is also written through fairseq's and speechbrain's own modules, in the module tree of
SSL-SAS's ``latentGenerator`` (jik876 generator, ``latent_encoder`` = ``SoftPredictor`` over the
fairseq HuBERT after ``remove_pretraining_modules()``, ``fbank``, ``mean_var_norm``, ``xv_model``),
saved as its training saves ``g_*`` files, and imported with ``voxanon models import ssl-sas``.
"""
from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from torch import nn

from tests.reference.hifigan import Generator as ReferenceGenerator
from tests.helpers.ssl_sas_release import ECAPA, RELEASE_CONFIG, SSL_SAS_VOCODER
from voxanon.models.checkpoints.safe import safe_load
from voxanon.models.checkpoints.ssl_sas import soft_content_from_ssl_sas_state
from voxanon.pipeline.cli import main
from voxanon.pipeline.systems.ssl_sas.loader import load_ssl_sas_models


def random_fairseq_hubert(seed: int = 0):
    from fairseq.data import Dictionary
    from fairseq.models.hubert.hubert import HubertConfig, HubertModel
    from fairseq.tasks.hubert_pretraining import HubertPretrainingConfig

    torch.manual_seed(seed)
    config = HubertConfig(encoder_layers=2, encoder_embed_dim=64, encoder_ffn_embed_dim=96,
                          encoder_attention_heads=1, conv_feature_layers="[(32,10,5)] + [(32,3,2)]*4 + [(32,2,2)]*2",
                          conv_pos=16, conv_pos_groups=4, final_dim=16, label_rate=50)
    labels = Dictionary()
    for unit in range(20):
        labels.add_symbol(str(unit))
    model = HubertModel(config, HubertPretrainingConfig(label_rate=50, sample_rate=16000), [labels])
    for name, parameter in model.named_parameters():
        if "layer_norm" in name:
            parameter.data.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
    return model.eval(), config


def save_fairseq_checkpoint(model, config, path) -> None:
    """As fairseq stores ``hubert_base_ls960.pt``: omegaconf ``cfg`` (enums as strings) and the ``model`` state."""
    from omegaconf import OmegaConf

    model_config = OmegaConf.to_container(OmegaConf.structured(config), enum_to_str=True)
    torch.save({"cfg": OmegaConf.create({"model": model_config, "task": {"label_rate": 50}}),
                "model": model.state_dict()}, path)


class SoftPredictor(nn.Module):
    """SSL-SAS's ``SoftPredictor`` module tree: the fairseq model as ``ssl_model`` and 200 centroids ``W``."""

    def __init__(self, ssl_model: nn.Module, hidden: int):
        super().__init__()
        self.ssl_model = ssl_model
        self.W = nn.Parameter(torch.randn(200, hidden))


class LatentGenerator(ReferenceGenerator):
    """SSL-SAS's ``latentGenerator`` module tree (its ``models_test.py``, ``hubert_soft`` + ``fbank`` case)."""

    def __init__(self, config: dict, ssl_model: nn.Module, hidden: int):
        from speechbrain.lobes.features import Fbank
        from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
        from speechbrain.processing.features import InputNormalization

        super().__init__(config, config["model_in_dim"])
        self.latent_encoder = SoftPredictor(ssl_model, hidden)
        self.fbank = Fbank(n_mels=80)
        self.mean_var_norm = InputNormalization(norm_type="sentence", std_norm=False)
        self.xv_model = ECAPA_TDNN(80, lin_neurons=192, **ECAPA)


def write_ssl_sas_release(root, ssl_model: nn.Module, hidden: int) -> LatentGenerator:
    """``torch.save({'generator': latentGenerator.state_dict()})`` as SSL-SAS's ``train.py`` saves ``g_*``, with
    the release's ``config.json``, ``HuBERT_soft/soft_model.pt`` and ``ECAPA-TDNN/embedding_model.ckpt``."""
    model = LatentGenerator(RELEASE_CONFIG, ssl_model, hidden).eval()
    folder = root / "HiFi-GAN" / SSL_SAS_VOCODER
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(RELEASE_CONFIG, indent=4))
    torch.save({"generator": model.state_dict()}, folder / "g_00100000")
    (root / "HuBERT_soft").mkdir()
    torch.save(model.latent_encoder.state_dict(), root / "HuBERT_soft" / "soft_model.pt")
    (root / "ECAPA-TDNN").mkdir()
    torch.save(model.xv_model.state_dict(), root / "ECAPA-TDNN" / "embedding_model.ckpt")
    return model


def test_release_saved_through_fairseq_and_speechbrain_modules_imports(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    fairseq_model, config = random_fairseq_hubert(seed=1)
    save_fairseq_checkpoint(fairseq_model, config, tmp_path / "hubert_base_ls960.pt")
    fairseq_model.remove_pretraining_modules()  # as latentGenerator does before wrapping it
    reference = write_ssl_sas_release(tmp_path / "release", fairseq_model, config.encoder_embed_dim)
    saved = safe_load(tmp_path / "release" / "HiFi-GAN" / SSL_SAS_VOCODER / "g_00100000")["generator"]
    assert {"fbank.compute_deltas.kernel", "latent_encoder.ssl_model.mask_emb",
            "latent_encoder.ssl_model.label_embs_concat", "conv_pre.weight_g", "xv_model.fc.conv.weight"} <= set(saved)
    assert not any(key.startswith("latent_encoder.ssl_model.final_proj.") for key in saved)

    assert main(["models", "import", "ssl-sas", str(tmp_path / "release"),
                 "--hubert", str(tmp_path / "hubert_base_ls960.pt")]) == 0
    content, speaker, vocoder = load_ssl_sas_models("ssl-sas")
    wave = torch.randn(1, 16000) * 0.1
    frames = torch.randn(1, 393, 12)
    with torch.no_grad():
        x = reference.latent_encoder.ssl_model(wave, mask=False, features_only=True)["x"]
        expected = F.linear(F.normalize(x), F.normalize(reference.latent_encoder.W))
        expected = F.pad(expected.transpose(1, 2), (0, 1), "replicate").transpose(1, 2)
        torch.testing.assert_close(content(wave), expected, atol=1e-4, rtol=1e-4)
        feats = reference.mean_var_norm(reference.fbank(wave), torch.ones(1))
        torch.testing.assert_close(speaker(wave), reference.xv_model(feats)[:, 0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(vocoder.generator(frames), ReferenceGenerator.forward(reference, frames),
                                   atol=1e-5, rtol=0)


def test_soft_content_equals_fairseq_hubert_with_ssl_sas_quirks(tmp_path):
    fairseq_model, config = random_fairseq_hubert()
    state = fairseq_model.state_dict()
    assert "encoder.pos_conv.0.weight_g" in state and "label_embs_concat" in state
    checkpoint = tmp_path / "hubert_base_ls960.pt"
    save_fairseq_checkpoint(fairseq_model, config, checkpoint)

    centroids = torch.randn(200, 64)
    hubert_state = safe_load(checkpoint)["model"]
    ours = soft_content_from_ssl_sas_state({"W": centroids, **{f"ssl_model.{k}": v
                                                                     for k, v in hubert_state.items()}}).eval()
    wave = torch.randn(1, 16000) * 0.1
    with torch.no_grad():
        x = fairseq_model(wave, mask=False, features_only=True)["x"]
        expected = F.linear(F.normalize(x), F.normalize(centroids))
        expected = F.pad(expected.transpose(1, 2), (0, 1), "replicate").transpose(1, 2)
        got = ours(wave)
    assert got.shape == expected.shape == (1, 50, 200)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
