"""Linkability D_sys against the VoicePrivacy ``anonymization_metrics`` algorithm."""
import numpy as np
import pytest

from voxanon.eval.linkability import linkability, linkability_profile
from voxanon.eval.scores import ScoreError


def reference_linkability(mated, nonmated, omega=1.0):
    """anonymization_metrics/linkability.py (Gomez-Barrero et al.), as the challenge runs it."""
    n_bins = min(int(len(mated) / 10), 100)
    edges = np.linspace(min(min(mated), min(nonmated)), max(max(mated), max(nonmated)), num=n_bins + 1,
                        endpoint=True)
    centres = (edges[1:] + edges[:-1]) / 2
    y1 = np.histogram(mated, bins=edges, density=True)[0]
    y2 = np.histogram(nonmated, bins=edges, density=True)[0]
    ratio = np.divide(y1, y2, out=np.ones_like(y1), where=y2 != 0)
    local = 2 * (omega * ratio / (1 + omega * ratio)) - 1
    local[omega * ratio <= 1] = 0
    local[[y2[i] == 0 and y1[i] != 0 for i in range(len(y1))]] = 1
    return np.trapezoid(x=centres, y=local * y1)


@pytest.mark.parametrize("seed, n_mated, n_nonmated, omega",
                         [(0, 548, 11196, 1.0), (1, 35, 400, 1.0), (2, 5000, 20000, 1.0), (3, 300, 3000, 3.0),
                          (4, 1200, 1200, 0.5)])
def test_matches_the_reference_algorithm(seed, n_mated, n_nonmated, omega):
    rng = np.random.default_rng(seed)
    mated, nonmated = rng.normal(2.0, 1.0, n_mated), rng.normal(0.0, 1.5, n_nonmated)
    assert linkability(mated, nonmated, omega=omega) == pytest.approx(
        reference_linkability(mated, nonmated, omega), abs=1e-12)


def test_range_and_extremes():
    rng = np.random.default_rng(5)
    same = linkability(rng.normal(size=20000), rng.normal(size=20000))
    assert 0.0 <= same < 0.05
    separated = linkability(rng.uniform(1.0, 2.0, 1000), rng.uniform(-1.0, 0.0, 1000))
    assert 0.9 < separated <= 1.0
    assert linkability(np.ones(30), np.ones(40)) == 0.0


def test_profile_bins():
    rng = np.random.default_rng(6)
    profile = linkability_profile(rng.normal(1, 1, 250), rng.normal(0, 1, 900))
    assert profile.local.size == 25 and profile.bin_edges.size == 26
    assert np.all((profile.local >= 0) & (profile.local <= 1))
    assert linkability_profile(rng.normal(size=2000), rng.normal(size=50)).local.size == 100
    # Fewer than 10 mated scores: one bin, where the reference code fails.
    assert linkability_profile([1.0, 2.0], [0.0, 0.5]).local.size == 1


def test_bad_inputs():
    with pytest.raises(ScoreError, match="empty"):
        linkability([], [1.0])
    with pytest.raises(ScoreError, match="NaN"):
        linkability([np.nan], [1.0])
    with pytest.raises(ScoreError, match="omega"):
        linkability([1.0], [0.0], omega=0)
    with pytest.raises(ScoreError, match="n_bins"):
        linkability([1.0], [0.0], n_bins=0)
