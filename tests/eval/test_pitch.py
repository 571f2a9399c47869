"""rho_F0 as the VoicePrivacy 2022 script computes it."""
from __future__ import annotations

import numpy as np
import pytest

from voxanon.eval.pitch import pitch_correlation, pitch_correlation_summary


def _track(n=200, seed=0):
    rng = np.random.default_rng(seed)
    f0 = 120 + 30 * np.sin(np.linspace(0, 6, n)) + rng.normal(0, 2, n)
    f0[rng.random(n) < 0.2] = 0.0
    return f0


def test_identical_and_scaled_tracks_correlate_fully():
    f0 = _track()
    assert pitch_correlation(f0, f0) == pytest.approx(1.0)
    assert pitch_correlation(f0, f0 * 1.5) == pytest.approx(1.0)


def test_shift_is_undone_and_lengths_are_matched():
    f0 = _track()
    assert pitch_correlation(f0, np.roll(f0, 7)) == pytest.approx(1.0)
    stretched = np.interp(np.linspace(0, 1, 260), np.linspace(0, 1, 200), f0)
    assert pitch_correlation(f0, stretched) > 0.8


def test_out_of_range_values_are_zeroed_and_constant_tracks_give_zero():
    f0 = _track()
    assert pitch_correlation(f0, np.full_like(f0, 600.0)) == 0.0
    assert pitch_correlation(f0, np.zeros_like(f0)) == 0.0
    unrelated = pitch_correlation(f0, _track(seed=5))
    assert -0.5 < unrelated < 0.9


def test_summary_and_input_errors():
    mean, std = pitch_correlation_summary([(_track(), _track()), (_track(), np.zeros(200))])
    assert mean == pytest.approx(0.5) and std == pytest.approx(0.5)
    with pytest.raises(ValueError, match="empty"):
        pitch_correlation([], [100.0])
    with pytest.raises(ValueError, match="finite"):
        pitch_correlation([np.nan, 100.0], [100.0, 100.0])
    with pytest.raises(ValueError, match="no utterance pairs"):
        pitch_correlation_summary([])
