"""ECAPA speaker encoder configs and loading, against speechbrain's modules used directly."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from speechbrain.lobes.features import Fbank
from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
from speechbrain.processing.features import InputNormalization

from tests.helpers.corpora import synthetic_vowel
from voxanon.models.checkpoints.safe import CheckpointError
from voxanon.models.checkpoints.ecapa import ecapa_from_directory
from voxanon.models.nets.speaker import SPKREC_ECAPA_VOXCELEB, SSL_SAS_ECAPA, EcapaConfig

TINY = dict(channels=(32, 32, 32, 32, 96), attention_channels=16, se_channels=16, res2net_scale=4)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def speechbrain_model(config: EcapaConfig, seed: int) -> ECAPA_TDNN:
    torch.manual_seed(seed)
    model = ECAPA_TDNN(80, lin_neurons=192, channels=list(config.channels), attention_channels=config.attention_channels,
                       se_channels=config.se_channels, res2net_scale=config.res2net_scale)
    for name, buffer in model.named_buffers():
        if name.endswith("running_mean"):
            buffer.normal_(0, 0.1)
    return model.eval()


def reference_embedding(model: ECAPA_TDNN, wave: np.ndarray) -> torch.Tensor:
    """SSL-SAS ``extract_emb.py``: Fbank(80) -> sentence mean norm -> ECAPA -> raw fc output."""
    wav = torch.from_numpy(wave)[None]
    feats = Fbank(n_mels=80)(wav)
    feats = InputNormalization(norm_type="sentence", std_norm=False)(feats, torch.ones(1))
    with torch.no_grad():
        return model(feats, torch.ones(1))[0, 0]


def test_ssl_sas_style_embedding_equals_speechbrain(tmp_path):
    config = EcapaConfig(**TINY)
    model = speechbrain_model(config, seed=0)
    torch.save(model.state_dict(), tmp_path / "embedding_model.ckpt")
    encoder = ecapa_from_directory(tmp_path, config)
    waves = [synthetic_vowel(f0, [(600, 80), (1500, 120)], 0.7 + 0.2 * i, seed=i) for i, f0 in enumerate((110, 210))]
    ours = encoder.embed(waves)
    assert ours.shape == (2, 192) and ours.dtype == np.float32
    for wave, vector in zip(waves, ours):
        np.testing.assert_allclose(vector, reference_embedding(model, wave).numpy(), atol=1e-5, rtol=1e-5)
    assert np.linalg.norm(ours[0] - ours[1]) > 1e-3


def test_embedding_mean_norm_as_speechbrain_global_normalisation(tmp_path):
    config = EcapaConfig(**TINY, embedding_mean_norm=True)
    model = speechbrain_model(config, seed=1)
    torch.save(model.state_dict(), tmp_path / "embedding_model.ckpt")
    stats = {"count": 1000, "glob_mean": torch.randn(192), "glob_std": torch.rand(192) + 0.5}
    torch.save(stats, tmp_path / "mean_var_norm_emb.ckpt")
    encoder = ecapa_from_directory(tmp_path, config)
    wave = synthetic_vowel(150, [(700, 80), (1200, 120)], 0.8)
    norm = InputNormalization(norm_type="global", std_norm=False).eval()
    norm._load_statistics_dict(stats)
    expected = norm(reference_embedding(model, wave)[None, None], torch.ones(1))[0, 0]
    np.testing.assert_allclose(encoder.embed([wave])[0], expected.numpy(), atol=1e-5, rtol=1e-5)


def test_published_configs():
    assert SSL_SAS_ECAPA.channels == (512, 512, 512, 512, 1536) and not SSL_SAS_ECAPA.embedding_mean_norm
    assert SPKREC_ECAPA_VOXCELEB.channels == (1024, 1024, 1024, 1024, 3072)
    assert SPKREC_ECAPA_VOXCELEB.embedding_mean_norm
    assert EcapaConfig.from_dict(SPKREC_ECAPA_VOXCELEB.to_dict()) == SPKREC_ECAPA_VOXCELEB


def test_wrong_channels_and_missing_files_are_named(tmp_path):
    model = speechbrain_model(EcapaConfig(**TINY), seed=0)
    torch.save(model.state_dict(), tmp_path / "embedding_model.ckpt")
    wider = EcapaConfig(**{**TINY, "channels": (48, 48, 48, 48, 144)})
    with pytest.raises(CheckpointError, match="channels"):
        ecapa_from_directory(tmp_path, wider)
    with pytest.raises(CheckpointError, match="mean_var_norm_emb.ckpt"):
        ecapa_from_directory(tmp_path, EcapaConfig(**TINY, embedding_mean_norm=True))
    with pytest.raises(CheckpointError, match="embedding_model.ckpt"):
        ecapa_from_directory(tmp_path / "absent", EcapaConfig(**TINY))
