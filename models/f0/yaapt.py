"""YAAPT F0 as ``amfm_decompy.pYAAPT.yaapt`` computes it, vectorised over frames, on the CPU.

pYAAPT (the Python port of Zahorian and Hu's YAAPT, v1.0.12) spends most of its time in Python per
frame. This module reproduces its computation step by step, with its own constants and in its own
order of operations, so that its output (``samp_values``: Hz, 0 for unvoiced frames) is the same:

1. **Filtering**: the 150th-order FIR band-pass (50-1500 Hz, ``firwin``) of the signal and of its
   square (the nonlinear signal), applied as ``scipy.signal.lfilter`` applies a FIR filter
   (``np.convolve``, truncated). pYAAPT's decimation factor is 1 by default, and pYAAPT itself
   fails for any other (it copies the decimated signal into an array of the original length),
   so there is no decimation.
2. **NLFER**: the low-frequency energy of each Hann-windowed frame (bins 60-204 of an 8192-point
   spectrum), over its mean; frames above 0.75 are voiced candidates. Only those 145 bins are
   used, so they come from a DFT matrix product instead of 8192-point FFTs (same values to float
   rounding).
3. **Spectral harmonics correlation** on the nonlinear signal, for the NLFER-voiced frames:
   Kaiser window, mean removal, the 8192-point magnitude spectrum (``np.fft.rfft``, batched),
   the sum over a 21-bin window of the product of the magnitudes at 1-4 times each frequency,
   and pYAAPT's peak picking (up to 4 candidates; 4 or more peaks, or a weak maximum, mean
   unvoiced).
4. **Spectral track**: the candidate closest to 0.8 times the mean, median-smoothed, a dynamic
   programme (``dynamic5``) over the voiced frames, median smoothing, PCHIP interpolation over
   the unvoiced frames and a 3-point moving average; its mean and spread set the lag ranges.
5. **NCCF** on 25 ms frames of both filtered signals within each frame's lag range, with
   pYAAPT's in-place mean removal (each frame's mean is subtracted from the buffer it shares
   with the next two frames), its peak rules (``cmp_rate``: a single peak above 0.9, else up to
   three), and the merit weighting by distance to the spectral track.
6. **Refinement** of the six candidates by NLFER (``refine``) and the final **dynamic programme**
   (``dynamic`` and ``path1``: ties resolve to the last candidate, NaN costs as numpy's argmin).

The sequential parts (peak picking per frame, the NCCF with its running mean removal, both dynamic
programmes) are compiled with numba (``cache=True``: compiled once per machine, then loaded from the user's
cache folder, :mod:`voxanon.models.f0.numba_cache`);
the rest calls the same numpy functions on the same arrays as pYAAPT (``np.convolve``, ``np.fft.rfft``,
``np.argsort`` in the refinement, whose order among equal merits is numpy's, and ``lfilter``'s FIR case,
:func:`fir_filtered`), and SciPy's ``firwin``, windows, ``medfilt`` and ``pchip`` as
:mod:`voxanon.models.dsp.scipy_exact` computes them, bit for bit, without importing ``scipy.signal``. Sums
follow numpy's pairwise summation exactly, and the NCCF's products go through the same BLAS routines as
numpy's, so every value is pYAAPT's, bit for bit, except the NLFER energies (a DFT product instead of
8192-point FFTs: about 6 times cheaper, equal to float rounding). Those last bits matter only where pYAAPT's
final dynamic programme meets two paths of equal cost (typically two candidates one lag apart, visited in
either order): on the demo corpus, a frame or two in 3 of 182 utterances. With the FFT, the tracks were
identical on every utterance tried, at 1.5 times the cost.

:mod:`voxanon.models.f0.yaapt_torch` computes the same per-frame quantities batched over utterances
in torch (for a GPU) and takes its decisions with the functions here.
"""
from __future__ import annotations

import contextlib
import functools
import math
import warnings
from dataclasses import dataclass

from .numba_cache import use_user_cache_folder

use_user_cache_folder()
import numba  # noqa: E402  (after its cache folder is chosen)
import numpy as np  # noqa: E402

from ..dsp import scipy_exact  # noqa: E402
from ..dsp.blas import one_blas_thread  # noqa: E402

# pYAAPT's defaults for the parameters the SSL-SAS call leaves alone (``yaapt``'s ``parameters``).
FFT_LENGTH = 8192
BP_ORDER = 150
BP_LOW_HZ = 50.0
BP_HIGH_HZ = 1500.0
NLFER_THRESH1 = 0.75
NLFER_THRESH2 = 0.1
SHC_NUMHARMS = 3
SHC_WINDOW_HZ = 40.0
SHC_MAXPEAKS = 4
SHC_PWIDTH_HZ = 50.0
SHC_THRESH1 = 5.0
SHC_THRESH2 = 1.25
DP5_K1 = 11.0
NCCF_THRESH2 = 0.9
NCCF_MAXCANDS = 3
NCCF_PWIDTH = 5
MERIT_BOOST = 0.20
MERIT_PIVOT = 0.99
MEDIAN_VALUE = 7
DP_W1, DP_W2, DP_W3, DP_W4 = 0.15, 0.5, 0.1, 0.9
SPEC_PITCH_MIN_STD = 0.05
UNVOICED_SPECTRAL_PITCH_HZ = 150.0
"""What pYAAPT's spectral track assumes when fewer than three frames have a spectral candidate."""

