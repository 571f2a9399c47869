"""McAdams-coefficient anonymisation (VoicePrivacy B2 / B2r), vectorised over frames.

The algorithm is the one of the VoicePrivacy 2024 ``anonym_v2`` (Voice-Privacy-Challenge-2024, McAdams anonymisation):
20 ms frames with a 10 ms shift under a square-root Hann window normalised so that
analysis x synthesis windows overlap-add to one; per frame an order-20 LPC fit by Burg's
method (as ``librosa.lpc`` computes it), the angle of every complex pole warped
``phi -> sign(phi) * |phi| ** alpha`` with its magnitude kept (real poles untouched),
the LPC residual re-filtered through the warped all-pole filter, windowed again and
overlap-added. All frames are processed (v2), none clamped (v2).

Every step runs on a block of frames at once (all frames of an utterance up to about 20 s):
Burg's recursion loops over the model order, pole finding is one batched eigenvalue problem
on companion matrices, and the all-pole synthesis filter loops over the samples of a frame
with the frames as the vector dimension. There is no Python loop over frames. A longer
utterance goes through in blocks of :data:`BLOCK_FRAMES` frames, so that the chain holds
about 20 bytes per sample (its output in float64, and the input) instead of every frame's
intermediates (98 bytes per sample: a 1-hour file took 5.6 GB). Each frame is computed
alone, and a sample's overlap-add sums its frames in the same order, so the blocks give
the very bytes that one block would.

Two choices of ours, both documented in the README:
- The signal is zero-padded at the end so that frames cover every input sample; the
  output is cut back to the input's length (the reference leaves the tail unprocessed).
- The output level is matched to the input's RMS (the reference peak-normalises), with
  the gain lowered only as far as needed to keep the peak below full scale.
"""
from __future__ import annotations

import numpy as np

_EPS32 = float(np.finfo(np.float32).eps)
_PEAK_LIMIT = 0.99


def frame_lengths(sample_rate: int, win_ms: float, shift_ms: float) -> tuple[int, int]:
    """The window and the shift in samples (rounded down, as the reference does)."""
    return int(np.floor(win_ms * 0.001 * sample_rate)), int(np.floor(shift_ms * 0.001 * sample_rate))


def frame_setting_problem(sample_rate: int, lp_order: int, win_ms: float, shift_ms: float) -> tuple[str, str] | None:
    """``(setting, what is wrong)`` for frame settings that cannot work at ``sample_rate``, or None.

    The square-root Hann window needs at least 3 samples (Hann's 2-sample window is all zeros), the shift at
    least one; Burg's recursion fits order ``p`` from ``win_length - 1 - p`` error samples at its last step and
    overflows well before ``p`` reaches the window's length, so the order is kept to half the window's samples.
    """
    win_length, shift = frame_lengths(sample_rate, win_ms, shift_ms)
    if win_length < 3:
        return "win_ms", f"gives a window of {win_length} sample(s) at {sample_rate} Hz; it needs at least 3"
    if shift < 1:
        return "shift_ms", f"gives a shift of 0 samples at {sample_rate} Hz; it needs at least 1"
    if lp_order > win_length // 2:
        return "lp_order", (f"is above half the window's {win_length} samples (win_ms={win_ms:g} at {sample_rate} Hz): "
                            f"at most {win_length // 2}")
    return None


def analysis_window(win_length: int, shift: int) -> np.ndarray:
    """sqrt(hann / K) with K = sum(hann) / shift: analysis x synthesis overlap-adds to one."""
    hann = np.hanning(win_length)
    return np.sqrt(hann / (hann.sum() / shift))


def frame_count(n_samples: int, win_length: int, shift: int) -> int:
    """Frames starting at 0, ``shift`` apart, that cover ``n_samples`` samples (at least one)."""
    return max(1, int(np.ceil(max(n_samples - win_length, 0) / shift)) + 1)


def frame_signal(samples: np.ndarray, win_length: int, shift: int, n_frames: int | None = None) -> np.ndarray:
    """The first ``n_frames`` (default: all, :func:`frame_count`) frames of ``samples``, starting at 0, ``shift``
    apart, zero-padded at the end where they pass it; float64."""
    n_frames = frame_count(len(samples), win_length, shift) if n_frames is None else n_frames
    padded = np.zeros((n_frames - 1) * shift + win_length)
    span = samples[:len(padded)]
    padded[:len(span)] = span
    strides = (padded.strides[0] * shift, padded.strides[0])
    return np.lib.stride_tricks.as_strided(padded, (n_frames, win_length), strides).copy()


