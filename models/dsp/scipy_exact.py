"""The SciPy routines the F0 tracker (YAAPT) and the librosa front end (:mod:`.librosa_exact`) use, in NumPy, with
SciPy's own arithmetic in SciPy's own order: the same values bit for bit (tests/models/test_scipy_exact.py compares
each with SciPy itself).

Why: importing ``scipy.signal`` (which also imports ``scipy.interpolate``) costs every process that tracks F0
about 0.65 s on the development machine, a tenth of the F0-only command's whole run over the demo corpus
(docs/benchmarks.md). Each function names the SciPy routine (1.17) it follows; only the cases YAAPT calls are
written, and anything else is refused rather than computed differently.
"""
from __future__ import annotations

import numpy as np


def firwin_bandpass(numtaps: int, low: float, high: float) -> np.ndarray:
    """``scipy.signal.firwin(numtaps, [low, high], pass_zero=False)``: the Hamming-windowed band-pass, scaled to
    unit gain at the band's centre; ``low`` and ``high`` as fractions of the Nyquist frequency."""
    if numtaps % 2 == 0:
        raise ValueError("a band-pass FIR filter needs an odd number of taps")
    if not 0 < low < high < 1:
        raise ValueError(f"band edges {low}, {high}: expected 0 < low < high < 1 (fractions of Nyquist)")
    left, right = np.float64(low), np.float64(high)
    m = np.arange(0, numtaps, dtype=np.float64) - 0.5 * (numtaps - 1)
    taps = right * np.sinc(right * m)
    taps -= left * np.sinc(left * m)
    taps *= general_hamming(numtaps, 0.54)
    scale_frequency = 0.5 * (left + right)
    taps /= np.sum(taps * np.cos(np.pi * m * scale_frequency))
    return taps


def general_hamming(size: int, alpha: float) -> np.ndarray:
    """SciPy's symmetric ``general_hamming`` window: ``alpha + (1 - alpha)·cos`` over ``[-π, π]`` as its
    ``general_cosine`` sums it (``hamming`` is ``alpha`` 0.54, ``hann`` 0.5)."""
    if size <= 1:
        return np.ones(max(size, 0))
    angle = np.linspace(-np.pi, np.pi, size, dtype=np.float64)
    window = np.zeros(size, dtype=np.float64)
    for k, coefficient in enumerate(np.asarray([alpha, 1.0 - alpha], dtype=np.float64)):
        window += coefficient * np.cos(k * angle)
    return window


def hann(size: int) -> np.ndarray:
    """``scipy.signal.windows.hann(size)`` (symmetric)."""
    return general_hamming(size, 0.5)


def kaiser(size: int, beta: float) -> np.ndarray:
    """``scipy.signal.windows.kaiser(size, beta)`` (symmetric). Its Bessel function is SciPy's own
    (``scipy.special.i0``, 0.1 s to import): NumPy's ``i0`` differs in the last bits."""
    from scipy.special import i0

    if size <= 1:
        return np.ones(max(size, 0))
    n = np.arange(0, size, dtype=np.float64)
    alpha = (size - 1) / 2.0
    return i0(beta * np.sqrt(1 - ((n - alpha) / alpha) ** 2.0)) / i0(np.asarray(beta, dtype=np.float64))


def medfilt(values: np.ndarray, kernel_size: int) -> np.ndarray:
    """``scipy.signal.medfilt`` of a 1-D float array: each value's median over ``kernel_size`` (odd) values
    centred on it, zeros beyond the ends (SciPy's ``ndimage.rank_filter`` in ``constant`` mode). A median of an
    odd count is one of the values, so any selection gives SciPy's. NaN values, which SciPy orders its own way,
    go to SciPy itself."""
    if kernel_size % 2 != 1:
        raise ValueError("medfilt's kernel_size must be odd")
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError("medfilt here takes a 1-D array")
    half = kernel_size // 2
    if len(values) == 0:
        return values.copy()
    if np.isnan(values).any():
        from scipy.signal import medfilt as scipy_medfilt

        return scipy_medfilt(values, kernel_size)
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(values, half), kernel_size)
    return np.partition(windows, half, axis=1)[:, half].copy()


def pchip(knots: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``scipy.interpolate.pchip(knots, values)(at)`` for 1-D ``values`` at strictly increasing ``knots``, with
    ``at`` within ``[knots[0], knots[-1]]``: PCHIP derivatives (``PchipInterpolator._find_derivatives``), the
    cubic Hermite coefficients (``CubicHermiteSpline``) and ``PPoly``'s evaluation (a sum of ``c[k]·s^(3-k)``
    from the constant term up, ``s`` the distance from the interval's left knot)."""
    x = np.asarray(knots, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    at = np.asarray(at, dtype=np.float64)
    if x.ndim != 1 or y.shape != x.shape or len(x) < 2:
        raise ValueError("pchip needs at least 2 knots and one value per knot")
    if np.any(x[1:] <= x[:-1]):
        raise ValueError("pchip's knots must be strictly increasing")
    if len(at) and (at.min() < x[0] or at.max() > x[-1]):
        raise ValueError("pchip here does not extrapolate")
    slopes = _pchip_derivatives(x, y)
    dx = np.diff(x)
    slope = np.diff(y) / dx
    t = (slopes[:-1] + slopes[1:] - 2 * slope) / dx
    cubic, quadratic = t / dx, (slope - slopes[:-1]) / dx - t
    linear, constant = slopes[:-1], y[:-1]
    interval = np.clip(np.searchsorted(x, at, side="right") - 1, 0, len(x) - 2)
    s = at - x[interval]
    s2 = s * s
    result = 0.0 + constant[interval]
    result = result + linear[interval] * s
    result = result + quadratic[interval] * s2
    return result + cubic[interval] * (s2 * s)


def _pchip_derivatives(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``PchipInterpolator._find_derivatives`` on 1-D data."""
    hk = x[1:] - x[:-1]
    mk = (y[1:] - y[:-1]) / hk
    if len(y) == 2:
        return np.array([mk[0], mk[0]])
    smk = np.sign(mk)
    flat = (smk[1:] != smk[:-1]) | (mk[1:] == 0) | (mk[:-1] == 0)
    w1 = 2 * hk[1:] + hk[:-1]
    w2 = hk[1:] + 2 * hk[:-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        harmonic_mean = (w1 / mk[:-1] + w2 / mk[1:]) / (w1 + w2)
    dk = np.zeros_like(y)
    dk[1:-1][~flat] = 1.0 / harmonic_mean[~flat]
    dk[0] = _pchip_end(hk[0], hk[1], mk[0], mk[1])
    dk[-1] = _pchip_end(hk[-1], hk[-2], mk[-1], mk[-2])
    return dk


def _pchip_end(h0: float, h1: float, m0: float, m1: float) -> float:
    """``PchipInterpolator._edge_case``: the one-sided three-point derivative, kept shape-preserving."""
    d = ((2 * h0 + h1) * m0 - h0 * m1) / (h0 + h1)
    if np.sign(d) != np.sign(m0):
        return 0.0
    if np.sign(m0) != np.sign(m1) and abs(d) > 3.0 * abs(m0):
        return 3.0 * m0
    return d
