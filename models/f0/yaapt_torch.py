"""YAAPT F0 (pYAAPT's algorithm) for a batch of utterances at once, with the dense work in torch on a GPU.

:mod:`voxanon.models.f0.yaapt` reproduces pYAAPT on the CPU. Here the per-frame arithmetic of a whole
padded batch runs on a torch device, in float64, in a fixed number of torch calls whatever the batch's
length (a GPU is bound by launches, not arithmetic, at these sizes):

* both FIR filterings at once, as one matrix product of signal blocks with the filter's Toeplitz matrix
  (exact zeros stay exact, as in ``lfilter``);
* the NLFER energies (a DFT matrix product) and the voiced frames' indices, found on the device;
* the SHC of every NLFER-voiced frame of the batch (8192-point FFTs, the four harmonics' products as
  strided views of one magnitude array) and pYAAPT's spectral peak picking on it;
* each NCCF frame's sum, and the NCCF of every frame of both signals over the batch's lag span (one
  batched FFT cross-correlation), with ``cmp_rate``'s peak picking.

Only two steps depend on one utterance's earlier results, frame after frame: the spectral track (its
dynamic programme, smoothing and interpolation, and from it the lag ranges and the means pYAAPT removes
frame by frame) and the refinement with the final dynamic programme. They run on the CPU with
:mod:`voxanon.models.f0.yaapt`'s own functions, one thread per core over the batch's utterances, on the
candidates brought back: three copies to the host per batch (energies and sums, spectral candidates,
NCCF candidates), none per chunk. Only the SHC is cut in chunks, of :data:`SHC_CHUNK_FRAMES` voiced frames
(to bound memory), so a batch issues the same number of torch calls up to that many voiced frames.

The values agree with the CPU version's to float rounding (a different FFT, summation order and
BLAS): the tracks are the same except where pYAAPT's dynamic programme meets two paths of equal
cost, there decided by the last bit (a frame or two in a few utterances).

Inputs are the padded float64 signals :func:`voxanon.models.f0.extract.yaapt_f0_batch` prepares (finite,
not silent, long enough); each result is a track or the exception pYAAPT raises for that utterance.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F

from . import yaapt as cpu

SHC_CHUNK_FRAMES = 16384
"""Voiced frames per batched 8192-point FFT: about 1 GB of spectrum and 0.6 GB of harmonic products, 164 s
of voiced speech (a 200 s device batch is one chunk unless nearly all of it is voiced)."""
FIR_BLOCK = 512
"""Output samples per row of the FIR's Toeplitz product (its input rows are ``FIR_BLOCK + 150`` long)."""


