"""F0 as SA-toolkit computes it for the VoicePrivacy 2024 baselines B5 and B6, and its utterance CMVN.

B5/B6 (SA-toolkit's ``hifigan_bn_tdnnf_*`` tags) were trained on the F0 of SA-toolkit's own TorchScript
port of YAAPT (``satools/satools/hifigan/yaapt.py``), not on pYAAPT: the port band-passes with two biquads
(a 50 Hz low-pass, then a 1500 Hz high-pass: the two cut-offs are swapped, so the filtered signal is
what leaks through both), does not decimate, keeps only the first NCCF peak of each time-domain frame,
subtracts each time-domain frame's mean in place (so each frame also shifts the overlap of the next one),
"interpolates" the spectral track by stretching its non-zero values over the frames, and its dynamic
programme transposes the transition matrix when it accumulates costs. This module computes the same
thing, vectorised over frames and batched over utterances (two dynamic programmes step frame by frame,
in step over the batch), on CPU or GPU, in float32 like the original. The test-only transcription of the
original, ``tests/reference/sa_yaapt.py``, is what it is tested against.

Every stage but one performs the port's float32 operations on the same values, so it gives the port's
values bit for bit on the same machine. The exception is the NCCF of the time-domain frames: all frames go
through one grouped convolution, which rounds differently (by 2.4e-6 at most on the demo corpus), so the
frames where that could change a decision, and the near-silent frames where the port's own arithmetic
loses its precision, are computed again with the port's operations. What remains is a rounding of NCCF
merits that can tip a near-tie of the final dynamic programme: on the demo corpus 179 of 182 tracks are
bit-identical to the port's and the other three differ in one frame each.

B5/B6's settings (``egs/vc/libritts/local/tuning/hifigan.py``): 35 ms frames every 20 ms, a 25 ms
time-domain frame and ``nccf_thresh1=0.25``, YAAPT's defaults otherwise, at 16 kHz. The port zero-pads
half a frame (280 samples) on each side, so an utterance of n samples gets ``ceil(n / 320)`` frames,
frame k centred on sample 320·k: :func:`sa_toolkit_f0_frames`.

Inference normalises that F0 with ``satools.cmvn.UttCMVN(var_norm=True, keep_zeros=True)``: the voiced
(non-zero) values minus their mean, over ``sqrt(unbiased variance + 1e-6)``, zeros kept. The statistics
are those of the tensor it is given: one utterance when the model converts one utterance, all the
utterances of the batch pooled when it converts a batch (the VPC 2024 recipe converts batches of 8).
:func:`normalise_f0` is the per-utterance form, :func:`normalise_f0_pooled` the pooled one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
import torchaudio.functional

from .params import SA_TOOLKIT_B5_B6, SaToolkitYaaptParams

MIN_FRAMES = 4
"""The port reads its spectral track's fourth frame: shorter inputs get an all-unvoiced track."""




@dataclass(frozen=True)
class _Plan:
    """Sample and bin counts derived from the parameters at one sample rate, as the port derives them."""

    params: SaToolkitYaaptParams
    sample_rate: int
    pad: int
    frame_size: int
    hop: int
    nlfer_bins: tuple[int, int]
    delta: float
    shc_half_window: int
    shc_window: int
    shc_lags: tuple[int, int]
    peak_center: int
    peak_width: int
    peak_lags: tuple[int, int]
    tda_length: int
    windows: dict = field(default_factory=dict, compare=False, hash=False)

    def window(self, name: str, device: torch.device) -> torch.Tensor:
        key = (name, str(device))
        if key not in self.windows:
            if name == "hann":  # built on the CPU so that every device sees the same values
                values = torch.hann_window(self.frame_size + 2)[1:-1]
            else:
                values = torch.kaiser_window(2 * self.frame_size, periodic=True, beta=0.5)
            self.windows[key] = values.to(device)
        return self.windows[key]


