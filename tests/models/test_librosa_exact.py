"""voxanon.models.dsp.librosa_exact against librosa itself: equal bit for bit."""
import numpy as np
import pytest
import librosa

from voxanon.models.dsp.librosa_exact import hann_window, slaney_mel_basis, stft


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pad_mode", ["constant", "reflect"])
@pytest.mark.parametrize("n_fft, hop", [(400, 160), (1024, 256)])
def test_stft_is_librosas(dtype, pad_mode, n_fft, hop):
    rng = np.random.default_rng(n_fft)
    for length in (n_fft // 2 + 1, n_fft, 4_001, 48_123):
        audio = (0.3 * rng.standard_normal(length)).astype(dtype)
        expected = librosa.stft(audio, n_fft=n_fft, hop_length=hop, pad_mode=pad_mode).T
        ours = stft(audio, n_fft, hop, pad_mode)
        assert ours.dtype == expected.dtype and np.array_equal(ours, expected), length


def test_stft_refuses_other_padding():
    with pytest.raises(ValueError, match="pad_mode"):
        stft(np.zeros(1000, dtype=np.float32), 400, 160, "edge")


@pytest.mark.parametrize("sample_rate, n_fft, n_mels, f_min, f_max", [
    (16000, 400, 40, 0.0, None), (16000, 1024, 80, 40.0, 8000.0), (22050, 1024, 80, 0.0, None),
    (24000, 2048, 128, 20.0, 11000.0), (8000, 256, 23, 300.0, 3400.0)])
def test_slaney_mel_basis_is_librosas(sample_rate, n_fft, n_mels, f_min, f_max):
    expected = librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=f_min, fmax=f_max)
    ours = slaney_mel_basis(sample_rate, n_fft, n_mels, f_min, f_max)
    assert ours.dtype == expected.dtype and np.array_equal(ours, expected)


def test_hann_window_is_librosas():
    assert np.array_equal(hann_window(400), librosa.filters.get_window("hann", 400, fftbins=True))