def yaapt_samp_values_batch(signals: list[np.ndarray], fs: float, params, device: str | torch.device
                            ) -> list[np.ndarray | Exception]:
    """pYAAPT's ``samp_values`` of each signal, as :func:`voxanon.models.f0.yaapt.yaapt_samp_values` computes it."""
    geo = cpu.geometry_of(fs, params)
    device = torch.device(device)
    lengths = np.array([len(s) for s in signals])
    frames = np.array([geo.n_frames(n) for n in lengths])
    tda_frames = np.array([geo.tda_frames(n) for n in lengths])
    with torch.no_grad(), cpu.quiet():
        host = np.zeros((len(signals), lengths.max()))
        for b, signal in enumerate(signals):
            host[b, :len(signal)] = signal
        x = torch.from_numpy(host).to(device, non_blocking=True)
        valid = torch.arange(x.shape[1], device=device) < torch.from_numpy(lengths).to(device)[:, None]
        # Row b: the signal, row B + b: the nonlinear signal (its square).
        filtered = _fir(torch.cat([x, x * x]), cpu.bandpass_taps(geo.fs), torch.cat([valid, valid]))
        energy = _nlfer(filtered[:len(signals)], frames, geo)
        counts = torch.from_numpy(frames).to(device)
        voiced = (energy > cpu.NLFER_THRESH1) & (torch.arange(energy.shape[1], device=device) < counts[:, None])
        rows = torch.nonzero(voiced)
        cand_pitch, cand_merit = _spectral_candidates(_shc(filtered[len(signals):], rows, geo), geo)
        sums = _unfolded(filtered, geo.tda_length, geo.frame_jump).sum(-1)
        host_energy, host_sums = energy.cpu().numpy(), sums.cpu().numpy()
        host_vuv = voiced.cpu().numpy()
        spectral_pitch, spectral_merit = _per_frame(rows, (cand_pitch, cand_merit), frames, (0.0, 1.0))

        def spectral(b: int):
            spec_pitch, pitch_std = cpu.spectral_track(spectral_pitch[b], spectral_merit[b], geo.f0_min)
            tda_pitch = spec_pitch[:tda_frames[b]]
            means = [cpu.frame_means(host_sums[b + i * len(signals), :tda_frames[b]], geo) for i in (0, 1)]
            return spec_pitch, pitch_std, cpu.nccf_lags(tda_pitch, pitch_std, geo), means

        results = _per_utterance(spectral, range(len(signals)))
        tracks = {b: result for b, result in enumerate(results) if not isinstance(result, Exception)}
        candidates = _nccf_candidates(filtered, tracks, geo)

        def final(b: int):
            spec_pitch, pitch_std = tracks[b][:2]
            return cpu.final_track(host_energy[b, :frames[b]], host_vuv[b, :frames[b]], spec_pitch, pitch_std,
                                   candidates[b])

        for b, track in zip(tracks, _per_utterance(final, list(tracks))):
            results[b] = track
    return results


def _per_utterance(work, utterances) -> list:
    """``work(b)`` for each utterance, in threads (the compiled kernels release the interpreter lock): its
    result, or the exception pYAAPT raises for that utterance. The caller's :func:`voxanon.models.f0.yaapt.quiet`
    holds for the threads too (warning filters are the process's)."""
    def guarded(b):
        try:
            return work(b)
        except Exception as error:  # this utterance's own failure; the others go on
            return error

    utterances = list(utterances)
    if len(utterances) < 2:
        return [guarded(b) for b in utterances]
    with ThreadPoolExecutor(min(len(utterances), os.cpu_count() or 1)) as pool:
        return list(pool.map(guarded, utterances))


def _per_frame(rows: torch.Tensor, values: tuple[torch.Tensor, ...], frames: np.ndarray,
               fill: tuple[float, ...]) -> list[list[np.ndarray]]:
    """Candidates computed for the frames ``rows`` ((utterance, frame) pairs) as each utterance's
    (candidates, frames) arrays, ``fill`` where a frame has none: one copy to the host."""
    host_rows = rows.cpu().numpy()
    out = []
    for value, default in zip(values, fill):
        array = np.full((len(frames), value.shape[1], max(frames.max(), 1)), default)
        array[host_rows[:, 0], :, host_rows[:, 1]] = value.cpu().numpy()
        out.append([array[b, :, :frames[b]] for b in range(len(frames))])
    return out


