"""Our ECAPA-TDNN and Fbank front end (``voxanon.models.nets.ecapa``) against speechbrain's own classes.

speechbrain is the reference here and is imported by this test only: random weights with
randomised batch-norm statistics and affine parameters, so that a missing or misplaced norm,
padding or pooling detail changes the vectors far beyond float rounding.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from speechbrain.lobes.features import Fbank as SpeechbrainFbank
from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
from speechbrain.processing.features import InputNormalization

from tests.helpers.corpora import synthetic_vowel
from voxanon.models.nets.ecapa import Fbank, sentence_mean_normalised
from voxanon.models.checkpoints.ecapa import ecapa_config_from_state, ecapa_with_weights
from voxanon.models.nets.speaker import SPKREC_ECAPA_VOXCELEB, SSL_SAS_ECAPA, EcapaConfig, EcapaEncoder, ecapa_tdnn

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RELATIVE_TOLERANCE = 1e-4

GEOMETRIES = {  # other sizes that EcapaConfig.from_state reads off a checkpoint
    "shortcut, 40 mels": EcapaConfig(channels=(32, 48, 48, 48, 144), kernel_sizes=(3, 5, 3, 3, 1),
                                     dilations=(1, 3, 2, 1, 1), attention_channels=16, se_channels=8, res2net_scale=4,
                                     lin_neurons=24, n_mels=40),
    "scale 2, wide mfa kernel": EcapaConfig(channels=(24, 24, 24, 24, 72), kernel_sizes=(5, 3, 3, 3, 3),
                                            dilations=(1, 2, 3, 4, 2), attention_channels=8, se_channels=8,
                                            res2net_scale=2),
}
BLOCK_COUNTS = {  # speechbrain's ECAPA_TDNN with fewer or more blocks (a training recipe may set them)
    "four blocks": EcapaConfig(channels=(16, 16, 16, 48), kernel_sizes=(5, 3, 3, 1), dilations=(1, 2, 3, 1),
                               attention_channels=8, se_channels=4, res2net_scale=4, lin_neurons=32),
    "six blocks": EcapaConfig(channels=(16, 16, 16, 16, 16, 48), kernel_sizes=(5, 3, 3, 3, 3, 1),
                              dilations=(1, 2, 3, 4, 5, 1), attention_channels=8, se_channels=4, res2net_scale=8),
}
OTHER_SIZES = {**GEOMETRIES, **BLOCK_COUNTS}


def speechbrain_ecapa(config: EcapaConfig, seed: int = 0) -> ECAPA_TDNN:
    """speechbrain's ECAPA_TDNN of ``config``'s sizes, random weights and batch-norm statistics, in eval mode."""
    torch.manual_seed(seed)
    model = ECAPA_TDNN(config.n_mels, lin_neurons=config.lin_neurons, channels=list(config.channels),
                       kernel_sizes=list(config.kernel_sizes), dilations=list(config.dilations),
                       attention_channels=config.attention_channels, res2net_scale=config.res2net_scale,
                       se_channels=config.se_channels)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.normal_(0.0, 0.3)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.normal_(0.0, 0.2)
            module.num_batches_tracked.fill_(1000)
    return model.eval()


def speechbrain_embedding(model: ECAPA_TDNN, wave: np.ndarray, n_mels: int = 80) -> torch.Tensor:
    """Fbank -> sentence mean normalisation -> ECAPA_TDNN, as SSL-SAS ``extract_emb.py`` and speechbrain's
    ``EncoderClassifier.encode_batch`` compute it."""
    wav = torch.from_numpy(wave)[None]
    with torch.no_grad():
        feats = InputNormalization(norm_type="sentence", std_norm=False)(SpeechbrainFbank(n_mels=n_mels)(wav),
                                                                         torch.ones(1))
        return model(feats, torch.ones(1))[0, 0]


def relative_difference(ours, reference) -> float:
    ours, reference = torch.as_tensor(ours), torch.as_tensor(reference)
    return float((ours - reference).abs().max() / reference.abs().max())


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    return synthetic_vowel(120 + 40 * seed, [(650, 80), (1300, 120), (2600, 160)], seconds, seed=seed)


@pytest.mark.parametrize("config", [SSL_SAS_ECAPA, SPKREC_ECAPA_VOXCELEB, *OTHER_SIZES.values()],
                         ids=["ssl-sas", "spkrec-ecapa-voxceleb", *OTHER_SIZES])
def test_state_dict_keys_shapes_and_initialisation_are_speechbrains(config):
    reference = speechbrain_ecapa(config, seed=3).state_dict()
    torch.manual_seed(3)
    ours = ecapa_tdnn(config).state_dict()
    assert list(ours) == list(reference)
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in reference.items()}
    # The same construction order: a seed draws speechbrain's random weights (random model sets stay as they were).
    assert all(torch.equal(ours[k], reference[k]) for k in ours if "norm" not in k)
    if config not in BLOCK_COUNTS.values():
        assert ecapa_config_from_state(reference, config.embedding_mean_norm, config.dilations) == config


@pytest.mark.parametrize("seconds", [1.0, 5.0])
@pytest.mark.parametrize("config", [SSL_SAS_ECAPA, SPKREC_ECAPA_VOXCELEB], ids=["ssl-sas", "spkrec-ecapa-voxceleb"])
def test_vectors_equal_speechbrains(config, seconds):
    reference = speechbrain_ecapa(config, seed=1)
    mean = torch.randn(config.lin_neurons) if config.embedding_mean_norm else None
    encoder = ecapa_with_weights(config, reference.state_dict(), mean)
    waves = [speech_like(seconds, seed=0), speech_like(seconds + 0.37, seed=1)]
    ours = encoder.embed(waves)
    for wave, vector in zip(waves, ours):
        expected = speechbrain_embedding(reference, wave)
        if mean is not None:
            expected = expected - mean
        assert relative_difference(vector, expected) < RELATIVE_TOLERANCE
    assert relative_difference(ours[0], ours[1]) > 0.01


@pytest.mark.parametrize("name", list(OTHER_SIZES))
def test_other_sizes_equal_speechbrain(name):
    config = OTHER_SIZES[name]
    reference = speechbrain_ecapa(config, seed=2)
    encoder = ecapa_with_weights(config, reference.state_dict())
    wave = speech_like(1.0, seed=2)
    vector = encoder.embed([wave])[0]
    assert relative_difference(vector, speechbrain_embedding(reference, wave, config.n_mels)) < RELATIVE_TOLERANCE


@pytest.mark.parametrize("n_mels", [80, 40])
def test_fbank_and_sentence_normalisation_equal_speechbrains(n_mels):
    # The second starts silent: its energies are clamped and floored 80 dB below its maximum.
    quiet_start = np.concatenate([np.zeros(4000, dtype=np.float32), 0.01 * speech_like(0.75, seed=4)])
    waves = torch.from_numpy(np.stack([speech_like(1.0, seed=3), quiet_start]))
    reference = SpeechbrainFbank(n_mels=n_mels)(waves)
    ours = Fbank(n_mels)(waves)
    assert ours.shape == reference.shape == (2, 101, n_mels)
    assert float((ours - reference).abs().max()) <= 1e-4  # dB
    normalised = InputNormalization(norm_type="sentence", std_norm=False)(reference, torch.ones(2))
    assert float((sentence_mean_normalised(reference) - normalised).abs().max()) <= 1e-5


def test_gradients_through_the_encoder_equal_speechbrains():
    """Vocoder training back-propagates its speaker loss through the frozen encoder into generated audio."""
    config = GEOMETRIES["shortcut, 40 mels"]
    reference = speechbrain_ecapa(config, seed=4).requires_grad_(False)
    encoder = ecapa_with_weights(config, reference.state_dict()).requires_grad_(False)
    waves = torch.from_numpy(np.stack([speech_like(0.5, seed=5), speech_like(0.5, seed=6)]))
    weights = torch.randn(2, config.lin_neurons)
    gradients = []
    for embed in (lambda w: encoder(w),
                  lambda w: reference(InputNormalization(norm_type="sentence", std_norm=False)(
                      SpeechbrainFbank(n_mels=config.n_mels)(w), torch.ones(2)), torch.ones(2))[:, 0]):
        audio = waves.clone().requires_grad_(True)
        (embed(audio) * weights).sum().backward()
        gradients.append(audio.grad)
    assert relative_difference(gradients[0], gradients[1]) < 1e-3


def test_too_short_for_the_reflect_padding_is_an_error():
    encoder = EcapaEncoder(EcapaConfig(channels=(16, 16, 16, 16, 48), attention_channels=8, se_channels=8,
                                       res2net_scale=4))
    assert encoder.embed([np.full(640, 0.1, dtype=np.float32)]).shape == (1, 192)  # 5 frames: the chain's minimum
    with pytest.raises(ValueError, match="reflect padding of 4 frames needs more than 4 frames, got 4"):
        encoder.embed([np.full(480, 0.1, dtype=np.float32)])


def test_speaker_stage_loads_and_embeds_without_speechbrain(voxanon_home):
    """The speaker stage's loader (:func:`load_model`) and an embedding import no speechbrain (0.3-0.7 s of
    start-up)."""
    from voxanon.pipeline.cli import main

    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    code = """
import sys
import numpy as np
from voxanon.pipeline.systems.ssl_sas.loader import load_model
vectors = load_model("ssl-sas", "speaker").embed([np.full(16000, 0.01, dtype=np.float32)])
assert vectors.shape == (1, 192) and np.isfinite(vectors).all()
print(sorted(name for name in sys.modules if name.split(".")[0] == "speechbrain"))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "[]"