NAN_LAG_MESSAGE = "cannot convert float NaN to integer"
SHORT_TDA_MESSAGE = ("ERROR: Negative index in the cross correlation calculation of the pYAAPT time domain "
                     "analysis. Please try to increase the value of the \"tda_frame_length\" parameter.")

SHC_FRAMES_PER_FFT = 64
"""Voiced frames per batched 8192-point FFT (its input 4 MB, its output 8 MB)."""

_jit = functools.partial(numba.njit, cache=True, nogil=True, error_model="numpy")


@dataclass(frozen=True)
class Geometry:
    """The integer sizes pYAAPT derives from its parameters and the sample rate, computed as it does."""

    fs: float
    frame_size: int
    frame_jump: int
    nlfer_bins: tuple[int, int]
    shc_frame: int
    shc_half_window: int
    shc_window: int
    shc_min: int
    shc_max: int
    shc_bins: int
    peak_center: int
    peak_min_lag: int
    peak_max_lag: int
    tda_length: int
    nccf_half_width: int
    f0_min: float
    f0_max: float
    nccf_thresh1: float

    @property
    def delta(self) -> float:
        return self.fs / FFT_LENGTH

    def n_frames(self, n_samples: int) -> int:
        """Frames of a signal of ``n_samples`` (pYAAPT's ``pitch.nframes``)."""
        half = self.frame_size // 2
        return len(range(half, n_samples - half, self.frame_jump))

    def tda_frames(self, n_samples: int) -> int:
        """NCCF frames (``time_track``'s ``tda_nframes``, at most :meth:`n_frames`)."""
        tda = int((n_samples - (self.tda_length - self.frame_jump)) / self.frame_jump)
        return max(0, min(tda, self.n_frames(n_samples)))


@functools.lru_cache(maxsize=16)
def geometry(fs: float, frame_length_ms: float, frame_space_ms: float, tda_frame_length_ms: float,
             f0_min_hz: float, f0_max_hz: float, nccf_thresh1: float) -> Geometry:
    """The :class:`Geometry` of one parameter set; ``ValueError`` where pYAAPT's arrays would not hold it."""
    fs = float(fs)
    if not 0 < f0_min_hz < f0_max_hz:
        raise ValueError(f"YAAPT needs 0 < f0_min < f0_max, got {f0_min_hz} and {f0_max_hz}")
    frame_size = int(np.fix(frame_length_ms * fs / 1000))
    frame_jump = int(np.fix(frame_space_ms * fs / 1000))
    if not 15 < frame_size < 2048 or frame_jump < 1:
        raise ValueError(f"YAAPT frame of {frame_size} samples every {frame_jump}: pYAAPT needs 16-2047 and >= 1")
    nlfer_lo = int(np.around((f0_min_hz * 2 / fs) * FFT_LENGTH)) - 1
    nlfer_hi = int(np.around((f0_max_hz / fs) * FFT_LENGTH))
    delta = fs / FFT_LENGTH
    window = int(np.fix(SHC_WINDOW_HZ / delta))
    half_window = int(np.fix(float(window) / 2))
    window += 1 - window % 2
    if window > 128:
        raise ValueError(f"a {SHC_WINDOW_HZ} Hz SHC window of {window} bins at {fs} Hz is wider than handled here")
    shc_max = int(np.fix((f0_max_hz + SHC_PWIDTH_HZ * 2) / delta))
    shc_min = int(np.ceil(f0_min_hz / delta))
    # The highest magnitude index the SHC reads (the product is over 4 = SHC_NUMHARMS + 1 multiples);
    # pYAAPT's strided views read past the spectrum beyond it.
    top = (SHC_NUMHARMS + 1) * shc_max + window - 1
    if top >= half_window + FFT_LENGTH // 2 + 1 or shc_min < 1:
        raise ValueError(f"f0 range {f0_min_hz}-{f0_max_hz} Hz is outside what pYAAPT's spectrum covers at {fs} Hz")
    width = int(np.fix(SHC_PWIDTH_HZ / delta))
    width += 1 - width % 2
    center = int(np.ceil(width / 2))
    min_lag = max(1, int(np.fix(f0_min_hz / delta - center)))
    max_lag = min(int(np.fix(f0_max_hz / delta + center)), shc_max - width)
    tda_length = int(tda_frame_length_ms * fs / 1000)
    if not frame_jump < tda_length <= PAIRWISE_MAX:
        raise ValueError(f"YAAPT NCCF frame of {tda_length} samples: must exceed the hop and be at most {PAIRWISE_MAX}")
    if int(np.fix(fs / f0_max_hz)) - NCCF_PWIDTH // 2 < 1:
        raise ValueError(f"f0_max {f0_max_hz} Hz is too high for NCCF lags at {fs} Hz")
    return Geometry(fs, frame_size, frame_jump, (nlfer_lo, nlfer_hi), 2 * frame_size, half_window, window,
                    shc_min, shc_max, top - half_window + 1, center, min_lag, max_lag, tda_length,
                    int(np.fix(NCCF_PWIDTH / 2.0)), float(f0_min_hz), float(f0_max_hz), float(nccf_thresh1))


def geometry_of(fs: float, params) -> Geometry:
    """The :class:`Geometry` of a :class:`voxanon.models.f0.params.YaaptParams`."""
    return geometry(float(fs), float(params.frame_length_ms), float(params.frame_space_ms),
                    float(params.tda_frame_length_ms), float(params.f0_min_hz), float(params.f0_max_hz),
                    float(params.nccf_thresh1))


