"""YAAPT F0 with the SSL-SAS settings, both backends: parity with direct pYAAPT calls, frame counts, silence, cache.

The fast backend's parity on speech and synthetic voices, and its batched version: tests/models/test_fast_yaapt.py."""
from __future__ import annotations

import amfm_decompy.basic_tools as basic
import amfm_decompy.pYAAPT as pYAAPT
import numpy as np
import pytest

from tests.helpers.corpora import synthetic_vowel
from voxanon.models.f0 import extract as f0_module
from voxanon.models.f0.extract import F0Cache, yaapt_f0
from voxanon.models.f0.params import DEFAULT_BACKEND, MIN_SAMPLES, PYAAPT_BACKENDS, YaaptParams


def reference_ssl_sas_f0(audio: np.ndarray) -> np.ndarray:
    """SSL-SAS ``get_yaapt_f0`` for one utterance, written out with the published constants."""
    padded = np.pad(audio.astype(np.float64), (160, 160), "constant", constant_values=0)
    pitch = pYAAPT.yaapt(basic.SignalObj(padded, 16000),
                         **{"frame_length": 20.0, "frame_space": 10.0, "nccf_thresh1": 0.25,
                            "tda_frame_length": 25.0})
    return pitch.samp_values


@pytest.mark.parametrize("backend", PYAAPT_BACKENDS)
@pytest.mark.parametrize("f0_hz", [110.0, 210.0])
def test_equals_direct_pyaapt_call(f0_hz, backend):
    audio = synthetic_vowel(f0_hz, [(600, 80), (1400, 120), (2600, 160)], 0.96)
    ours = yaapt_f0(audio, backend=backend)
    reference = reference_ssl_sas_f0(audio)
    np.testing.assert_array_equal(ours, reference.astype(np.float32))
    voiced = ours[ours > 0]
    assert len(voiced) > len(ours) // 2
    assert abs(np.median(voiced) - f0_hz) < 0.1 * f0_hz


@pytest.mark.parametrize("backend", PYAAPT_BACKENDS)
@pytest.mark.parametrize("n_samples", [640, 960, 3200, 16000, 16320])
def test_exactly_one_frame_per_160_samples(n_samples, backend):
    audio = 0.3 * np.random.default_rng(n_samples).standard_normal(n_samples).astype(np.float32)
    assert len(yaapt_f0(audio, backend=backend)) == n_samples // 160


@pytest.mark.parametrize("backend", PYAAPT_BACKENDS)
def test_silence_gives_all_zero_f0(backend):
    f0 = yaapt_f0(np.zeros(16000, dtype=np.float32), backend=backend)
    assert f0.shape == (100,) and f0.dtype == np.float32 and not np.any(f0)


@pytest.mark.parametrize("backend", PYAAPT_BACKENDS)
def test_near_silence_does_not_crash(backend):
    audio = np.zeros(8000, dtype=np.float32)
    audio[4000] = 1e-4
    assert len(yaapt_f0(audio, backend=backend)) == 50


@pytest.mark.parametrize("backend", PYAAPT_BACKENDS)
def test_too_short_input_is_refused(backend):
    with pytest.raises(ValueError, match="too short"):
        yaapt_f0(np.ones(MIN_SAMPLES - 1, dtype=np.float32), backend=backend)


@pytest.mark.parametrize("backend", PYAAPT_BACKENDS)
def test_other_parameters_reach_yaapt(backend):
    audio = synthetic_vowel(250.0, [(600, 80), (1400, 120)], 0.64)
    narrow_range = YaaptParams(f0_min_hz=60.0, f0_max_hz=200.0)
    narrow = yaapt_f0(audio, params=narrow_range, backend=backend)
    assert np.all(narrow <= 200.0 + 1e-3)
    assert not np.array_equal(narrow, yaapt_f0(audio, backend=backend))
    np.testing.assert_array_equal(narrow, yaapt_f0(audio, params=narrow_range, backend="pyaapt"))


def test_cache_computes_each_utterance_once(tmp_path, monkeypatch):
    audio = synthetic_vowel(120.0, [(600, 80), (1400, 120)], 0.64)
    cache = F0Cache(tmp_path / "f0")
    first = cache.f0(audio)
    calls = []
    monkeypatch.setattr(f0_module, "yaapt_f0", lambda *a, **k: calls.append(a) or np.zeros(1))
    second = cache.f0(audio)
    np.testing.assert_array_equal(first, second)
    assert not calls
    assert len(list((tmp_path / "f0").glob("*.npy"))) == 1
    cache.f0(audio * 0.5)
    assert len(calls) == 1
    cache.f0(audio, backend="pyaapt" if DEFAULT_BACKEND == "fast" else "fast")  # another backend: another track
    assert len(calls) == 2
