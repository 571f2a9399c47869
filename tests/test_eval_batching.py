"""The evaluation's models on a device: padded batches by length whose every item equals its one-at-a-time
result (wav2vec2 CTC ASR, SER), each model's weights loaded once, and the device a model runs on.

No GPU here: the padded-batch functions the CUDA path runs are run on the CPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from speechbrain_layouts import write_asr_dir, write_ser_dir
from voxanon.models.asr import Wav2Vec2CTCASR, load_asr

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RNG = np.random.default_rng(11)
# Lengths chosen so that padded groups hold several utterances of different lengths (up to 25 % padding).
LENGTHS = (16000, 13000, 12400, 9000, 7200, 6400)
SIGNALS = [(0.3 * np.sin(2 * np.pi * (150 + 170 * k) * np.arange(n) / 16000)
            + 0.05 * RNG.standard_normal(n)).astype(np.float32) for k, n in enumerate(LENGTHS)]


@pytest.fixture(scope="module")
def asr_dir(tmp_path_factory):
    return write_asr_dir(tmp_path_factory.mktemp("asr") / "asr-wav2vec2-librispeech")


@pytest.fixture(scope="module")
def ser_dir(tmp_path_factory):
    return write_ser_dir(tmp_path_factory.mktemp("ser") / "fold_1")


def padded(signals):
    wavs = torch.zeros(len(signals), max(len(s) for s in signals))
    for row, signal in enumerate(signals):
        wavs[row, :len(signal)] = torch.from_numpy(signal)
    return wavs, torch.tensor([len(s) for s in signals])


def test_wav2vec2_ctc_padded_batch_equals_each_utterance_alone(asr_dir):
    asr = load_asr(asr_dir)
    assert isinstance(asr, Wav2Vec2CTCASR)
    wavs, samples = padded(SIGNALS)
    with torch.inference_mode():
        batched = asr._model(wavs, samples)
        frames = asr._model.wav2vec2.frame_counts(samples)
        for row, signal in enumerate(SIGNALS):
            alone = asr._model(torch.from_numpy(signal)[None])[0]
            assert alone.shape[0] == frames[row]
            assert torch.allclose(batched[row, :frames[row]], alone, atol=1e-5), \
                float((batched[row, :frames[row]] - alone).abs().max())
    asr.batch_size = 4
    assert asr.transcribe_many(SIGNALS) == [asr.transcribe(signal) for signal in SIGNALS]


def test_wav2vec2_ctc_loader_loads_the_wav2vec2_weights_once(asr_dir, monkeypatch):
    loads = []
    original = torch.nn.Module.load_state_dict

    def counting(module, state, *args, **kwargs):
        loads.append(sorted(state))
        return original(module, state, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "load_state_dict", counting)
    load_asr(asr_dir)
    wav2vec2_loads = [keys for keys in loads if any("feature_extractor" in key for key in keys)]
    assert len(wav2vec2_loads) == 1, [keys[:2] for keys in wav2vec2_loads]


def test_ser_padded_batches_equal_each_utterance_alone(ser_dir, monkeypatch):
    from voxanon.models.ser import EmotionClassifier

    classifier = EmotionClassifier(ser_dir)
    # The SER layout is base-style wav2vec2: a group-norm feature extractor, normalised over each item's frames.
    assert classifier._model.wav2vec2.model.config.feat_extract_norm == "group"
    alone = np.concatenate([classifier.log_probabilities([signal]) for signal in SIGNALS])
    batch_sizes = []
    forward = type(classifier._model).forward

    def counting(module, wav, samples=None):
        batch_sizes.append(wav.shape[0])
        return forward(module, wav, samples)

    monkeypatch.setattr(type(classifier._model), "forward", counting)
    batched = classifier.log_probabilities(SIGNALS)
    assert max(batch_sizes) > 1 and sum(batch_sizes) == len(SIGNALS)
    np.testing.assert_allclose(batched, alone, atol=1e-5)
    assert np.ptp(batched, axis=0).max() > 1e-2  # the scores depend on the input
