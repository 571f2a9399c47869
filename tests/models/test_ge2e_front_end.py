"""GE2E's front end without librosa (voxanon.models.nets.ge2e) against Resemblyzer's own, which calls librosa:
equal bit for bit."""
import subprocess
import sys

import numpy as np
import pytest
from resemblyzer import audio, preprocess_wav

from voxanon.models.nets.ge2e import SAMPLE_RATE, mel_spectrogram, resemblyzer_preprocess


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mel_spectrogram_is_resemblyzers(dtype):
    rng = np.random.default_rng(0)
    for length in (1, 159, 160, 399, 400, 401, 4000, 25_600, 48_123, 160_000):
        wave = (0.3 * rng.standard_normal(length)).astype(dtype)
        expected = audio.wav_to_mel_spectrogram(wave)
        ours = mel_spectrogram(wave)
        assert ours.dtype == expected.dtype and ours.shape == expected.shape, length
        assert np.array_equal(ours, expected), length


def test_preprocessing_is_resemblyzers():
    rng = np.random.default_rng(1)
    t = np.arange(3 * SAMPLE_RATE) / SAMPLE_RATE
    speechlike = (np.sin(2 * np.pi * 150 * t) * (np.sin(2 * np.pi * 0.7 * t) > 0)).astype(np.float32)
    for wave in (speechlike, 0.01 * speechlike, (0.2 * rng.standard_normal(40_000)).astype(np.float32),
                 np.zeros(16_000, dtype=np.float32)):
        with np.errstate(all="ignore"):  # Resemblyzer's volume normalisation of silence divides by zero
            assert np.array_equal(resemblyzer_preprocess(wave), preprocess_wav(wave, source_sr=SAMPLE_RATE),
                                  equal_nan=True)


def test_preprocessing_refuses_what_librosa_refuses():
    with pytest.raises(ValueError, match="not finite"):
        resemblyzer_preprocess(np.array([0.0, np.nan, 0.1], dtype=np.float32))
    with pytest.raises(ValueError, match="floating"):
        resemblyzer_preprocess(np.zeros(100, dtype=np.int16))


def test_embedding_imports_neither_librosa_nor_scipy_signal():
    code = ("import sys, numpy as np; from voxanon.models.nets.ge2e import GE2EEncoder; "
            "GE2EEncoder().embed([np.random.default_rng(0).standard_normal(32000).astype(np.float32)]); "
            "print(sorted(m for m in sys.modules if m.startswith(('librosa.core', 'librosa.feature', "
            "'librosa.filters', 'scipy.signal'))))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]"
