"""voxanon.models.dsp.scipy_exact against SciPy itself: equal bit for bit, on the cases YAAPT calls and beyond."""
import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy.interpolate import pchip as scipy_pchip
from scipy.signal import firwin, lfilter
from scipy.signal import medfilt as scipy_medfilt
from scipy.signal.windows import hann as scipy_hann
from scipy.signal.windows import kaiser as scipy_kaiser

from voxanon.models.dsp import scipy_exact
from voxanon.models.f0.yaapt import fir_filtered


@pytest.mark.parametrize("fs", [8000.0, 11025.0, 16000.0, 22050.0, 24000.0, 44100.0, 48000.0])
@pytest.mark.parametrize("numtaps", [3, 51, 151])
def test_firwin_bandpass_is_scipys(fs, numtaps):
    low, high = 50 / (fs / 2), 1500 / (fs / 2)
    assert np.array_equal(scipy_exact.firwin_bandpass(numtaps, low, high),
                          firwin(numtaps, [low, high], pass_zero=False))


def test_firwin_bandpass_refuses_what_it_does_not_compute():
    with pytest.raises(ValueError, match="odd"):
        scipy_exact.firwin_bandpass(150, 0.1, 0.2)
    with pytest.raises(ValueError, match="band edges"):
        scipy_exact.firwin_bandpass(151, 0.2, 0.1)


@pytest.mark.parametrize("size", [0, 1, 2, 3, 202, 402, 1000, 1602])
def test_windows_are_scipys(size):
    assert np.array_equal(scipy_exact.hann(size), scipy_hann(size))
    assert np.array_equal(scipy_exact.kaiser(size, 0.5), scipy_kaiser(size, 0.5))
    assert np.array_equal(scipy_exact.kaiser(size, 8.6), scipy_kaiser(size, 8.6))


@pytest.mark.parametrize("kernel", [1, 3, 5, 7])
def test_medfilt_is_scipys(kernel):
    rng = np.random.default_rng(kernel)
    for length in (1, 2, kernel - 1, kernel, 10, 257):
        if length < 1:
            continue
        values = rng.uniform(60, 400, length) * (rng.random(length) > 0.3)  # zeros as unvoiced frames have
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns where the kernel is longer than the values
            expected = scipy_medfilt(values, kernel)
        assert np.array_equal(scipy_exact.medfilt(values, kernel), expected), (kernel, length)
    with_nan = np.array([3.0, np.nan, 1.0, 2.0, np.nan, 7.0, 4.0])
    assert np.array_equal(scipy_exact.medfilt(with_nan, 3), scipy_medfilt(with_nan, 3), equal_nan=True)
    ties = np.array([5.0, 5.0, 0.0, 5.0, 1.0, 1.0, 1.0])
    assert np.array_equal(scipy_exact.medfilt(ties, 5), scipy_medfilt(ties, 5))


def test_medfilt_refuses_an_even_kernel():
    with pytest.raises(ValueError, match="odd"):
        scipy_exact.medfilt(np.ones(5), 4)


def test_pchip_is_scipys():
    rng = np.random.default_rng(0)
    for trial in range(200):
        n_frames = int(rng.integers(2, 400))
        track = rng.uniform(60, 400, n_frames) * (rng.random(n_frames) > rng.uniform(0, 0.9))
        track[0] = track[0] or 150.0
        track[-1] = track[-1] or 150.0
        if trial % 7 == 0:
            track[1:-1] = 0.0  # two knots only: scipy's linear case
        if trial % 5 == 0:
            track[n_frames // 3: n_frames // 2] = track[0]  # flat runs: zero slopes
        knots = np.nonzero(track)[0]
        expected = scipy_pchip(knots, track[knots])(range(n_frames))
        assert np.array_equal(scipy_exact.pchip(knots, track[knots], np.arange(n_frames)), expected), trial


def test_pchip_refuses_what_it_does_not_compute():
    with pytest.raises(ValueError, match="2 knots"):
        scipy_exact.pchip(np.array([0]), np.array([1.0]), np.arange(1))
    with pytest.raises(ValueError, match="extrapolate"):
        scipy_exact.pchip(np.array([1, 4]), np.array([1.0, 2.0]), np.arange(5))
    with pytest.raises(ValueError, match="increasing"):
        scipy_exact.pchip(np.array([0, 0, 3]), np.array([1.0, 2.0, 3.0]), np.arange(3))


def test_the_three_point_average_is_lfilters():
    track = np.random.default_rng(1).uniform(60, 400, 300)
    assert np.array_equal(fir_filtered(track, np.ones(3) / 3), lfilter(np.ones(3) / 3, 1.0, track))


def test_the_tracker_does_not_import_scipy_signal():
    code = ("import sys, numpy as np; from voxanon.models.f0 import yaapt; "
            "from voxanon.models.f0.params import YaaptParams; "
            "rng = np.random.default_rng(0); t = np.arange(16000) / 16000; "
            "x = np.sin(2 * np.pi * 150 * t) + 0.01 * rng.standard_normal(16000); "
            "yaapt.yaapt_samp_values(x, 16000, YaaptParams()); "
            "print(sorted(m for m in sys.modules if m.startswith(('scipy.signal', 'scipy.interpolate'))))")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]"