@functools.lru_cache(maxsize=4)
def bandpass_taps(fs: float) -> np.ndarray:
    """pYAAPT's ``BandpassFilter`` taps."""
    return scipy_exact.firwin_bandpass(BP_ORDER + 1, BP_LOW_HZ / (fs / 2), BP_HIGH_HZ / (fs / 2))


@functools.lru_cache(maxsize=4)
def nlfer_window(frame_size: int) -> np.ndarray:
    return scipy_exact.hann(frame_size + 2)[1:-1]


@functools.lru_cache(maxsize=4)
def shc_window(shc_frame: int) -> np.ndarray:
    return scipy_exact.kaiser(shc_frame, 0.5)


@functools.lru_cache(maxsize=4)
def nlfer_dft(frame_size: int, bins: tuple[int, int]) -> np.ndarray:
    """``[cos | -sin]`` of the 8192-point DFT at ``bins``, for ``frame_size`` samples: (frame_size, 2 * n_bins)."""
    k = np.arange(*bins)
    phase = np.outer(np.arange(frame_size), k) % FFT_LENGTH * (2 * np.pi / FFT_LENGTH)
    return np.ascontiguousarray(np.concatenate([np.cos(phase), -np.sin(phase)], axis=1))


def fir_filtered(signal: np.ndarray, taps: np.ndarray) -> np.ndarray:
    """``lfilter(taps, 1, signal)`` as scipy computes a FIR filter: the full convolution, truncated."""
    return np.convolve(taps, signal)[:len(signal)]


