"""YAAPT F0 (pYAAPT's algorithm) for a batch of utterances at once, with the dense work in torch on a GPU.

:mod:`voxanon.models.f0.yaapt` reproduces pYAAPT on the CPU. Here the per-frame arithmetic of a whole
padded batch runs on a torch device, in float64: the two FIR filterings (one multiply-add of the batch
per tap), the NLFER energies (a DFT matrix product), the SHC of the NLFER-voiced frames (batched
8192-point FFTs and the harmonic products), each NCCF frame's sum, and the NCCF of every frame of both
signals over its lag range (frames in chunks of 4096, all lags of a chunk at once). What depends on one utterance's earlier
results, frame after frame — the spectral peaks, the spectral track and the lag ranges it sets, the
means pYAAPT removes frame by frame, the NCCF peaks, the refinement and both dynamic programmes —
runs on the CPU with :mod:`voxanon.models.f0.yaapt`'s own functions, on the values brought back, one
thread per core over the batch's utterances.

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

from voxanon.models.f0 import yaapt as cpu

SHC_CHUNK_FRAMES = 512
"""Voiced frames per batched 8192-point FFT (about 34 MB of spectrum)."""
NCCF_CHUNK_FRAMES = 4096
"""NCCF frames computed at once (about 7.5 MB per lag-sized array of float64)."""


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
        x = torch.from_numpy(host).to(device)
        valid = torch.arange(x.shape[1], device=device) < torch.from_numpy(lengths).to(device)[:, None]
        taps = cpu.bandpass_taps(geo.fs)
        filtered = [_fir(x, taps, valid), _fir(x * x, taps, valid)]
        energy = _nlfer(filtered[0], frames, geo).cpu().numpy()
        vuv = [energy[b, :frames[b]] > cpu.NLFER_THRESH1 for b in range(len(signals))]
        shc = _shc(filtered[1], vuv, geo)
        sums = [_unfolded(s, geo.tda_length, geo.frame_jump).sum(-1).cpu().numpy() for s in filtered]

        def spectral(b: int):
            voiced = np.flatnonzero(vuv[b])
            cand_pitch, cand_merit = cpu.spectral_candidates(shc[b], voiced, frames[b], geo)
            spec_pitch, pitch_std = cpu.spectral_track(cand_pitch, cand_merit, geo.f0_min)
            tda_pitch = spec_pitch[:tda_frames[b]]
            means = [cpu.frame_means(s[b, :tda_frames[b]], geo) for s in sums]
            return spec_pitch, pitch_std, cpu.nccf_lags(tda_pitch, pitch_std, geo), means

        results = _per_utterance(spectral, range(len(signals)))
        tracks = {b: result for b, result in enumerate(results) if not isinstance(result, Exception)}
        candidates = {b: [] for b in tracks}
        for index, signal in enumerate(filtered):
            found = _nccf_candidates(signal, {b: (t[2], t[3][index]) for b, t in tracks.items()}, geo)
            for b in tracks:
                candidates[b].append(found[b])

        def final(b: int):
            spec_pitch, pitch_std = tracks[b][:2]
            return cpu.final_track(energy[b, :frames[b]], vuv[b], spec_pitch, pitch_std, candidates[b])

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


def _fir(x: torch.Tensor, taps: np.ndarray, valid: torch.Tensor) -> torch.Tensor:
    """``lfilter(taps, 1, x)`` per row, each row cut to its own length (pYAAPT filters the unpadded signal):
    one multiply-add of the whole batch per tap (float64 convolutions are slow on both CPUs and GPUs)."""
    delayed = F.pad(x, (len(taps) - 1, 0))
    y = torch.zeros_like(x)
    for k, tap in enumerate(taps):
        y.add_(delayed[:, len(taps) - 1 - k:len(taps) - 1 - k + x.shape[1]], alpha=float(tap))
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


def _shc(nonlinear: torch.Tensor, vuv: list[np.ndarray], geo: cpu.Geometry) -> list[np.ndarray]:
    """Each utterance's SHC rows (voiced frames x ``shc_max``), as :func:`voxanon.models.f0.yaapt.shc_numpy`."""
    device = nonlinear.device
    rows = np.array([(b, f) for b, voiced in enumerate(vuv) for f in np.flatnonzero(voiced)],
                    dtype=np.int64).reshape(-1, 2)
    out = np.zeros((len(rows), geo.shc_max))
    data = F.pad(nonlinear, (0, geo.shc_frame))  # spec_track's appended zeros
    window = torch.from_numpy(cpu.shc_window(geo.shc_frame)).to(device)
    k = torch.arange(geo.shc_min, geo.shc_max + 1, device=device)[:, None]
    c = torch.arange(geo.shc_window, device=device)
    span = torch.arange(geo.shc_frame, device=device)
    for start in range(0, len(rows), SHC_CHUNK_FRAMES):
        chunk = torch.from_numpy(rows[start:start + SHC_CHUNK_FRAMES]).to(device)
        slices = data[chunk[:, :1], chunk[:, 1:] * geo.frame_jump + span] * window
        slices = slices - slices.mean(1, keepdim=True)
        magnitude = F.pad(torch.fft.rfft(slices, cpu.FFT_LENGTH)[:, :geo.shc_bins].abs(), (geo.shc_half_window, 0))
        product = magnitude[:, k + c]
        for harmonic in range(2, cpu.SHC_NUMHARMS + 2):
            product = product * magnitude[:, harmonic * k + c]
        out[start:start + len(chunk), geo.shc_min - 1:] = product.sum(-1).cpu().numpy()
    counts = np.cumsum([0] + [int(np.count_nonzero(voiced)) for voiced in vuv])
    return [out[counts[b]:counts[b + 1]] for b in range(len(vuv))]