def overlap_add(frames: np.ndarray, shift: int) -> np.ndarray:
    n_frames, win_length = frames.shape
    out = np.zeros((n_frames - 1) * shift + win_length)
    for start in range(0, win_length, shift):
        chunk = frames[:, start:start + shift]
        width = chunk.shape[1]
        # Frame f's chunk lands at f * shift + start; frames tile without gaps at a stride of shift.
        target = out[start: start + (n_frames - 1) * shift + width]
        if width == shift:
            target += chunk.reshape(-1)
        else:
            for f in range(n_frames):
                target[f * shift: f * shift + width] += chunk[f]
    return out


_BURG_BLOCK = 64


def burg_lpc(frames: np.ndarray, order: int) -> np.ndarray:
    """LPC coefficients ``[1, a1, ..., a_order]`` of each row, by Burg's method.

    The same recursion, epsilon bias included, as ``librosa.lpc`` (Marple 1980), batched
    over rows in float64. Rows go in blocks small enough for the error arrays to stay in
    cache across the ``order`` passes (measured 1.5x faster than all rows at once).
    """
    frames = np.asarray(frames, dtype=np.float64)
    return np.concatenate([_burg_block(frames[start:start + _BURG_BLOCK], order)
                           for start in range(0, max(len(frames), 1), _BURG_BLOCK)])


def _burg_block(frames: np.ndarray, order: int) -> np.ndarray:
    # Time runs along axis 0 so that the shrinking error arrays stay contiguous slices.
    samples = np.ascontiguousarray(np.asarray(frames, dtype=np.float64).T)
    n_frames = samples.shape[1]
    coeffs = np.zeros((n_frames, order + 1))
    coeffs[:, 0] = 1.0
    forward = samples[1:].copy()
    backward = samples[:-1].copy()
    den = np.einsum("nf,nf->f", forward, forward) + np.einsum("nf,nf->f", backward, backward)
    epsilon = np.finfo(np.float64).tiny
    for i in range(order):
        reflect = -2.0 * np.einsum("nf,nf->f", backward, forward) / (den + epsilon)
        coeffs[:, 1:i + 2] += reflect[:, None] * coeffs[:, i::-1].copy()
        scaled_forward = reflect * forward
        forward += reflect * backward
        backward += scaled_forward
        den = (1.0 - reflect ** 2) * den - backward[-1] ** 2 - forward[0] ** 2
        forward = forward[1:]
        backward = backward[:-1]
    return coeffs


def polynomial_roots(coeffs: np.ndarray) -> np.ndarray:
    """Roots of each row's monic polynomial, as eigenvalues of its companion matrix."""
    n_frames, n_coeffs = coeffs.shape
    degree = n_coeffs - 1
    companion = np.zeros((n_frames, degree, degree))
    companion[:, 0, :] = -coeffs[:, 1:] / coeffs[:, :1]
    companion[:, np.arange(1, degree), np.arange(degree - 1)] = 1.0
    return np.linalg.eigvals(companion)


def polynomial_from_roots(roots: np.ndarray) -> np.ndarray:
    """Row-wise ``np.poly``: coefficients of prod(z - r), leading coefficient 1."""
    n_frames, degree = roots.shape
    coeffs = np.zeros((n_frames, degree + 1), dtype=complex)
    coeffs[:, 0] = 1.0
    for k in range(degree):
        coeffs[:, 1:k + 2] -= roots[:, k:k + 1] * coeffs[:, 0:k + 1]
    return coeffs


def warp_pole_angles(poles: np.ndarray, alpha: float) -> np.ndarray:
    """Complex poles' angles raised to ``alpha`` (sign kept); real poles unchanged."""
    angles = np.angle(poles)
    is_complex = np.abs(poles.imag) > 0
    warped = np.where(is_complex, np.sign(angles) * np.abs(angles) ** alpha, angles)
    return np.abs(poles) * np.exp(1j * warped)


