"""Audio loading: every bad-input case is rejected with a message naming the file."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import soundfile

from voxanon.data_prep.audio import AudioError, check_wav, load_audio, write_wav


def _write(path, samples, rate=16000, subtype="PCM_16"):
    soundfile.write(path, samples, rate, subtype=subtype)
    return path


@pytest.fixture
def tone():
    return (0.3 * np.sin(2 * np.pi * 220 * np.arange(16000) / 16000)).astype(np.float32)


def test_reads_mono_float32(tmp_path, tone):
    audio = load_audio(_write(tmp_path / "a.wav", tone), 16000)
    assert audio.samples.dtype == np.float32 and audio.samples.shape == (16000,)
    assert np.allclose(audio.samples, tone, atol=1e-4) and audio.notes() == []


@pytest.mark.parametrize("case, content, reason", [
    ("missing", None, "missing file"),
    ("corrupt", b"RIFF....WAVEgarbage", "unreadable audio"),
    ("text", b"hello, not audio", "unreadable audio"),
])
def test_missing_and_unreadable(tmp_path, case, content, reason):
    path = tmp_path / f"{case}.wav"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(AudioError, match=reason) as caught:
        load_audio(path, 16000)
    assert str(path) in str(caught.value)


def test_empty(tmp_path):
    path = _write(tmp_path / "empty.wav", np.zeros(0, dtype=np.float32))
    with pytest.raises(AudioError, match=r"empty.wav: empty"):
        load_audio(path, 16000)


def test_all_zero(tmp_path):
    path = _write(tmp_path / "silent.wav", np.zeros(8000, dtype=np.float32))
    with pytest.raises(AudioError, match=r"silent.wav: silent"):
        load_audio(path, 16000)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf(tmp_path, tone, bad):
    samples = tone.copy()
    samples[100:103] = bad
    path = _write(tmp_path / "bad.wav", samples, subtype="FLOAT")
    with pytest.raises(AudioError, match=r"bad.wav: contains 3 NaN or Inf samples"):
        load_audio(path, 16000)


def test_too_long(tmp_path, tone):
    path = _write(tmp_path / "long.wav", np.tile(tone, 3))
    with pytest.raises(AudioError, match=r"long.wav: too long: 3.0 s, the maximum is 2 s"):
        load_audio(path, 16000, max_seconds=2)
    assert load_audio(path, 16000, max_seconds=5).seconds == pytest.approx(3.0)


def test_resamples_and_downmixes_with_a_warning(tmp_path, tone, caplog):
    stereo = np.stack([tone, tone * 0.5], axis=1)
    path = _write(tmp_path / "stereo44.wav", np.repeat(stereo, 2, axis=0)[:32000], rate=32000)
    with caplog.at_level(logging.WARNING):
        audio = load_audio(path, 16000)
    assert "stereo44.wav: 2 channels, down-mixed to mono" in caplog.text
    assert audio.samples.shape == (16000,) and audio.source_rate == 32000
    assert audio.notes() == ["down-mixed 2 channels to mono", "resampled 32000 Hz to 16000 Hz"]
    spectrum = np.abs(np.fft.rfft(audio.samples))
    assert abs(np.argmax(spectrum) - 220) <= 2


def test_pipe_entries_run_only_when_allowed(tmp_path, tone):
    path = _write(tmp_path / "a.wav", tone)
    entry = f"cat {path} |"
    with pytest.raises(AudioError, match="only with --allow-pipes"):
        load_audio(entry, 16000)
    assert np.allclose(load_audio(entry, 16000, allow_pipe=True).samples, tone, atol=1e-4)
    with pytest.raises(AudioError, match="command failed with exit code"):
        load_audio("false |", 16000, allow_pipe=True)


def test_write_wav_is_16_bit_and_checkable(tmp_path, tone):
    target = tmp_path / "out" / "x.wav"
    write_wav(target, tone, 16000)
    assert check_wav(target, 16000, n_samples=16000)
    assert not check_wav(target, 22050) and not check_wav(tmp_path / "nope.wav", 16000)
    assert list((tmp_path / "out").iterdir()) == [target]
    with pytest.raises(ValueError, match="NaN or Inf"):
        write_wav(target, np.full(10, np.nan), 16000)