def _nccf_candidates(signal: torch.Tensor, frames: dict[int, tuple[tuple[np.ndarray, np.ndarray], np.ndarray]],
                     geo: cpu.Geometry) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``time_track``'s candidates (before the spectral weighting) of one signal, per utterance.

    ``frames[b]``: utterance b's lag ranges and the means removed from its NCCF frames."""
    device = signal.device
    length, jump = geo.tda_length, geo.frame_jump
    utterances = sorted(frames)
    counts = [len(frames[b][1]) for b in utterances]
    means = torch.zeros(signal.shape[0], max(counts, default=0), dtype=signal.dtype)
    for b, count in zip(utterances, counts):
        means[b, :count] = torch.from_numpy(frames[b][1])
    means = means.to(device)
    windows = _unfolded(signal, length, jump)[:, :means.shape[1]].clone()
    # pYAAPT removes each frame's mean from the buffer the next frames share, oldest first.
    for back in range((length - 1) // jump, 0, -1):
        windows[:, back:, :length - back * jump] -= means[:, :-back, None]
    windows -= means[:, :, None]
    owner = np.repeat(utterances, counts)
    index = np.concatenate([np.arange(count) for count in counts]) if counts else np.zeros(0, dtype=int)
    windows = windows[torch.from_numpy(owner).to(device), torch.from_numpy(index).to(device)]
    lag_min = np.concatenate([frames[b][0][0] for b in utterances]) if counts else np.zeros(0, dtype=np.int64)
    lag_max = np.concatenate([frames[b][0][1] for b in utterances]) if counts else np.zeros(0, dtype=np.int64)
    pitch, merit = np.zeros((cpu.NCCF_MAXCANDS, len(owner))), np.zeros((cpu.NCCF_MAXCANDS, len(owner)))
    per_chunk = NCCF_CHUNK_FRAMES
    positions = torch.arange(length, device=device)
    for start in range(0, len(owner), per_chunk):
        stop = min(start + per_chunk, len(owner))
        low, high = int(lag_min[start:stop].min()), int(lag_max[start:stop].max())
        y = windows[start:stop]
        heads = torch.from_numpy(length - lag_max[start:stop]).to(device)
        head = torch.where(positions < heads[:, None], y, 0.0)
        power = (head * head).sum(1)
        # Numerators one head sample at a time: a product of all lags' windows at once would copy each
        # frame (high - low) times.
        padded = F.pad(y, (0, high))
        numerators = torch.zeros(len(y), high - low, dtype=y.dtype, device=device)
        for i in range(length - int(lag_max[start:stop].min())):
            numerators.addcmul_(padded[:, low + i:high + i], head[:, i:i + 1])
        # Each lag's window energy from running sums: a window of exact zeros still gives exactly 0 (and a
        # NaN NCCF, as in pYAAPT), others agree to rounding.
        running = F.pad(torch.cumsum(y * y, 1), (1, high))
        starts = torch.arange(low, high, device=device)
        energies = running.gather(1, starts + heads[:, None]) - running[:, low:high]
        phi = (numerators / torch.sqrt(energies * power[:, None])).cpu().numpy()
        cpu.time_candidates_from_phi(phi, low, (lag_min[start:stop], lag_max[start:stop]), geo,
                                     pitch[:, start:stop], merit[:, start:stop])
    bounds = np.cumsum([0] + counts)
    return {b: (pitch[:, bounds[i]:bounds[i + 1]], merit[:, bounds[i]:bounds[i + 1]]) for i, b in enumerate(utterances)}