def nlfer(filtered: np.ndarray, geo: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """pYAAPT's normalised low-frequency energy ratio per frame, and the frames above its threshold."""
    n_frames = geo.n_frames(len(filtered))
    frames = np.lib.stride_tricks.as_strided(filtered, (n_frames, geo.frame_size),
                                              (filtered.strides[0] * geo.frame_jump, filtered.strides[0]))
    spectrum = (frames * nlfer_window(geo.frame_size)) @ nlfer_dft(geo.frame_size, geo.nlfer_bins)
    n_bins = spectrum.shape[1] // 2
    frame_energy = np.hypot(spectrum[:, :n_bins], spectrum[:, n_bins:]).sum(axis=1)
    energy = frame_energy / np.mean(frame_energy)
    return energy, energy > NLFER_THRESH1


def shc_magnitudes(padded_slices: np.ndarray, geo: Geometry) -> np.ndarray:
    """``spec_track``'s ``magnitude`` of SHC frames already windowed, mean-removed and zero-padded to the FFT
    length (numpy pads the same way, in a copy): ``shc_half_window`` zeros, then the magnitude of the
    8192-point spectrum up to the highest bin the SHC reads."""
    magnitude = np.zeros((len(padded_slices), geo.shc_half_window + geo.shc_bins))
    np.abs(np.fft.rfft(padded_slices)[:, :geo.shc_bins], out=magnitude[:, geo.shc_half_window:])
    return magnitude


def shc_numpy(nonlinear: np.ndarray, voiced: np.ndarray, geo: Geometry) -> np.ndarray:
    """pYAAPT's SHC (``max_SHC`` values, the first ``min_SHC - 1`` zero) of each frame in ``voiced``."""
    window = shc_window(geo.shc_frame)
    shc = np.zeros((len(voiced), geo.shc_max))
    slices = np.zeros((min(len(voiced), SHC_FRAMES_PER_FFT), FFT_LENGTH))
    for start in range(0, len(voiced), SHC_FRAMES_PER_FFT):
        chunk = voiced[start:start + SHC_FRAMES_PER_FFT]
        _shc_slices(nonlinear, chunk, geo.frame_jump, window, slices)
        _shc_from_magnitudes(shc_magnitudes(slices[:len(chunk)], geo), geo.shc_min, geo.shc_max, geo.shc_window,
                             shc[start:start + len(chunk)])
    return shc


def spectral_candidates(shc: np.ndarray, voiced: np.ndarray, n_frames: int, geo: Geometry
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``spec_track``'s candidates: (pitch, merit), each (4, n_frames); unvoiced frames 0 Hz, merit 1."""
    pitch = np.zeros((SHC_MAXPEAKS, n_frames))
    merit = np.ones((SHC_MAXPEAKS, n_frames))
    _spectral_peaks(shc, voiced, geo.delta, geo.peak_min_lag, geo.peak_max_lag, geo.peak_center,
                    SHC_THRESH1, SHC_THRESH2, pitch, merit)
    return pitch, merit


def spectral_track(cand_pitch: np.ndarray, cand_merit: np.ndarray, f0_min: float) -> tuple[np.ndarray, float]:
    """``spec_track``'s smoothed spectral F0 track over all frames, and its spread (``pitch_std``)."""
    n_frames = cand_pitch.shape[1]
    spec_pitch = cand_pitch[0].copy()
    voiced = cand_pitch[0] > 0
    pitch, merit = cand_pitch[:, voiced], cand_merit[:, voiced]
    n_voiced = pitch.shape[1]
    avg_voiced, std_voiced = np.mean(pitch[0]), np.std(pitch[0])
    # The candidate nearest to 0.8 x the mean (merit-weighted) becomes its median-smoothed self.
    nearest = (abs(pitch - 0.8 * avg_voiced) * (3 - merit)).argmin(0)
    columns = np.arange(n_voiced)
    pitch[nearest, columns] = scipy_exact.medfilt(pitch[nearest, columns], max(1, MEDIAN_VALUE - 2))
    if n_voiced > 2:
        weight = DP5_K1 * std_voiced / avg_voiced
        path = best_path(1 - merit, _dynamic5_costs(pitch, weight, f0_min))
        voiced_pitch = scipy_exact.medfilt(pitch[path, columns], max(1, MEDIAN_VALUE - 2))
    else:
        voiced_pitch = np.full(max(n_voiced, 1), UNVOICED_SPECTRAL_PITCH_HZ)
    pitch_avg = np.mean(voiced_pitch)
    pitch_std = np.maximum(np.std(voiced_pitch), pitch_avg * SPEC_PITCH_MIN_STD)
    spec_pitch[voiced] = voiced_pitch
    if spec_pitch[0] < pitch_avg / 2:
        spec_pitch[0] = pitch_avg
    if spec_pitch[-1] < pitch_avg / 2:
        spec_pitch[-1] = pitch_avg
    knots = np.nonzero(spec_pitch)[0]
    spec_pitch = scipy_exact.pchip(knots, spec_pitch[knots], np.arange(n_frames))
    spec_pitch = fir_filtered(spec_pitch, np.ones(3) / 3)
    spec_pitch[0] = spec_pitch[2]
    spec_pitch[1] = spec_pitch[3]
    return spec_pitch, pitch_std


def nccf_lags(spec_pitch: np.ndarray, pitch_std: float, geo: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """Each NCCF frame's lag range ``[lag_min, lag_max)`` around the spectral track, as ``time_track`` sets it.

    Raises what pYAAPT raises at the first frame it cannot analyse: ``ValueError`` for a NaN lag,
    ``OverflowError`` for an infinite one, ``AssertionError`` for a lag beyond the frame."""
    low = np.maximum(spec_pitch - 2.0 * pitch_std, geo.f0_min)
    high = np.minimum(spec_pitch + 2.0 * pitch_std, geo.f0_max)
    with np.errstate(divide="ignore", invalid="ignore"):
        lag_min, lag_max = np.fix(geo.fs / high), np.fix(geo.fs / low)
    finite = np.isfinite(lag_min) & np.isfinite(lag_max)
    lag_min = np.where(finite, lag_min, 0).astype(np.int64) - geo.nccf_half_width
    lag_max = np.where(finite, lag_max, 0).astype(np.int64) + geo.nccf_half_width
    bad = np.flatnonzero(~finite | (lag_max >= geo.tda_length))
    if len(bad):
        frame = bad[0]
        for value in (geo.fs / high[frame], geo.fs / low[frame]):
            if np.isnan(value):
                raise ValueError(NAN_LAG_MESSAGE)
            if np.isinf(value):
                raise OverflowError("cannot convert float infinity to integer")
        raise AssertionError(SHORT_TDA_MESSAGE)
    return lag_min, lag_max


def time_candidates_numpy(filtered: np.ndarray, spec_pitch: np.ndarray, lags: tuple[np.ndarray, np.ndarray],
                          geo: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """``time_track``'s NCCF candidates of one filtered signal before the spectral weighting: (3, n) each."""
    n = len(spec_pitch)
    pitch, merit = np.zeros((NCCF_MAXCANDS, n)), np.zeros((NCCF_MAXCANDS, n))
    _nccf_from_signal(filtered.copy(), n, geo.tda_length, geo.frame_jump, lags[0], lags[1], geo.fs,
                      geo.nccf_half_width, geo.nccf_thresh1, NCCF_THRESH2, pitch, merit)
    return pitch, merit


def time_candidates_from_phi(phi_rows: np.ndarray, first_lag: int, lags: tuple[np.ndarray, np.ndarray],
                             geo: Geometry, pitch: np.ndarray, merit: np.ndarray) -> None:
    """``cmp_rate`` on NCCF rows computed elsewhere (row f: lags ``first_lag, first_lag + 1, ...`` of frame f),
    written to columns of ``pitch`` and ``merit`` (3, n frames)."""
    _nccf_from_phi(np.ascontiguousarray(phi_rows), first_lag, lags[0], lags[1], geo.tda_length, geo.fs,
                   geo.nccf_half_width, geo.nccf_thresh1, NCCF_THRESH2, pitch, merit)


def frame_means(sums: np.ndarray, geo: Geometry) -> np.ndarray:
    """The mean ``time_track`` removes from each NCCF frame, given each frame's sum before any removal."""
    return _frame_means(np.ascontiguousarray(sums, dtype=np.float64), geo.tda_length, geo.frame_jump)


def spectrally_weighted(pitch: np.ndarray, merit: np.ndarray, spec_pitch: np.ndarray, pitch_std: float) -> np.ndarray:
    """``time_track``'s merits: boosted, and scaled down with the distance to the spectral track."""
    freq_thresh = 5.0 * pitch_std
    diff = np.abs(pitch - spec_pitch)
    match = (1 - diff / freq_thresh) * (diff < freq_thresh)
    return ((1 + MERIT_BOOST) * merit) * match


def padded_to(array: np.ndarray, n_frames: int) -> np.ndarray:
    """Candidates of the NCCF frames, zero for the last spectral frames it lacks (as YAAPT 4.0 does)."""
    if array.shape[1] >= n_frames:
        return array
    return np.concatenate((array, np.zeros((array.shape[0], n_frames - array.shape[1]))), axis=1)


def refine(time_pitch: np.ndarray, time_merit: np.ndarray, spec_pitch: np.ndarray, energy: np.ndarray,
           vuv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pYAAPT's ``refine``: six candidates per frame (both NCCF sets sorted by merit, the median-smoothed
    best, the spectral track), with merits set by the frame's NLFER energy."""
    n_cands, n_frames = time_pitch.shape
    # numpy's default sort, as pYAAPT's: which of several equal merits comes first is numpy's choice.
    order = np.argsort(-time_merit, axis=0)
    time_merit = np.sort(time_merit, axis=0)[::-1].copy()
    time_pitch = time_pitch[order, range(n_frames)]
    best_pitch = scipy_exact.medfilt(time_pitch[0], MEDIAN_VALUE) * vuv
    silent = energy <= NLFER_THRESH2
    voiced = (energy > NLFER_THRESH2) & (time_pitch[0] > 0)
    unmatched = (energy > NLFER_THRESH2) & (time_pitch[0] <= 0)
    no_pitch = np.zeros((n_cands, n_frames), dtype=bool)
    no_pitch[1:n_cands - 1] = (time_pitch[1:n_cands - 1] == 0) & voiced
    time_pitch[:, silent] = 0
    time_merit[:, silent] = MERIT_PIVOT
    time_pitch[n_cands - 1, voiced] = 0.0
    time_merit[n_cands - 1, voiced] = 1.0 - time_merit[0, voiced]
    time_merit[no_pitch] = 0.0
    time_pitch[0, unmatched] = spec_pitch[unmatched]
    time_merit[0, unmatched] = np.minimum(1, energy[unmatched] / 2.0)
    time_pitch[1:, unmatched] = 0.0
    time_merit[1:, unmatched] = 1.0 - time_merit[0, unmatched]
    time_pitch[n_cands - 2] = best_pitch
    has_best = best_pitch > 0.0
    time_merit[n_cands - 2, has_best] = time_merit[0, has_best]
    time_merit[n_cands - 2, ~has_best] = 1.0 - np.minimum(1, energy[~has_best] / 2.0)
    time_pitch[n_cands - 3] = spec_pitch
    time_merit[n_cands - 3] = energy / 5.0
    return time_pitch, time_merit


def dynamic(ref_pitch: np.ndarray, ref_merit: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """pYAAPT's final dynamic programme: the F0 track (Hz, 0 unvoiced)."""
    best_pitch = ref_pitch[-2]
    mean_pitch = np.mean(best_pitch[best_pitch > 0])
    benefit = np.insert(np.minimum(1, abs(energy[:-1] - energy[1:])), 0, 0)
    costs = _dynamic_costs(ref_pitch, benefit, mean_pitch, DP_W1, DP_W2, DP_W3, DP_W4)
    return ref_pitch[best_path(1 - ref_merit, costs), range(ref_pitch.shape[1])]


def final_track(energy: np.ndarray, vuv: np.ndarray, spec_pitch: np.ndarray, pitch_std: float,
                candidates: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """From the NCCF candidates of the signal and of the nonlinear signal to pYAAPT's ``samp_values``."""
    n_frames = len(spec_pitch)
    weighted = [(padded_to(pitch, n_frames),
                 padded_to(spectrally_weighted(pitch, merit, spec_pitch[:pitch.shape[1]], pitch_std), n_frames))
                for pitch, merit in candidates]
    ref_pitch, ref_merit = refine(np.concatenate([p for p, _ in weighted]), np.concatenate([m for _, m in weighted]),
                                  spec_pitch, energy, vuv)
    return dynamic(ref_pitch, ref_merit, energy)


@contextlib.contextmanager
def quiet():
    """Near-silent frames divide by zero (and short signals make pYAAPT's ``medfilt`` warn); the results are
    still what they should be."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def yaapt_samp_values(signal: np.ndarray, fs: float, params) -> np.ndarray:
    """``pYAAPT.yaapt(SignalObj(signal, fs), **params.yaapt_kwargs()).samp_values`` (float64, Hz).

    ``signal`` is used as given (the SSL-SAS padding is the caller's); ``params`` a
    :class:`voxanon.models.f0.params.YaaptParams`. Raises what pYAAPT raises where it cannot analyse a signal.
    """
    geo = geometry_of(fs, params)
    x = np.asarray(signal, dtype=np.float64)
    taps = bandpass_taps(geo.fs)
    import scipy.linalg.cython_blas  # noqa: F401  (the BLAS numba's np.dot calls: loaded before one_blas_thread looks)

    with quiet(), one_blas_thread():
        filtered, nonlinear = fir_filtered(x, taps), fir_filtered(x ** 2, taps)
        energy, vuv = nlfer(filtered, geo)
        voiced = np.flatnonzero(vuv)
        cand_pitch, cand_merit = spectral_candidates(shc_numpy(nonlinear, voiced, geo), voiced, len(energy), geo)
        spec_pitch, pitch_std = spectral_track(cand_pitch, cand_merit, geo.f0_min)
        tda_pitch = spec_pitch[:geo.tda_frames(len(x))]
        lags = nccf_lags(tda_pitch, pitch_std, geo)
        candidates = [time_candidates_numpy(s, tda_pitch, lags, geo) for s in (filtered, nonlinear)]
        return final_track(energy, vuv, spec_pitch, pitch_std, candidates)


def warm_up() -> None:
    """Load (or, the first time on a machine, compile) the compiled kernels, e.g. before forking workers: the
    CPU version's, and those the GPU version (:mod:`voxanon.models.f0.yaapt_torch`) calls with its own array
    layouts (the NCCF's peaks written to column slices of the tracks, the frame means)."""
    from .params import SSL_SAS_YAAPT

    t = np.arange(1600) / 16000
    yaapt_samp_values(np.sin(2 * np.pi * 150 * t) * (1 + t), 16000.0, SSL_SAS_YAAPT)
    geo = geometry_of(16000.0, SSL_SAS_YAAPT)
    lags = (np.full(2, geo.nccf_half_width + 40, dtype=np.int64), np.full(2, geo.nccf_half_width + 44, dtype=np.int64))
    wide = np.zeros((2, NCCF_MAXCANDS, 4))
    for pitch, merit in ((wide[0, :, 1:3], wide[1, :, 1:3]), np.zeros((2, NCCF_MAXCANDS, 2))):
        # Two frames' columns of longer tracks, or whole tracks of two frames: the GPU version writes both.
        time_candidates_from_phi(np.zeros((2, 8)), 40, lags, geo, pitch, merit)
    frame_means(np.zeros(3), geo)


# Compiled kernels ------------------------------------------------------------------------------


@_jit
def _block_sum(a, start, n):
    """numpy's float64 pairwise summation of at most 128 values (its leaf: 8 accumulators)."""
    if n < 8:
        total = 0.0
        for i in range(n):
            total += a[start + i]
        return total
    r0, r1, r2, r3 = a[start], a[start + 1], a[start + 2], a[start + 3]
    r4, r5, r6, r7 = a[start + 4], a[start + 5], a[start + 6], a[start + 7]
    i = 8
    while i < n - n % 8:
        j = start + i
        r0 += a[j]
        r1 += a[j + 1]
        r2 += a[j + 2]
        r3 += a[j + 3]
        r4 += a[j + 4]
        r5 += a[j + 5]
        r6 += a[j + 6]
        r7 += a[j + 7]
        i += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        total += a[start + i]
        i += 1
    return total


@_jit
def _block_sums(a, first, count, n, out):
    """``out[r] = _block_sum(a, first + r, n)`` for r < count (n <= 128), in the same order of additions.

    Accumulator j of window r sums ``a[p], a[p + 8], ...`` from p = first + r + j: the same sequence as
    accumulator j - 1 of window r + 1, so each such strided sum is computed once for all windows."""
    if n < 8:
        for r in range(count):
            total = 0.0
            for i in range(n):
                total += a[first + r + i]
            out[r] = total
        return
    steps = (n - n % 8) // 8
    strided = np.empty(count + 7)
    for p in range(count + 7):
        total = a[first + p]
        for i in range(1, steps):
            total += a[first + p + 8 * i]
        strided[p] = total
    for r in range(count):
        total = ((strided[r] + strided[r + 1]) + (strided[r + 2] + strided[r + 3])) + \
                ((strided[r + 4] + strided[r + 5]) + (strided[r + 6] + strided[r + 7]))
        for i in range(8 * steps, n):
            total += a[first + r + i]
        out[r] = total


def _sliding_halving(leaf):
    """numpy's pairwise summation one level up, for all windows of a sliding sum at once: up to 128 values
    summed by :func:`_block_sums`, more halved at a multiple of 8 and summed left + right by ``leaf``.
    Levels are separate functions: numba's cache cannot hold a recursive one."""
    @_jit
    def level(a, first, count, n, out):
        if n <= 128:
            _block_sums(a, first, count, n, out)
            return
        half = n // 2
        half -= half % 8
        right = np.empty(count)
        leaf(a, first, count, half, out)
        leaf(a, first + half, count, n - half, right)
        for r in range(count):
            out[r] = out[r] + right[r]
    return level


_sliding_256 = _sliding_halving(_block_sums)
_sliding_512 = _sliding_halving(_sliding_256)
_sliding_1024 = _sliding_halving(_sliding_512)
_sliding_2048 = _sliding_halving(_sliding_1024)
_sliding_4096 = _sliding_halving(_sliding_2048)


PAIRWISE_MAX = 3848
"""The most values five halvings bring down to blocks of 128 (a 25 ms frame at 16 kHz is 400)."""


@_jit
def _pairwise_sum(a, start, n):
    """numpy's float64 ``add.reduce`` over ``a[start:start+n]``, bit for bit (n <= PAIRWISE_MAX)."""
    out = np.empty(1)
    _sliding_pairwise_sums(a, start, 1, n, out)
    return out[0]


@_jit
def _sliding_pairwise_sums(a, first, count, n, out):
    """``out[r] = np.sum(a[first + r:first + r + n])`` for r < count, bit for bit (n <= PAIRWISE_MAX)."""
    if n > PAIRWISE_MAX:
        raise ValueError("more values than the pairwise summation here handles")
    _sliding_4096(a, first, count, n, out)


@_jit
def _first_argmax(a, start, n):
    """``np.argmax(a[start:start+n])``: the first maximum, or the first NaN."""
    best = 0
    for i in range(n):
        value = a[start + i]
        if math.isnan(value):
            return i
        if value > a[start + best]:
            best = i
    return best


@_jit
def _last_argmin(a):
    """``len(a) - 1 - np.argmin(a[::-1])``: the last minimum, or the last NaN (``path1``'s choice)."""
    n = len(a)
    best = n - 1
    for i in range(n - 1, -1, -1):
        if math.isnan(a[i]):
            return i
        if a[i] < a[best]:
            best = i
    return best


@_jit
def _shc_slices(nonlinear, frames, jump, window, out):
    """``spec_track``'s frames of the nonlinear signal (followed by zeros) at ``frames``: windowed, their mean
    (numpy's pairwise sum) removed, into the first ``len(window)`` values of the rows of ``out``."""
    size = len(window)
    for row in range(len(frames)):
        start = frames[row] * jump
        for i in range(size):
            value = nonlinear[start + i] if start + i < len(nonlinear) else 0.0
            out[row, i] = value * window[i]
        mean = _pairwise_sum(out[row], 0, size) / size
        for i in range(size):
            out[row, i] -= mean


@_jit
def _shc_from_magnitudes(magnitude, shc_min, shc_max, window, out):
    """SHC rows: for each k, the sum over c < window of prod over h = 1..4 of ``magnitude[h k + c]``
    (pYAAPT's product over its four strided views, then its sum, in numpy's order)."""
    terms = np.empty(window)
    for v in range(magnitude.shape[0]):
        row = magnitude[v]
        for k in range(shc_min, shc_max + 1):
            for c in range(window):
                terms[c] = ((row[k + c] * row[2 * k + c]) * row[3 * k + c]) * row[4 * k + c]
            out[v, k - 1] = _block_sum(terms, 0, window)  # window <= 128 (geometry)


@_jit
def _spectral_peaks(shc, frames, delta, min_lag, max_lag, center, thresh1, thresh2, pitch_out, merit_out):
    """pYAAPT's ``peaks`` on each SHC row, written to column ``frames[v]`` of the candidate arrays."""
    maxpeaks = pitch_out.shape[0]
    count = max_lag + 1 - min_lag
    positions = np.empty(max_lag - min_lag + 1, dtype=np.int64)
    for v in range(shc.shape[0]):
        frame = frames[v]
        data = shc[v]
        top = data[min_lag]  # the builtin max: the first value, replaced by any greater one (NaN never is)
        for i in range(min_lag + 1, max_lag + 1):
            if data[i] > top:
                top = data[i]
        if top > 1e-14:
            data = data / top
        average = _pairwise_sum(data, min_lag, count) / count
        if average > 1 / thresh1:
            continue
        found = 0
        for n in range(min_lag + center + 1, max_lag - center + 1):
            if (data[n] > data[n - 1] and data[n] > data[n + 1] and data[n] > thresh2 * average
                    and _first_argmax(data, n - center, 2 * center + 1) == center):
                positions[found] = n
                found += 1
        best = 0.0
        for i in range(found):
            if data[positions[i]] > best:
                best = data[positions[i]]
        if best / average < thresh1 or not 0 < found < maxpeaks:
            continue
        # Stable descending order by merit (positive and distinct in practice), the first repeated after.
        for i in range(found):
            rank = 0
            for j in range(found):
                if data[positions[j]] > data[positions[i]] or (data[positions[j]] == data[positions[i]] and j < i):
                    rank += 1
            pitch_out[rank, frame] = float(positions[i]) * delta
            merit_out[rank, frame] = data[positions[i]]
        for i in range(found, maxpeaks):
            pitch_out[i, frame] = pitch_out[0, frame]
            merit_out[i, frame] = merit_out[0, frame]


@_jit
def _nccf_peaks(phi, lag_min, lag_max, fs, center, thresh1, thresh2, pitch_out, merit_out, frame):
    """pYAAPT's ``cmp_rate`` on one frame's NCCF ``phi`` (zero outside ``[lag_min, lag_max)``)."""
    maxcands = pitch_out.shape[0]
    top = phi[0]
    for i in range(1, len(phi)):
        if math.isnan(phi[i]) or phi[i] > top:
            top = phi[i]
            if math.isnan(top):
                break
    first, last = lag_min + center, lag_max - center
    n_peaks = 0
    best = -1
    for n in range(first, last + 1):
        if phi[n] > phi[n - 1] and phi[n] > phi[n + 1] and phi[n] > thresh1:
            n_peaks += 1
            if best < 0 or phi[n] > phi[best]:
                best = n
    pitches = np.zeros(max(maxcands, n_peaks))
    merits = np.zeros(max(maxcands, n_peaks))
    found = 0
    if top > thresh2 and n_peaks > 0:
        pitches[0] = fs / float(best + 1)
        merits[0] = phi[best]
        found = 1
    else:
        for n in range(first, last + 1):
            if (phi[n] > phi[n - 1] and phi[n] > phi[n + 1] and phi[n] > thresh1
                    and _first_argmax(phi, n - center, 2 * center + 1) == center):
                pitches[found] = fs / float(n + 1)
                merits[found] = phi[n]
                found += 1
    # The best ``maxcands`` by merit, ties in order (the unfilled slots are zeros after every peak).
    taken = np.zeros(len(merits), dtype=np.bool_)
    for slot in range(maxcands):
        pick = -1
        for i in range(len(merits)):
            if not taken[i] and (pick < 0 or merits[i] > merits[pick]):
                pick = i
        taken[pick] = True
        pitch_out[slot, frame] = pitches[pick]
        merit_out[slot, frame] = merits[pick]
    scale = merit_out[0, frame]
    for slot in range(1, maxcands):
        if merit_out[slot, frame] > scale:
            scale = merit_out[slot, frame]
    if scale > 1.0:
        for slot in range(maxcands):
            merit_out[slot, frame] = merit_out[slot, frame] / scale


@_jit
def _nccf_from_signal(data, n_frames, length, jump, lag_min, lag_max, fs, center, thresh1, thresh2,
                      pitch_out, merit_out):
    """``time_track``'s frame loop on ``data`` (modified in place, as pYAAPT's buffer is): each frame's
    mean is removed from the buffer, then its NCCF over ``[lag_min, lag_max)`` is searched for peaks.

    ``crs_corr``'s products go through BLAS as numpy's do (``dot`` of the frame start with itself,
    ``gemv`` of the lagged windows, copied contiguous, with it), and its window energies through
    numpy's pairwise sum: the same values as pYAAPT's."""
    phi = np.zeros(length)
    squares = np.empty(length)
    energies = np.empty(length)
    largest = 0
    for f in range(n_frames):
        largest = max(largest, (lag_max[f] - lag_min[f]) * (length - lag_max[f]))
    windows = np.empty(largest)
    for f in range(n_frames):
        start = f * jump
        mean = _pairwise_sum(data, start, length) / length
        for i in range(start, start + length):
            data[i] -= mean
            squares[i - start] = data[i] * data[i]
        low, high = lag_min[f], lag_max[f]
        n = length - high
        head = data[start:start + n]
        power = np.dot(head, head)
        for row in range(high - low):
            source, target = start + low + row, row * n
            for i in range(n):
                windows[target + i] = data[source + i]
        numerators = np.dot(windows[:(high - low) * n].reshape((high - low, n)), head)
        _sliding_pairwise_sums(squares, low, high - low, n, energies)
        phi[:] = 0.0
        for lag in range(low, high):
            phi[lag] = numerators[lag - low] / math.sqrt(energies[lag - low] * power)
        _nccf_peaks(phi, low, high, fs, center, thresh1, thresh2, pitch_out, merit_out, f)


@_jit
def _nccf_from_phi(phi_rows, first_lag, lag_min, lag_max, length, fs, center, thresh1, thresh2,
                   pitch_out, merit_out):
    """``cmp_rate`` on precomputed NCCF rows: row f holds lags ``first_lag ...`` of frame f."""
    phi = np.zeros(length)
    for f in range(phi_rows.shape[0]):
        phi[:] = 0.0
        for lag in range(lag_min[f], lag_max[f]):
            phi[lag] = phi_rows[f, lag - first_lag]
        _nccf_peaks(phi, lag_min[f], lag_max[f], fs, center, thresh1, thresh2, pitch_out, merit_out, f)


@_jit
def _frame_means(sums, length, jump):
    """The means ``time_track`` removes frame by frame, from each frame's sum before any removal: a frame
    starts with the means of the frames before it already removed where they overlap it."""
    means = np.empty(len(sums))
    for f in range(len(sums)):
        total = sums[f]
        j = 1
        while j * jump < length and f - j >= 0:
            total -= (length - j * jump) * means[f - j]
            j += 1
        means[f] = total / length
    return means


@_jit
def _dynamic5_costs(pitch, weight, f0_min):
    """``dynamic5``'s transition costs (from candidate k to j at frame i: ``[k, j, i]``)."""
    n_cands, n_frames = pitch.shape
    costs = np.zeros((n_cands, n_cands, n_frames))
    for i in range(1, n_frames):
        for k in range(n_cands):
            for j in range(n_cands):
                step = abs(pitch[j, i] - pitch[k, i - 1]) / f0_min
                costs[k, j, i] = weight * (0.05 * step + step * step)
    return costs


@_jit
def _dynamic_costs(pitch, benefit, mean_pitch, w1, w2, w3, w4):
    """``dynamic``'s transition costs: voiced-voiced by the F0 jump, voicing changes by the energy change."""
    n_cands, n_frames = pitch.shape
    costs = np.full((n_cands, n_cands, n_frames), 1.0 / w4)
    for i in range(1, n_frames):
        for k in range(n_cands):
            before = pitch[k, i - 1]
            for j in range(n_cands):
                now = pitch[j, i]
                if now > 0 and before > 0:
                    cost = w1 * (abs(now - before) / mean_pitch)
                elif (now == 0 and before > 0) or (now > 0 and before == 0):
                    cost = w2 * (1 - benefit[i])
                elif now == 0 and before == 0:
                    cost = w3
                else:
                    cost = 1.0
                costs[k, j, i] = cost / w4
    return costs


@_jit
def best_path(local, costs):
    """pYAAPT's ``path1``: the candidate index per frame of the cheapest path."""
    n_cands, n_frames = local.shape
    previous = np.zeros((n_cands, n_frames), dtype=np.int64)
    path_cost = local[:, 0].copy()
    current = np.empty(n_cands)
    options = np.empty(n_cands)
    last = 0
    for i in range(1, n_frames):
        for j in range(n_cands):
            for k in range(n_cands):
                options[k] = path_cost[k] + costs[k, j, i]
            k = _last_argmin(options)
            previous[j, i] = k
            current[j] = (path_cost[k] + costs[k, j, i]) + local[j, i]
        path_cost[:] = current
        last = _last_argmin(current)
    path = np.ones(n_frames, dtype=np.int64)
    path[-1] = last
    for i in range(n_frames - 2, -1, -1):
        path[i] = previous[path[i + 1], i + 1]
    return path
