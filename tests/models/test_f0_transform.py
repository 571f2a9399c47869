"""The affine F0 map to sex-neutral moments: exact moments, unvoiced frames kept, defined edge cases."""
from __future__ import annotations

import numpy as np
import pytest

from voxanon.models.dsp.f0_transform import NEUTRAL_F0_MEAN_HZ, NEUTRAL_F0_STD_HZ, map_f0_to_moments, voiced_moments


def _track(seed: int = 0, n: int = 400, mean: float = 118.0, std: float = 14.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    f0 = rng.normal(mean, std, n).astype(np.float32)
    f0[rng.random(n) < 0.4] = 0.0
    return f0


def test_published_defaults():
    assert NEUTRAL_F0_MEAN_HZ == 154.37 and NEUTRAL_F0_STD_HZ == 30.2


@pytest.mark.parametrize("seed, mean, std", [(0, 118.0, 14.0), (1, 215.0, 35.0), (2, 96.0, 4.0)])
def test_voiced_moments_become_targets_and_unvoiced_stay_zero(seed, mean, std):
    f0 = _track(seed, mean=mean, std=std)
    mapped = map_f0_to_moments(f0)
    voiced = f0 > 0
    assert mapped.shape == f0.shape
    assert np.array_equal(mapped > 0, voiced)
    assert np.all(mapped[~voiced] == 0.0)
    assert abs(mapped[voiced].mean() - NEUTRAL_F0_MEAN_HZ) < 1e-9
    assert abs(mapped[voiced].std() - NEUTRAL_F0_STD_HZ) < 1e-9


def test_custom_targets_and_population_std():
    f0 = np.array([0.0, 100.0, 0.0, 110.0, 120.0, 0.0, 130.0])
    moments = voiced_moments(f0)
    assert moments.n_voiced == 4
    assert moments.mean_hz == pytest.approx(115.0)
    assert moments.std_hz == pytest.approx(np.sqrt(125.0))  # ddof=0: mean of squared deviations 125
    mapped = map_f0_to_moments(f0, 200.0, 10.0)
    expected = 200.0 + 10.0 * (np.array([100.0, 110.0, 120.0, 130.0]) - 115.0) / np.sqrt(125.0)
    assert np.allclose(mapped[[1, 3, 4, 6]], expected, rtol=0, atol=1e-12)
    assert np.all(mapped[[0, 2, 5]] == 0.0)


def test_the_input_is_not_modified():
    f0 = _track()
    copy = f0.copy()
    map_f0_to_moments(f0)
    assert np.array_equal(f0, copy)


def test_no_voiced_frames_leaves_the_track_unchanged():
    f0 = np.zeros(50, dtype=np.float32)
    assert voiced_moments(f0) is None
    mapped = map_f0_to_moments(f0)
    assert np.array_equal(mapped, f0) and not np.any(np.isnan(mapped))


@pytest.mark.parametrize("f0", [[0.0, 130.0, 0.0], [0.0, 140.0, 140.0, 140.0, 0.0]])
def test_no_spread_shifts_to_the_target_mean(f0):
    mapped = map_f0_to_moments(np.array(f0))
    voiced = np.array(f0) > 0
    assert np.all(mapped[voiced] == NEUTRAL_F0_MEAN_HZ)
    assert np.all(mapped[~voiced] == 0.0)


def test_far_low_outlier_is_clamped_and_stays_voiced():
    # 1 frame at 20 Hz among 99 at 200±1 Hz: about 10 source stds below the mean, which maps below 0 Hz.
    f0 = np.concatenate([[20.0], 200.0 + np.tile([-1.0, 1.0], 50)[:99], [0.0, 0.0]])
    unclamped = NEUTRAL_F0_MEAN_HZ + NEUTRAL_F0_STD_HZ * (20.0 - f0[f0 > 0].mean()) / f0[f0 > 0].std()
    assert unclamped < 0
    mapped = map_f0_to_moments(f0, floor_hz=1.0)
    assert mapped[0] == 1.0
    assert np.array_equal(mapped > 0, f0 > 0)
    assert np.all(mapped[-2:] == 0.0)


@pytest.mark.parametrize("bad", [np.zeros((2, 3)), [100.0, np.nan], [-5.0, 100.0]])
def test_invalid_tracks_are_refused(bad):
    with pytest.raises(ValueError):
        map_f0_to_moments(bad)


@pytest.mark.parametrize("mean, std, floor", [(0.0, 30.0, 1.0), (150.0, -1.0, 1.0), (150.0, 30.0, 0.0)])
def test_invalid_targets_are_refused(mean, std, floor):
    with pytest.raises(ValueError):
        map_f0_to_moments([0.0, 120.0, 130.0], mean, std, floor_hz=floor)
