"""Global linkability D_sys (Gomez-Barrero et al. 2017), as the VoicePrivacy ``anonymization_metrics`` computes it.

Voice-Privacy-Challenge-2022. Mated (same speaker) and non-mated score densities are
normalised histograms on ``min(n_mated // 10, 100)`` equal bins spanning the pooled
score range. With the likelihood ratio ``LR = y_mated / y_nonmated`` (1 where
``y_nonmated = 0``), the local measure is ``D = 2 w LR / (1 + w LR) - 1``, set to 0 where
``w LR <= 1`` and to 1 where only mated scores fall; ``D_sys = trapz(D * y_mated,
bin_centres)``. D_sys lies in [0, 1] (up to histogram discretisation): 0 means mated and
non-mated comparisons cannot be told apart.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .scores import ScoreError, check_score_sets

MAX_BINS = 100
SCALE_FREE_RANGE = (1e-300, 1e300)
"""The pooled score ranges whose histogram neither overflows nor needs to be scaled (every usual score set)."""


@dataclass(frozen=True)
class LinkabilityProfile:
    """D_sys plus the local linkability ``local[k]`` of each bin (edges and centres)."""

    d_sys: float
    local: np.ndarray
    bin_centres: np.ndarray
    bin_edges: np.ndarray


def linkability_profile(mated, nonmated, *, omega: float = 1.0, n_bins: int | None = None) -> LinkabilityProfile:
    """Local and global linkability; ``omega`` is the prior odds of mated comparisons.

    ``n_bins`` defaults to ``min(n_mated // 10, 100)``, raised to 1 for fewer than 10
    mated scores (where the reference code fails). When every score is the same the
    two classes are indistinguishable and D_sys is 0.
    """
    mated, nonmated = check_score_sets(mated, nonmated)
    if omega <= 0:
        raise ScoreError(f"omega (prior odds of mated comparisons) must be positive, got {omega}")
    if n_bins is None:
        n_bins = max(1, min(mated.size // 10, MAX_BINS))
    elif n_bins < 1:
        raise ScoreError(f"n_bins must be at least 1, got {n_bins}")
    low = min(mated.min(), nonmated.min())
    high = max(mated.max(), nonmated.max())
    if low == high:
        edges = np.array([low, high])
        return LinkabilityProfile(0.0, np.zeros(1), edges[:1].copy(), edges)
    half_range = high / 2 - low / 2  # halved, as the range itself can overflow
    if not SCALE_FREE_RANGE[0] / 2 <= half_range <= SCALE_FREE_RANGE[1] / 2:
        # Scores near the float64 limit (±1e308) overflow their range, and the histogram with it; scores within
        # 1e-300 of each other (±1e-320) overflow the densities (a count over the bin width). D_sys does not
        # depend on the scores' scale (densities scale inversely to the bin centres), so they are scaled.
        scale = max(abs(low), abs(high))
        mated, nonmated, low, high = mated / scale, nonmated / scale, low / scale, high / scale
    mated_density, edges = np.histogram(mated, bins=n_bins, range=(low, high), density=True)
    nonmated_density, _ = np.histogram(nonmated, bins=n_bins, range=(low, high), density=True)
    centres = (edges[1:] + edges[:-1]) / 2
    ratio = np.divide(mated_density, nonmated_density, out=np.ones_like(mated_density),
                      where=nonmated_density != 0)
    local = 2 * (omega * ratio / (1 + omega * ratio)) - 1
    local[omega * ratio <= 1] = 0
    local[(nonmated_density == 0) & (mated_density != 0)] = 1
    return LinkabilityProfile(float(np.trapezoid(local * mated_density, centres)), local, centres, edges)


def linkability(mated, nonmated, *, omega: float = 1.0, n_bins: int | None = None) -> float:
    """D_sys, the global linkability in [0, 1] (see :func:`linkability_profile`)."""
    return linkability_profile(mated, nonmated, omega=omega, n_bins=n_bins).d_sys