@lru_cache(maxsize=16)
def _plan(params: SaToolkitYaaptParams, sample_rate: int) -> _Plan:
    if sample_rate < 1000:
        raise ValueError(f"sample rate {sample_rate} Hz is too low for F0 analysis")
    # float32 rounding where the port rounds through a float32 tensor
    frame_size = math.floor(float(np.float32(params.frame_length_ms * sample_rate / 1000)))
    hop = math.floor(float(np.float32(params.frame_space_ms * sample_rate / 1000)))
    if not 15 < frame_size < 2048 or hop < 1:
        raise ValueError(f"a {params.frame_length_ms} ms frame is {frame_size} samples at {sample_rate} Hz; "
                         "the port needs 16 to 2047 (and a frame space of at least one sample)")
    nfft = params.fft_length
    low_bin = round(float(np.float32(np.float32(params.f0_min * 2 / sample_rate) * np.float32(nfft))))
    high_bin = round(float(np.float32(np.float32(params.f0_max / sample_rate) * np.float32(nfft))))
    delta = sample_rate / nfft
    window_length = math.floor(params.shc_window / delta)
    half_window = math.floor(window_length / 2)
    if not window_length % 2:
        window_length += 1
    max_shc = math.floor((params.f0_max + params.shc_pwidth * 2) / delta)
    min_shc = math.ceil(params.f0_min / delta)
    width = math.floor(params.shc_pwidth / delta)
    if not width % 2:
        width += 1
    center = math.ceil(width / 2)
    min_lag = max(1, math.floor(params.f0_min / delta - center))
    max_lag = min(math.floor(params.f0_max / delta + center), max_shc - width)
    tda_length = int(params.tda_frame_length_ms * sample_rate / 1000)
    if tda_length - (math.floor(sample_rate / params.f0_min) + params.nccf_pwidth // 2) <= 0:
        raise ValueError("the time-domain frame is shorter than the longest lag searched: increase "
                         "tda_frame_length_ms or f0_min")
    if (params.shc_numharms + 1) * max_shc + window_length - half_window > nfft // 2 + 1:
        raise ValueError("fft_length is too short for the harmonics searched")
    return _Plan(params, sample_rate, int(params.frame_length_ms / 1000 * sample_rate) // 2, frame_size, hop,
                 (low_bin, high_bin), delta, half_window, window_length, (min_shc, max_shc), center, width,
                 (min_lag, max_lag), tda_length)


def sa_toolkit_f0_frames(n_samples: int, sample_rate: int = 16000,
                         params: SaToolkitYaaptParams = SA_TOOLKIT_B5_B6) -> int:
    """Frames in the F0 track of ``n_samples`` samples: ``ceil(n_samples / 320)`` with B5/B6's settings at 16 kHz."""
    plan = _plan(params, sample_rate)
    half = plan.frame_size // 2
    return len(range(half, n_samples + 2 * plan.pad - half, plan.hop))


def sa_toolkit_f0(audio, sample_rate: int = 16000, params: SaToolkitYaaptParams = SA_TOOLKIT_B5_B6, *,
                  device: str | torch.device = "cpu", batch_size: int = 32):
    """F0 in Hz (0 = unvoiced), float32, as SA-toolkit's YAAPT port computes it; B5/B6's settings by default.

    ``audio`` is one mono float waveform in [-1, 1] (a 1-D array or tensor) or a sequence of them; the
    result is one array, or a list in the same order. A waveform of n samples gives
    :func:`sa_toolkit_f0_frames` values (``ceil(n / 320)`` for B5/B6 at 16 kHz). Utterances are analysed
    in length-sorted batches of ``batch_size`` on ``device``; batching changes no decision (merits may
    round differently on some CPUs, see the module notes).

    Inputs the port cannot analyse get an all-unvoiced track instead of the port's exception: fewer than
    :data:`MIN_FRAMES` frames (60 ms at 16 kHz), and signals in which no frame shows a harmonic spectrum
    (digital silence, a constant). An empty, multi-channel, integer or non-finite waveform raises
    ``ValueError`` naming its position, before anything is computed.
    """
    single = isinstance(audio, np.ndarray | torch.Tensor) and audio.ndim == 1
    waves = [_as_tensor(wave, index) for index, wave in enumerate([audio] if single else audio)]
    device = torch.device(device)
    tracks: list[np.ndarray | None] = [None] * len(waves)
    order = sorted(range(len(waves)), key=lambda index: len(waves[index]))
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        batch = sa_toolkit_f0_batch([waves[index].to(device) for index in chunk], sample_rate, params)
        for index, track in zip(chunk, batch):
            tracks[index] = track.cpu().numpy()
    return tracks[0] if single else tracks


def _as_tensor(wave, index: int) -> torch.Tensor:
    return torch.from_numpy(check_waveform(wave, index).astype(np.float32))


def check_waveform(wave, index: int = 0) -> np.ndarray:
    """``wave`` as an array, if the port can take it: a non-empty mono float waveform of finite samples;
    else ``ValueError`` naming its position ``index``."""
    if isinstance(wave, torch.Tensor):
        wave = wave.detach().cpu().numpy()
    wave = np.asarray(wave)
    if wave.ndim != 1 or wave.size == 0:
        raise ValueError(f"audio {index}: expected a non-empty mono waveform, got shape {wave.shape}")
    if not np.issubdtype(wave.dtype, np.floating):
        raise ValueError(f"audio {index}: expected float samples in [-1, 1], got {wave.dtype}")
    if not np.isfinite(wave).all():
        raise ValueError(f"audio {index}: the waveform contains NaN or infinite samples")
    return wave


@torch.no_grad()
def sa_toolkit_f0_batch(waves: Sequence[torch.Tensor], sample_rate: int = 16000,
                        params: SaToolkitYaaptParams = SA_TOOLKIT_B5_B6) -> list[torch.Tensor]:
    """F0 tracks of a batch of finite float32 1-D waveforms on one device, there (see :func:`sa_toolkit_f0`)."""
    plan = _plan(params, sample_rate)
    device = waves[0].device
    frames = [sa_toolkit_f0_frames(len(wave), sample_rate, params) for wave in waves]
    tracks = [torch.zeros(count, device=device) for count in frames]
    live = [index for index, count in enumerate(frames) if count >= MIN_FRAMES]
    if not live:
        return tracks
    lengths = [len(waves[index]) + 2 * plan.pad for index in live]
    counts = torch.tensor([frames[index] for index in live], device=device)
    # Room for the spectral track's double-length frames past the last frame, all zeros.
    width = max((count - 1) * plan.hop + 2 * plan.frame_size for count in counts.tolist())
    padded = torch.zeros(2 * len(live), max(width, max(lengths)), device=device)
    for row, index in enumerate(live):
        padded[row, plan.pad:plan.pad + len(waves[index])] = waves[index]
    padded[len(live):] = padded[:len(live)] ** 2
    filtered = _band_pass(padded, plan)
    # The port filters each signal alone: what the filters ring on after its end is not its signal.
    row_lengths = torch.tensor(lengths * 2, device=device)
    filtered = filtered * (torch.arange(filtered.shape[1], device=device) < row_lengths[:, None])
    signal, nonlinear = filtered[:len(live)], filtered[len(live):]

    energy, voiced = _nlfer(plan, signal, counts)
    spec_pitch, pitch_std, has_voiced = _spec_track(plan, nonlinear, voiced, counts)
    if not any(has_voiced):
        return tracks
    time_tracks = _time_track(plan, filtered, spec_pitch.repeat(2, 1), pitch_std.repeat(2),
                              lengths * 2, counts.repeat(2))
    time_pitch = torch.cat([time_tracks[0][:len(live)], time_tracks[0][len(live):]], 1)
    time_merit = torch.cat([time_tracks[1][:len(live)], time_tracks[1][len(live):]], 1)
    ref_pitch, ref_merit = _refine(plan, time_pitch, time_merit, spec_pitch, energy, voiced, counts)
    final = _dynamic(plan, ref_pitch, ref_merit, energy, counts)
    for row, index in enumerate(live):
        if has_voiced[row]:
            tracks[index] = final[row, :frames[index]].clone()
    return tracks


def _biquad(signals: torch.Tensor, sample_rate: int, cutoff: float, highpass: bool) -> torch.Tensor:
    """torchaudio's ``lowpass_biquad``/``highpass_biquad`` (same coefficient arithmetic, so the same values) on
    every row at once: with one filter per row, torchaudio convolves the batch as channels, several times faster."""
    w0 = 2 * math.pi * torch.as_tensor(cutoff, dtype=signals.dtype, device=signals.device) / sample_rate
    alpha = torch.sin(w0) / 2 / torch.as_tensor(0.707, dtype=signals.dtype, device=signals.device)
    cosine = torch.cos(w0)
    b0 = (1 + cosine) / 2 if highpass else (1 - cosine) / 2
    numerator = torch.stack([b0, -1 - cosine if highpass else 1 - cosine, b0])
    denominator = torch.stack([1 + alpha, -2 * cosine, 1 - alpha])
    rows = len(signals)
    return torchaudio.functional.lfilter(signals, denominator.expand(rows, 3), numerator.expand(rows, 3),
                                         clamp=True, batching=True)


def _band_pass(signals: torch.Tensor, plan: _Plan) -> torch.Tensor:
    """The port's filter: ``bp_low`` (50 Hz) as a low-pass cut-off, then ``bp_high`` (1500 Hz) as a high-pass one."""
    low_passed = _biquad(signals, plan.sample_rate, plan.params.bp_low, highpass=False)
    return _biquad(low_passed, plan.sample_rate, plan.params.bp_high, highpass=True)


def _frame_mask(counts: torch.Tensor, total: int) -> torch.Tensor:
    return torch.arange(total, device=counts.device) < counts[:, None]


def _nlfer(plan: _Plan, signal: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Low-band spectral energy of each frame over the utterance's mean (NLFER), and the frames above threshold."""
    total = int(counts.max())
    mask = _frame_mask(counts, total)
    window = plan.window("hann", signal.device)
    low, high = plan.nlfer_bins
    framed = signal.unfold(1, plan.frame_size, plan.hop)[:, :total][mask]
    energy = torch.zeros(mask.shape, device=signal.device)
    energy[mask] = torch.cat([torch.fft.rfft(chunk * window, plan.params.fft_length)[:, low - 1:high].abs().sum(-1)
                              for chunk in framed.split(512)])
    means = torch.stack([row[:count].mean() for row, count in zip(energy, counts.tolist())])
    energy = torch.where(mask, energy / means[:, None], 0.0)
    return energy, (energy > plan.params.nlfer_thresh1) & mask


def _harmonic_products(plan: _Plan, frames: torch.Tensor) -> torch.Tensor:
    """Spectral harmonic correlation of windowed frames, laid out as the port's length-``max_SHC`` array."""
    params, device = plan.params, frames.device
    min_shc, max_shc = plan.shc_lags
    harmonics = params.shc_numharms + 1
    rows = max_shc - min_shc + 1
    frames = frames * plan.window("kaiser", device)
    frames = frames - frames.mean(-1, keepdim=True)
    # Only the bins the harmonics reach (the port takes magnitudes of all of them).
    needed = harmonics * max_shc + plan.shc_window - plan.shc_half_window
    spectrum = torch.fft.rfft(frames, params.fft_length)[:, :needed]
    magnitude = F.pad(spectrum.abs(), (plan.shc_half_window, 0)).contiguous()
    width = magnitude.shape[1]
    product = None
    for harmonic in range(1, harmonics + 1):
        # Window c of row r of harmonic h is magnitude[h * (min_shc + r) + c], as the port's strided views.
        values = magnitude.as_strided((len(magnitude), rows, plan.shc_window), (width, harmonic, 1),
                                      magnitude.storage_offset() + harmonic * min_shc)
        product = values if product is None else product * values
    return F.pad(product.sum(-1), (min_shc - 1, 0))


def _shc_peaks(plan: _Plan, shc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The port's ``peaks``: up to ``shc_maxpeaks`` F0 candidates and merits per frame (zeros/ones if none)."""
    params, center = plan.params, plan.peak_center
    min_lag, max_lag = plan.peak_lags
    top = shc[:, min_lag:max_lag + 1].amax(1, keepdim=True)
    shc = torch.where(top > 1e-14, shc / top, shc)
    average = shc[:, min_lag:max_lag + 1].mean(1)
    lags = torch.arange(min_lag + center + 1, max_lag - center + 1, device=shc.device)
    values = shc[:, lags]
    peaked = ((values > shc[:, lags - 1]) & (values > shc[:, lags + 1])
              & (values > params.shc_thresh2 * average[:, None])
              & (shc.unfold(1, 2 * center + 1, 1)[:, lags - center].argmax(-1) == center))
    merit_order = torch.where(peaked, values, -1.0).sort(dim=1, descending=True, stable=True).indices
    count = peaked.sum(1)
    best_merit = torch.where(count > 0, values.gather(1, merit_order[:, :1])[:, 0], 0.0)
    unvoiced = (average > 1 / params.shc_thresh1) | (count == 0) | (best_merit / average < params.shc_thresh1)

    maxpeaks = params.shc_maxpeaks
    slots = torch.arange(maxpeaks, device=shc.device)
    kept = merit_order[:, :maxpeaks]
    if kept.shape[1] < maxpeaks:
        kept = F.pad(kept, (0, maxpeaks - kept.shape[1]))
    valid = slots < count[:, None]
    pitch = torch.where(valid, (lags[kept].double() * plan.delta).float(), 0.0)
    merit = torch.where(valid, values.gather(1, kept), 0.0)
    first_pitch, first_merit = pitch[:, :1], merit[:, :1]
    filled = torch.clamp(count, max=maxpeaks)[:, None]
    for condition, extra in ((first_pitch > params.f0_double, first_pitch / 2.0),
                             (first_pitch < params.f0_half, first_pitch * 2.0)):
        filled = torch.where(condition, torch.clamp(filled + 1, max=maxpeaks), filled)
        slot = condition & (slots == filled - 1)
        pitch = torch.where(slot, extra, pitch)
        merit = torch.where(slot, params.merit_extra, merit)
    pitch = torch.where(slots >= filled, first_pitch, pitch)
    merit = torch.where(slots >= filled, first_merit, merit)
    unvoiced = unvoiced[:, None]
    return torch.where(unvoiced, 0.0, pitch), torch.where(unvoiced, 1.0, merit)


def _median_filter(values: torch.Tensor, kernel: int) -> torch.Tensor:
    """The port's zero-padded running median along the last axis (rows must be zero past their end)."""
    padded = F.pad(values, (kernel // 2, kernel // 2))
    return padded.unfold(-1, kernel, 1).median(-1).values


def _best_path(local: torch.Tensor, trans: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The port's ``path1`` on a batch: local costs (B, n, T), transition costs (B, n, n, T), T per row.

    Its recursion is kept as written: candidate a's predecessor minimises ``cost[c] + trans[a, c]`` but
    then adds ``trans[c, a]``; ties go to the last candidate.
    """
    batch, n, total = local.shape
    cost = local[:, :, 0]
    predecessors = torch.zeros(batch, n, total, dtype=torch.long, device=local.device)
    last = torch.zeros(batch, dtype=torch.long, device=local.device)
    for step in range(1, total):
        step_trans = trans[..., step]
        best = n - 1 - (cost[:, None, :] + step_trans).flip(2).argmin(2)
        predecessors[:, :, step] = best
        cost = cost.gather(1, best) + step_trans.gather(1, best[:, None, :])[:, 0] + local[:, :, step]
        last = torch.where(counts - 1 == step, n - 1 - cost.flip(1).argmin(1), last)
    path = torch.zeros(batch, total, dtype=torch.long, device=local.device)
    path[:, total - 1] = last
    for step in range(total - 2, -1, -1):
        following = predecessors[:, :, step + 1].gather(1, path[:, step + 1:step + 2])[:, 0]
        path[:, step] = torch.where(counts - 1 == step, last, torch.where(step < counts - 1, following, 0))
    return path


def _std(values: torch.Tensor) -> torch.Tensor:
    """Unbiased standard deviation, NaN below two values (as torch gives, without its warning)."""
    return values.std() if len(values) > 1 else values.new_tensor(math.nan)


def _ragged(rows: list[torch.Tensor], total: int) -> torch.Tensor:
    """Rows of different lengths (along the last axis) zero-padded to ``total``."""
    return torch.stack([F.pad(row, (0, total - row.shape[-1])) for row in rows])


def _spec_track(plan: _Plan, nonlinear: torch.Tensor, voiced: torch.Tensor, counts: torch.Tensor):
    """The port's ``spec_trk``: the spectral F0 track of every frame, its spread, and whether any frame was voiced."""
    params, device = plan.params, nonlinear.device
    batch, total = voiced.shape
    rows, columns = voiced.nonzero(as_tuple=True)
    maxpeaks = params.shc_maxpeaks
    cand_pitch = torch.zeros(batch, maxpeaks, total, device=device)
    cand_merit = torch.ones(batch, maxpeaks, total, device=device)
    frame_offsets = torch.arange(2 * plan.frame_size, device=device)
    for chunk_rows, chunk_columns in zip(rows.split(256), columns.split(256)) if len(rows) else ():
        frames = nonlinear[chunk_rows[:, None], chunk_columns[:, None] * plan.hop + frame_offsets]
        pitch, merit = _shc_peaks(plan, _harmonic_products(plan, frames))
        cand_pitch[chunk_rows, :, chunk_columns] = pitch
        cand_merit[chunk_rows, :, chunk_columns] = merit

    kernel = max(1, params.median_value - 2)
    voiced_frames = [(cand_pitch[row, 0] > 0).nonzero()[:, 0] for row in range(batch)]
    n_voiced = torch.tensor([len(frames) for frames in voiced_frames], device=device)
    longest = int(n_voiced.max())
    has_voiced = (n_voiced > 0).tolist()
    spec_pitch = torch.zeros(batch, total, device=device)
    pitch_std = torch.full((batch,), math.nan, device=device)
    if longest == 0:
        return spec_pitch, pitch_std, has_voiced
    pitch = _ragged([cand_pitch[row][:, frames] for row, frames in enumerate(voiced_frames)], longest)
    merit = _ragged([cand_merit[row][:, frames] for row, frames in enumerate(voiced_frames)], longest)
    first = [pitch[row, 0, :count] for row, count in enumerate(n_voiced.tolist())]
    average = torch.stack([values.mean() if len(values) else values.new_tensor(math.nan) for values in first])
    spread = torch.stack([_std(values) for values in first])

    # Replace each frame's candidate nearest 0.8 x the mean by the median-smoothed choice.
    choice = ((pitch - 0.8 * average[:, None, None]).abs() * (3 - merit)).argmin(1, keepdim=True)
    pitch = pitch.scatter(1, choice, _median_filter(pitch.gather(1, choice), kernel))

    # dynamic5: the lowest-cost path through the candidates.
    jumps = (pitch[:, None, :, 1:] - pitch[:, :, None, :-1]).abs() / params.f0_min
    trans = F.pad(0.05 * jumps + jumps ** 2, (1, 0)) * (params.dp5_k1 * spread / average)[:, None, None, None]
    path = _best_path(1 - merit, trans, n_voiced)
    smoothed = _median_filter(pitch.gather(1, path[:, None])[:, 0] * _frame_mask(n_voiced, longest), kernel)

    for row, frames in enumerate(voiced_frames):
        count = len(frames)
        if count == 0:
            continue
        track = smoothed[row, :count] if count > 2 else smoothed.new_full((count,), 150.0)
        mean = track.mean()
        pitch_std[row] = torch.maximum(_std(track), mean * mean.new_tensor(params.spec_pitch_min_std))
        row_pitch = torch.zeros(int(counts[row]), device=device)
        row_pitch[frames] = track
        for end in (0, -1):
            if row_pitch[end] < mean / 2:
                row_pitch[end] = mean
        stretched = F.interpolate(row_pitch[row_pitch != 0][None, None], size=(len(row_pitch),),
                                  mode="linear")[0, 0]
        stretched[0], stretched[1] = stretched[2].clone(), stretched[3].clone()
        spec_pitch[row, :len(stretched)] = stretched
    return spec_pitch, pitch_std, has_voiced


def _time_track(plan: _Plan, signals: torch.Tensor, spec_pitch: torch.Tensor, pitch_std: torch.Tensor,
                lengths: list[int], counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The port's ``tm_trk``: NCCF candidates of every time-domain frame, merit-weighted by the spectral track."""
    params, device = plan.params, signals.device
    batch, total = spec_pitch.shape
    length, hop = plan.tda_length, plan.hop
    n_frames = torch.tensor([min(int((size - (length - hop)) / hop), int(count))
                             for size, count in zip(lengths, counts.tolist())], device=device)
    mask = _frame_mask(n_frames, total)
    low = torch.maximum(spec_pitch - 2.0 * pitch_std[:, None], spec_pitch.new_tensor(params.f0_min))
    high = torch.minimum(spec_pitch + 2.0 * pitch_std[:, None], spec_pitch.new_tensor(params.f0_max))
    shortest_lag = torch.floor(torch.reciprocal(high) * plan.sample_rate)
    longest_lag = torch.floor(torch.reciprocal(low) * plan.sample_rate)
    analysed = mask & ~shortest_lag.isnan() & ~longest_lag.isnan()
    half = params.nccf_pwidth // 2
    lag_min = torch.where(analysed, shortest_lag - half, 0).long()
    lag_max = torch.where(analysed, longest_lag + half, 1).long()

    # Each analysed frame subtracts its mean in place, over the overlap with the next frame too.
    data = signals.clone()
    means = torch.zeros(batch, total, device=device)
    for index in range(int(n_frames.max())):
        segment = data[:, index * hop:index * hop + length]
        means[:, index] = torch.where(analysed[:, index], segment.mean(1), 0.0)
        segment -= means[:, index, None]

    time_pitch = torch.zeros(batch, params.nccf_maxcands, total, device=device)
    time_merit = torch.zeros(batch, params.nccf_maxcands, total, device=device)
    rows, columns = analysed.nonzero(as_tuple=True)
    if len(rows):
        first_lag, last_lag = int(lag_min[rows, columns].min()), int(lag_max[rows, columns].max())
        offsets = torch.arange(length, device=device)
        for chunk_rows, chunk_columns in zip(rows.split(256), columns.split(256)):
            # Each frame as it was when analysed: earlier frames' means off its head, then its own.
            frames = signals[chunk_rows[:, None], chunk_columns[:, None] * hop + offsets]
            for back in range((length - 1) // hop, 0, -1):
                earlier = (chunk_columns - back).clamp(min=0)
                frames[:, :length - back * hop] -= torch.where(
                    chunk_columns >= back, means[chunk_rows, earlier], 0.0)[:, None]
            frames -= means[chunk_rows, chunk_columns, None]
            pitch, merit = _nccf_candidate(plan, frames, lag_min[chunk_rows, chunk_columns],
                                           lag_max[chunk_rows, chunk_columns], first_lag, last_lag)
            time_pitch[chunk_rows, 0, chunk_columns] = pitch
            time_merit[chunk_rows, 0, chunk_columns] = merit

    spec = spec_pitch[:, None, :] * mask[:, None, :]
    freq_thresh = (5.0 * pitch_std)[:, None, None]
    diff = (time_pitch - spec).abs()
    match = (1 - diff / freq_thresh) * (diff < freq_thresh)
    time_merit = ((1 + params.merit_boost) * time_merit) * match
    keep = mask[:, None, :]
    return torch.where(keep, time_pitch, 0.0), torch.where(keep, time_merit, 0.0)


def _nccf_candidate(plan: _Plan, frames: torch.Tensor, lag_min: torch.Tensor, lag_max: torch.Tensor,
                    first_lag: int, last_lag: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The port's ``crs_corr`` and ``cmp_rate``: each frame's first NCCF peak above threshold, if it qualifies.

    The NCCF is computed for all frames at once, over the lags ``first_lag - center - 1`` to
    ``last_lag + center`` (zero outside each frame's own range, as in the port). Frames whose decision a
    rounding difference could change (a comparison or a threshold within ``_NCCF_TOLERANCE``; near-silent
    frames) are computed again with the port's own arithmetic, so that they decide as it does.
    """
    params, device = plan.params, frames.device
    count, length = frames.shape
    used = length - lag_max  # the port correlates the first length - lag_max samples
    width = int(used.max())
    head = frames[:, :width] * (torch.arange(width, device=device) < used[:, None])
    # Each frame's lagged samples against its head: one grouped convolution.
    signals = F.pad(frames, (0, max(0, last_lag + width - 1 - length)))[None, :, first_lag:last_lag + width - 1]
    kernels = head[:, None]
    if signals.is_cuda:  # cuDNN may convolve float32 in TF32, far less precise than the tolerance below
        signals, kernels = signals.double(), kernels.double()
    numerator = F.conv1d(signals, kernels, groups=count)[0].float()
    lags = torch.arange(first_lag, last_lag, device=device)
    squares = F.pad((frames.double() ** 2).cumsum(1), (1, 0))
    lagged_energy = (squares.gather(1, (lags + used[:, None]).clamp(max=length))
                     - squares.gather(1, lags.clamp(max=length).expand(count, -1))).float()
    head_energy = (head * head).sum(1, keepdim=True)
    in_range = (lags >= lag_min[:, None]) & (lags < lag_max[:, None])
    center = params.nccf_pwidth // 2
    margin = center + 1
    phi = F.pad(torch.where(in_range, numerator / torch.sqrt(lagged_energy * head_energy + 0.0), 0.0),
                (margin, margin))
    window = torch.arange(first_lag - margin, last_lag + margin, device=device)
    inner = (window >= lag_min[:, None] + center) & (window <= lag_max[:, None] - center)

    taken, peak, fragile = _nccf_decision(phi, inner, center, params, _NCCF_TOLERANCE)
    # Near-silent frames: the port's float32 energy product nears the subnormal range and loses its precision.
    fragile |= (head_energy[:, 0] < _FAINT_ENERGY) | (in_range & (lagged_energy < _FAINT_ENERGY)).any(1)
    rows = fragile.nonzero()[:, 0]
    if len(rows):
        start = first_lag - margin
        phi[rows] = torch.stack([F.pad(_exact_nccf(frames[row], int(lag_min[row]), int(lag_max[row])),
                                       (0, 2 * margin))[start:start + phi.shape[1]] for row in rows.tolist()])
        taken[rows], peak[rows], _ = _nccf_decision(phi[rows], inner[rows], center, params)
    pitch = (plan.sample_rate / (window[peak] + 1).double()).float()
    merit = phi.gather(1, peak[:, None])[:, 0]
    merit = torch.where(merit > 1.0, merit / merit, merit)
    return torch.where(taken, pitch, 0.0), torch.where(taken, merit, 0.0)


_NCCF_TOLERANCE = 1e-4
"""Far above the rounding of the batched NCCF (2.4e-6 at most on the demo corpus, faint frames apart), far below
the gaps between NCCF values."""
_FAINT_ENERGY = 1e-17
"""Below this energy (of the head or of a lagged window) the port's energy product, 1e-34 or more above it, nears
float32's subnormal range (below 1.2e-38), where its precision goes: such frames are computed as the port does."""


def _nccf_decision(phi: torch.Tensor, inner: torch.Tensor, center: int, params: SaToolkitYaaptParams,
                   tolerance: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The port's ``cmp_rate`` choice on NCCF rows (zero-padded past the searched lags): whether a candidate is
    taken and at which column; with a tolerance, also the rows whose choice a change of ``phi`` below it could
    flip (and those with NaN)."""
    before, after = F.pad(phi, (1, 0))[:, :-1], F.pad(phi, (0, 1))[:, 1:]
    peaks = inner & (phi > before) & (phi > after) & (phi > params.nccf_thresh1)
    found = peaks.any(1)
    peak = peaks.long().argmax(1)  # the port keeps the first peak only
    rows = torch.arange(len(phi), device=phi.device)
    around = F.pad(phi, (center, center)).unfold(1, 2 * center + 1, 1)[rows, peak]
    top = phi.amax(1)
    taken = found & ((top > params.nccf_thresh2) | (around.argmax(1) == center))
    if not tolerance:
        return taken, peak, found
    close = (((phi - before).abs() < tolerance) | ((phi - after).abs() < tolerance)
             | ((phi - params.nccf_thresh1).abs() < tolerance))
    window_tie = ((around - around[:, center:center + 1]).abs() < tolerance).sum(1) > 1
    fragile = ((inner & (phi > params.nccf_thresh1 - tolerance) & close).any(1) | (found & window_tie)
               | ((top - params.nccf_thresh2).abs() < tolerance) | phi.isnan().any(1))
    return taken, peak, fragile


def _exact_nccf(frame: torch.Tensor, lag_min: int, lag_max: int) -> torch.Tensor:
    """One frame's NCCF with the port's ``crs_corr`` arithmetic, operation for operation."""
    used = len(frame) - lag_max
    head = frame[:used]
    lagged = torch.as_strided(frame[lag_min:lag_max + used], (lag_max - lag_min, used), (1, 1))
    phi = torch.zeros(len(frame), device=frame.device)
    phi[lag_min:lag_max] = (torch.matmul(lagged, head.unsqueeze(0).T).squeeze()
                            / torch.sqrt(torch.sum(lagged * lagged, 1) * torch.dot(head, head) + 0.0))
    return phi


def _refine(plan: _Plan, time_pitch: torch.Tensor, time_merit: torch.Tensor, spec_pitch: torch.Tensor,
            energy: torch.Tensor, voiced: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The port's ``refine``: the candidates of both time tracks sorted by merit, plus spectral and smoothed ones."""
    params = plan.params
    cands = time_pitch.shape[1]
    order = (-time_merit).argsort(dim=1, stable=True)
    merit = time_merit.sort(1).values.flip(1)
    pitch = time_pitch.gather(1, order)
    mask = _frame_mask(counts, energy.shape[1])
    best = _median_filter(pitch[:, 0] * mask, params.median_value) * voiced

    quiet = (energy <= params.nlfer_thresh2)[:, None]
    loud = energy > params.nlfer_thresh2
    loud_pitched = (loud & (pitch[:, 0] > 0))[:, None]
    loud_unpitched = (loud & (pitch[:, 0] <= 0))[:, None]
    empty = F.pad((pitch[:, 1:cands - 1] == 0) & loud_pitched, (0, 0, 1, 1))
    slot = torch.arange(cands, device=pitch.device)[None, :, None]
    pitch = torch.where(quiet, 0.0, pitch)
    merit = torch.where(quiet, params.merit_pivot, merit)
    last = loud_pitched & (slot == cands - 1)
    pitch = torch.where(last, 0.0, pitch)
    merit = torch.where(last, 1.0 - merit[:, :1], merit)
    merit = torch.where(empty, 0.0, merit)
    capped_energy = torch.minimum(energy.new_tensor(1.0), energy / 2.0)[:, None]
    pitch = torch.where(loud_unpitched, torch.where(slot == 0, spec_pitch[:, None], 0.0), pitch)
    merit = torch.where(loud_unpitched & (slot == 0), capped_energy, merit)
    merit = torch.where(loud_unpitched & (slot > 0), 1.0 - merit[:, :1], merit)
    pitched = (best > 0)[:, None]
    pitch = torch.where(slot == cands - 2, best[:, None], pitch)
    merit = torch.where(slot == cands - 2, torch.where(pitched, merit[:, :1], 1.0 - capped_energy), merit)
    pitch = torch.where(slot == cands - 3, spec_pitch[:, None], pitch)
    merit = torch.where(slot == cands - 3, (energy / 5.0)[:, None], merit)
    return pitch, merit


def _dynamic(plan: _Plan, pitch: torch.Tensor, merit: torch.Tensor, energy: torch.Tensor,
             counts: torch.Tensor) -> torch.Tensor:
    """The port's ``dynamic``: the final track, the lowest-cost path through the refined candidates."""
    params = plan.params
    best = pitch[:, pitch.shape[1] - 2]
    mean_pitch = torch.stack([row[:count][row[:count] > 0].mean() for row, count in zip(best, counts.tolist())])
    current, previous = pitch[:, None, :, 1:], pitch[:, :, None, :-1]
    both = (current > 0) & (previous > 0)
    one = ((current == 0) & (previous > 0)) | ((current > 0) & (previous == 0))
    neither = (current == 0) & (previous == 0)
    benefit = torch.minimum(energy.new_tensor(1.0), (energy[:, :-1] - energy[:, 1:]).abs())[:, None, None]
    trans = torch.where(both, params.dp_w1 * ((current - previous).abs() / mean_pitch[:, None, None, None]), 1.0)
    trans = torch.where(one, params.dp_w2 * (1 - benefit), trans)
    trans = torch.where(neither, params.dp_w3, trans)
    trans = F.pad(trans, (1, 0), value=1.0) / params.dp_w4
    path = _best_path(1 - merit, trans, counts)
    return pitch.gather(1, path[:, None])[:, 0]


def normalise_f0(f0):
    """B5/B6's F0 normalisation of one utterance (``UttCMVN(var_norm=True, keep_zeros=True)``), or of each of several.

    Voiced values become ``(f0 - mean) / sqrt(var + 1e-6)`` over the utterance's voiced frames (unbiased
    variance), unvoiced ones stay 0; float32 as the original. An all-unvoiced track stays all zeros. With a
    single voiced frame the original's variance is undefined (it gives NaN): that frame becomes 0 here.
    """
    if isinstance(f0, np.ndarray | torch.Tensor) and np.ndim(f0) == 1:
        return normalise_f0_pooled([f0])[0]
    return [normalise_f0_pooled([track])[0] for track in f0]


def normalise_f0_pooled(f0s: Sequence) -> list[np.ndarray]:
    """``UttCMVN`` over several tracks at once, as inference applies it to a batch: one mean and deviation
    from the voiced frames of all of them (the VPC 2024 recipe converts 8 utterances per batch)."""
    tracks = [torch.as_tensor(np.asarray(track, dtype=np.float32)) for track in f0s]
    if any(track.ndim != 1 for track in tracks):
        raise ValueError("each F0 track must be one-dimensional")
    voiced = torch.cat([track[track != 0] for track in tracks]) if tracks else torch.zeros(0)
    if len(voiced) == 0:
        return [track.numpy().copy() for track in tracks]
    mean = voiced.mean()
    std = torch.sqrt(voiced.var() + 1e-6) if len(voiced) > 1 else torch.tensor(math.inf)
    return [torch.where(track != 0, (track - mean) / std, track).numpy() for track in tracks]