def fir_filter_rows(coeffs: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """Each row filtered by its own FIR ``coeffs`` row (``lfilter(b, 1, x)``, zero state)."""
    n_taps = coeffs.shape[1]
    padded = np.concatenate([np.zeros((frames.shape[0], n_taps - 1)), frames], axis=1)
    # lagged[f, n, k] = frames[f, n - k]: one batched matrix-vector product per frame.
    lagged = np.lib.stride_tricks.sliding_window_view(padded, n_taps, axis=1)[:, :, ::-1]
    return np.einsum("fnk,fk->fn", lagged, coeffs)


def allpole_filter_rows(coeffs: np.ndarray, excitation: np.ndarray) -> np.ndarray:
    """Each row through its own all-pole filter ``1 / A(z)`` (``lfilter(1, a, x)``, zero state)."""
    n_frames, length = excitation.shape
    order = coeffs.shape[1] - 1
    # Reversed feedback taps against a sliding window of past outputs; time along axis 0
    # keeps each step's window one contiguous block.
    taps = np.ascontiguousarray((coeffs[:, :0:-1] / coeffs[:, :1]).T)
    drive = np.ascontiguousarray((excitation / coeffs[:, :1]).T)
    out = np.zeros((order + length, n_frames))
    for n in range(length):
        out[order + n] = drive[n] - np.einsum("kf,kf->f", out[n:n + order], taps)
    return np.ascontiguousarray(out[order:].T)


def match_level(output: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Scale ``output`` (float64, in place) to the RMS of ``reference`` (taken in float64), lowered only to keep
    the peak below clipping."""
    rms_out = np.sqrt(np.mean(output ** 2))
    if rms_out == 0.0:
        return output
    gain = np.sqrt(np.mean(np.square(reference, dtype=np.float64))) / rms_out
    peak = np.max(np.abs(output)) * gain
    if peak > _PEAK_LIMIT:
        gain *= _PEAK_LIMIT / peak
    output *= gain
    return output


BLOCK_FRAMES = 2048
"""Frames taken through the chain at once (about 20 s at a 10 ms shift; their intermediates take about 25 MB, and
smaller blocks measured no faster). A multiple of Burg's block, so that its recursion's blocks fall on the same
frames."""


def _block_starts(n_frames: int, block_frames: int) -> list[int]:
    """Where each block of frames starts. A remainder shorter than Burg's block joins the block before it: a
    block of a single frame would take NumPy's reductions of one row, which sum in another order."""
    starts = list(range(0, n_frames, block_frames))
    if len(starts) > 1 and n_frames - starts[-1] < _BURG_BLOCK:
        starts.pop()
    return starts


def _resynthesised_frames(frames: np.ndarray, window: np.ndarray, alpha: float, lp_order: int) -> np.ndarray:
    """Each analysis frame (windowed) re-filtered through its warped all-pole filter, windowed again."""
    lpc = burg_lpc(frames + _EPS32, lp_order)
    poles = polynomial_roots(lpc)
    warped_lpc = polynomial_from_roots(warp_pole_angles(poles, alpha)).real
    residual = fir_filter_rows(lpc, frames)
    return allpole_filter_rows(warped_lpc, residual) * window


def mcadams(samples: np.ndarray, sample_rate: int, alpha: float, *, lp_order: int = 20,
            win_ms: float = 20.0, shift_ms: float = 10.0, block_frames: int = BLOCK_FRAMES) -> np.ndarray:
    """Anonymise one utterance with McAdams coefficient ``alpha``; same length, level matched.

    ``samples`` is mono float audio; the result is float32 of the same length. Frames go through the chain
    ``block_frames`` at a time (a multiple of Burg's block of 64); the output does not depend on it.
    """
    if samples.ndim != 1:
        raise ValueError(f"expected mono samples, got shape {samples.shape}")
    if not 0.0 < alpha:
        raise ValueError(f"McAdams coefficient must be positive, got {alpha}")
    if block_frames < 1 or block_frames % _BURG_BLOCK:
        raise ValueError(f"block_frames must be a positive multiple of {_BURG_BLOCK}, got {block_frames}")
    win_length, shift = frame_lengths(sample_rate, win_ms, shift_ms)
    window = analysis_window(win_length, shift)
    n_frames = frame_count(len(samples), win_length, shift)
    # The frames before a block whose ends reach into its first samples: their overlap-add waits for the block.
    reaching = -(-win_length // shift) - 1
    starts = _block_starts(n_frames, block_frames)
    output = np.empty(len(samples))
    carried = np.empty((0, win_length))
    for first, stop in zip(starts, starts[1:] + [n_frames]):
        signal = samples[first * shift:(stop - 1) * shift + win_length].astype(np.float64) + _EPS32
        frames = frame_signal(signal, win_length, shift, stop - first) * window
        resynthesised = _resynthesised_frames(frames, window, alpha, lp_order)
        if len(carried):
            resynthesised = np.concatenate([carried, resynthesised])
        # Samples from this block's first one on are complete but for those the next block's frames reach.
        summed = overlap_add(resynthesised, shift)[len(carried) * shift:]
        end = len(samples) if stop == n_frames else stop * shift
        output[first * shift:end] = summed[:end - first * shift]
        carried = resynthesised[len(resynthesised) - min(reaching, len(resynthesised)):].copy()
    return match_level(output, samples).astype(np.float32)
