"""Parity with fairseq itself (the optional ``fairseq`` extra, PyPI ``fairseq-fixed``).

A randomly initialised fairseq ``HubertModel`` is saved the way fairseq saves
``hubert_base_ls960.pt`` (``{"cfg": <omegaconf config>, "model": state}``, weight-norm pair on the
positional convolution, pretraining-only parameters included); our import reads it without
fairseq and without unpickling its config classes, and the SSL-SAS soft content computed with
fairseq's model (``model(wav, mask=False, features_only=True)["x"]``, then SSL-SAS's quirks)
equals ours to 1e-4. Install the extra with ``pip install -e '.[fairseq]'``; without it this
module is not collected (see ``conftest.py``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from voxanon.models.checkpoints import safe_load
from voxanon.models.hubert import SoftContentEncoder


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


def test_soft_content_equals_fairseq_hubert_with_ssl_sas_quirks(tmp_path):
    from omegaconf import OmegaConf

    fairseq_model, config = random_fairseq_hubert()
    state = fairseq_model.state_dict()
    assert "encoder.pos_conv.0.weight_g" in state and "label_embs_concat" in state
    checkpoint = tmp_path / "hubert_base_ls960.pt"
    # fairseq stores its configuration as omegaconf containers (enums as strings).
    model_config = OmegaConf.to_container(OmegaConf.structured(config), enum_to_str=True)
    torch.save({"cfg": OmegaConf.create({"model": model_config, "task": {"label_rate": 50}}), "model": state},
               checkpoint)

    centroids = torch.randn(200, 64)
    hubert_state = safe_load(checkpoint)["model"]
    ours = SoftContentEncoder.from_ssl_sas_state({"W": centroids, **{f"ssl_model.{k}": v
                                                                     for k, v in hubert_state.items()}}).eval()
    wave = torch.randn(1, 16000) * 0.1
    with torch.no_grad():
        x = fairseq_model(wave, mask=False, features_only=True)["x"]
        expected = F.linear(F.normalize(x), F.normalize(centroids))
        expected = F.pad(expected.transpose(1, 2), (0, 1), "replicate").transpose(1, 2)
        got = ours(wave)
    assert got.shape == expected.shape == (1, 50, 200)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