def _fir(x: torch.Tensor, taps: np.ndarray, valid: torch.Tensor) -> torch.Tensor:
    """``lfilter(taps, 1, x)`` per row, each row cut to its own length (pYAAPT filters the unpadded signal):
    blocks of :data:`FIR_BLOCK` outputs, each the product of its input span with the filter's Toeplitz
    matrix (float64 convolutions are slow on both CPUs and GPUs; a product of exact zeros stays 0)."""
    order = len(taps) - 1
    blocks = -(-x.shape[1] // FIR_BLOCK)
    toeplitz = np.zeros((FIR_BLOCK + order, FIR_BLOCK))
    for r in range(FIR_BLOCK):
        toeplitz[r:r + order + 1, r] = taps[::-1]
    padded = F.pad(x, (order, blocks * FIR_BLOCK - x.shape[1]))
    spans = padded.unfold(1, FIR_BLOCK + order, FIR_BLOCK)
    y = (spans @ torch.from_numpy(toeplitz).to(x.device)).reshape(x.shape[0], -1)[:, :x.shape[1]]
    return torch.where(valid, y, 0.0)


def _unfolded(x: torch.Tensor, size: int, step: int) -> torch.Tensor:
    """Frames of ``size`` every ``step`` samples from sample 0 (pYAAPT's ``stride_matrix``), zero-padded
    so that every row has at least one frame."""
    if x.shape[1] < size:
        x = F.pad(x, (0, size - x.shape[1]))
    return x.unfold(1, size, step)


def _nlfer(filtered: torch.Tensor, frames: np.ndarray, geo: cpu.Geometry) -> torch.Tensor:
    """Normalised NLFER energy (batch, longest frame count); past an utterance's frames: undefined."""
    device = filtered.device
    window = torch.from_numpy(cpu.nlfer_window(geo.frame_size)).to(device)
    dft = torch.from_numpy(cpu.nlfer_dft(geo.frame_size, geo.nlfer_bins)).to(device)
    spectrum = (_unfolded(filtered, geo.frame_size, geo.frame_jump)[:, :frames.max()] * window) @ dft
    n_bins = dft.shape[1] // 2
    frame_energy = torch.hypot(spectrum[..., :n_bins], spectrum[..., n_bins:]).sum(-1)
    counts = torch.from_numpy(frames).to(device)
    inside = torch.arange(frame_energy.shape[1], device=device) < counts[:, None]
    mean = torch.where(inside, frame_energy, 0.0).sum(1) / counts
    return frame_energy / mean[:, None]


def _shc(nonlinear: torch.Tensor, rows: torch.Tensor, geo: cpu.Geometry) -> torch.Tensor:
    """The SHC rows (``shc_max`` values, the first ``shc_min - 1`` zero) of the frames ``rows`` ((utterance,
    frame) pairs), as :func:`voxanon.models.f0.yaapt.shc_numpy`."""
    device = nonlinear.device
    data = F.pad(nonlinear, (0, geo.shc_frame))  # spec_track's appended zeros
    window = torch.from_numpy(cpu.shc_window(geo.shc_frame)).to(device)
    span = torch.arange(geo.shc_frame, device=device)
    harmonics = cpu.SHC_NUMHARMS + 1
    parts = [torch.zeros(0, geo.shc_max, dtype=nonlinear.dtype, device=device)]
    for start in range(0, len(rows), SHC_CHUNK_FRAMES):
        chunk = rows[start:start + SHC_CHUNK_FRAMES]
        slices = data[chunk[:, :1], chunk[:, 1:] * geo.frame_jump + span] * window
        slices = slices - slices.mean(1, keepdim=True)
        magnitude = F.pad(torch.fft.rfft(slices, cpu.FFT_LENGTH)[:, :geo.shc_bins].abs(), (geo.shc_half_window, 0))
        # windows[v, i, c] = magnitude[v, i + c]; harmonic h of frequency k reads row h * k.
        windows = magnitude.unfold(1, geo.shc_window, 1)
        product = windows[:, geo.shc_min:geo.shc_max + 1] * windows[:, 2 * geo.shc_min:2 * geo.shc_max + 1:2]
        for harmonic in range(3, harmonics + 1):
            product.mul_(windows[:, harmonic * geo.shc_min:harmonic * geo.shc_max + 1:harmonic])
        parts.append(F.pad(product.sum(-1), (geo.shc_min - 1, 0)))
    return torch.cat(parts)


def _first_argmax_at_center(values: torch.Tensor, center: int) -> torch.Tensor:
    """For each column n of ``values`` (rows, columns; ``center`` columns of margin on both sides), whether
    ``np.argmax(values[n - center:n + center + 1]) == center`` (the first maximum, or the first NaN), for the
    columns ``center .. columns - center - 1``."""
    windows = values.unfold(1, 2 * center + 1, 1)
    middle = windows[..., center]
    # A NaN anywhere in the window makes the comparison with its side's maximum false, as argmax picks it.
    return (middle > windows[..., :center].amax(-1)) & (middle >= windows[..., center + 1:].amax(-1))


def _spectral_candidates(shc: torch.Tensor, geo: cpu.Geometry) -> tuple[torch.Tensor, torch.Tensor]:
    """pYAAPT's ``peaks`` on each SHC row: (pitch, merit), each (rows, 4); a frame without candidates has
    pitch 0 and merit 1 (as :func:`voxanon.models.f0.yaapt.spectral_candidates`)."""
    low, high, center = geo.peak_min_lag, geo.peak_max_lag, geo.peak_center
    top = shc[:, low:high + 1].amax(1, keepdim=True)
    data = torch.where(top > 1e-14, shc / top, shc)
    average = data[:, low:high + 1].mean(1)
    # Peaks at n = low + center + 1 .. high - center.
    inner = data[:, low + center + 1:high - center + 1]
    peak = ((inner > data[:, low + center:high - center]) & (inner > data[:, low + center + 2:high - center + 2])
            & (inner > cpu.SHC_THRESH2 * average[:, None])
            & _first_argmax_at_center(data[:, low + 1:high + 1], center))
    found = peak.sum(1)
    merits = torch.where(peak, inner, 0.0)
    best = merits.amax(1).clamp(min=0.0)
    keep = ~(average > 1 / cpu.SHC_THRESH1) & ~(best / average < cpu.SHC_THRESH1) & (found > 0) \
        & (found < cpu.SHC_MAXPEAKS)
    order = torch.sort(merits, dim=1, descending=True, stable=True)
    ranked = order.indices[:, :cpu.SHC_MAXPEAKS]
    slot = torch.arange(cpu.SHC_MAXPEAKS, device=shc.device)
    ranked = torch.where(slot < found[:, None], ranked, ranked[:, :1])  # slots past the peaks repeat the first
    pitch = (ranked + (low + center + 1)).to(shc.dtype) * geo.delta
    merit = merits.gather(1, ranked)
    return torch.where(keep[:, None], pitch, 0.0), torch.where(keep[:, None], merit, 1.0)


def _nccf_candidates(filtered: torch.Tensor, tracks: dict[int, tuple], geo: cpu.Geometry
                     ) -> dict[int, list[tuple[np.ndarray, np.ndarray]]]:
    """``time_track``'s candidates (before the spectral weighting) of both signals, per utterance: the
    signal's, then the nonlinear signal's, each (pitch, merit) of (3, NCCF frames).

    ``tracks[b]``: utterance b's spectral step (its lag ranges third, the means removed from the NCCF
    frames of its two signals fourth)."""
    device = filtered.device
    length, jump = geo.tda_length, geo.frame_jump
    batch = filtered.shape[0] // 2
    utterances = sorted(tracks)
    counts = [len(tracks[b][3][0]) for b in utterances]
    if not sum(counts):
        return {b: [(np.zeros((cpu.NCCF_MAXCANDS, 0)),) * 2] * 2 for b in utterances}
    means = np.zeros((2 * batch, max(counts)))
    for b, count in zip(utterances, counts):
        means[b, :count], means[batch + b, :count] = tracks[b][3]
    means = torch.from_numpy(means).to(device)
    windows = _unfolded(filtered, length, jump)[:, :means.shape[1]].clone()
    # pYAAPT removes each frame's mean from the buffer the next frames share, oldest first.
    for back in range((length - 1) // jump, 0, -1):
        windows[:, back:, :length - back * jump] -= means[:, :-back, None]
    windows -= means[:, :, None]
    owner = np.repeat(utterances, counts)
    index = np.concatenate([np.arange(count) for count in counts])
    owner = np.concatenate([owner, owner + batch])
    index = np.concatenate([index, index])
    y = windows[torch.from_numpy(owner).to(device), torch.from_numpy(index).to(device)]
    lag_min = np.concatenate([tracks[b][2][0] for b in utterances] * 2)
    lag_max = np.concatenate([tracks[b][2][1] for b in utterances] * 2)
    pitch, merit = _nccf_peaks(_nccf(y, lag_min, lag_max), int(lag_min.min()), lag_min, lag_max, geo)
    pitch, merit = pitch.cpu().numpy().T, merit.cpu().numpy().T
    bounds = np.cumsum([0] + counts)
    half = bounds[-1]
    return {b: [(pitch[:, offset + bounds[i]:offset + bounds[i + 1]], merit[:, offset + bounds[i]:offset + bounds[i + 1]])
                for offset in (0, half)] for i, b in enumerate(utterances)}


def _nccf(y: torch.Tensor, lag_min: np.ndarray, lag_max: np.ndarray) -> torch.Tensor:
    """``crs_corr`` of each frame ``y[f]`` (mean already removed) at the lags ``low .. high - 1`` of the whole
    set (``low, high``: the smallest ``lag_min``, the largest ``lag_max``): its first ``length - lag_max[f]``
    samples against the window at each lag, over the root of both energies. The cross-correlations are one
    batched FFT product; a window of exact zeros gives 0 / 0 = NaN, as in pYAAPT."""
    device = y.device
    length = y.shape[1]
    low, high = int(lag_min.min()), int(lag_max.max())
    heads = torch.from_numpy(length - lag_max).to(device)
    head = torch.where(torch.arange(length, device=device) < heads[:, None], y, 0.0)
    power = (head * head).sum(1)
    size = 1 << (2 * length - 1).bit_length()
    correlation = torch.fft.irfft(torch.fft.rfft(y, size) * torch.fft.rfft(head, size).conj(), size)
    numerators = correlation[:, low:high]
    # Each lag's window energy from running sums: a window of exact zeros still gives exactly 0.
    running = F.pad(torch.cumsum(y * y, 1), (1, high))
    starts = torch.arange(low, high, device=device)
    energies = running.gather(1, starts + heads[:, None]) - running[:, low:high]
    numerators = torch.where(energies == 0, 0.0, numerators)
    return numerators / torch.sqrt(energies * power[:, None])


def _nccf_peaks(phi: torch.Tensor, first_lag: int, lag_min: np.ndarray, lag_max: np.ndarray, geo: cpu.Geometry
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """pYAAPT's ``cmp_rate`` on NCCF rows (row f: lags ``first_lag, first_lag + 1, ...`` of frame f; only its
    ``[lag_min[f], lag_max[f])`` count): (pitch, merit), each (frames, 3), as
    :func:`voxanon.models.f0.yaapt.time_candidates_from_phi`."""
    device = phi.device
    center = geo.nccf_half_width
    lags = torch.arange(first_lag - center, first_lag + phi.shape[1] + center, device=device)
    low = torch.from_numpy(lag_min).to(device)[:, None]
    high = torch.from_numpy(lag_max).to(device)[:, None]
    # The frame's NCCF, zero outside its lag range, with ``center`` zero columns on both sides.
    full = torch.where((lags >= low) & (lags < high), F.pad(phi, (center, center)), 0.0)
    top = full.amax(1).clamp(min=0.0)
    top = torch.where(full.isnan().any(1), torch.nan, top)
    values = full[:, center:-center]
    candidate_lags = lags[center:-center]
    peak = ((values > full[:, center - 1:-center - 1]) & (values > full[:, center + 1:full.shape[1] - center + 1])
            & (values > geo.nccf_thresh1) & (candidate_lags >= low + center) & (candidate_lags <= high - center))
    single = (top > cpu.NCCF_THRESH2) & peak.any(1)
    best = torch.where(peak, values, -torch.inf).argmax(1, keepdim=True)
    only_best = torch.zeros_like(peak).scatter_(1, best, True)
    taken = torch.where(single[:, None], peak & only_best, peak & _first_argmax_at_center(full, center))
    merits = torch.where(taken, values, 0.0)
    ranked = torch.sort(merits, dim=1, descending=True, stable=True).indices[:, :cpu.NCCF_MAXCANDS]
    merit = merits.gather(1, ranked)
    # fs / (lag + 1) as a true division (a Python number over a tensor is its reciprocal times the number).
    rate = torch.full((), geo.fs, dtype=phi.dtype, device=device)
    pitch = torch.where(merit > 0, rate / (candidate_lags[ranked] + 1), 0.0)
    scale = merit.amax(1, keepdim=True)
    return pitch, torch.where(scale > 1.0, merit / scale, merit)
