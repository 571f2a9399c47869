"""TD-PSOLA pitch modification to target F0 moments with Praat (parselmouth): the "TDPSOLA" baseline
of Noé 2023 thesis §5.4.

Praat's Manipulation analyses the waveform (autocorrelation pitch every ``time_step`` seconds
between ``f0_min_hz`` and ``f0_max_hz``, glottal pulses) and holds a PitchTier with one point
per voiced analysis frame. The points' values are mapped affinely to the target moments
(:func:`voxanon.models.dsp.f0_transform.map_f0_to_moments`, moments measured over the points, i.e.
over Praat's voiced frames), the tier is replaced and the sound is resynthesised by
time-domain pitch-synchronous overlap-add: pitch periods are moved, not reshaped, so the
spectral envelope is kept. Unvoiced stretches are copied.

Targets below ``f0_min_hz`` (far-low outliers, more than ``(μ − f0_min)/σ`` ≈ 2.6 source
standard deviations below the mean with the defaults) are clamped to ``f0_min_hz``, the lowest
pitch the analysis would accept, so that PSOLA never spaces pulses further apart than that.

Praat's resynthesis is deterministic; its output is padded with zeros or trimmed at the end to
the input length (Praat keeps the duration, so at most a sample or two change).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .f0_transform import VoicedMoments, map_f0_to_moments, voiced_moments

PRAAT_F0_MIN_HZ = 75.0
PRAAT_F0_MAX_HZ = 600.0
PRAAT_TIME_STEP_S = 0.01
"""Praat's standard "To Manipulation" settings."""


@dataclass(frozen=True)
class PsolaResult:
    audio: np.ndarray                 # float32, same length as the input
    source: VoicedMoments | None      # moments of the input's pitch points; None: nothing voiced, audio unchanged


def psola_to_moments(samples: np.ndarray, sample_rate: int, target_mean_hz: float, target_std_hz: float, *,
                     f0_min_hz: float = PRAAT_F0_MIN_HZ, f0_max_hz: float = PRAAT_F0_MAX_HZ,
                     time_step: float = PRAAT_TIME_STEP_S) -> PsolaResult:
    """``samples`` (mono float) with its voiced F0 mapped to ``(target_mean_hz, target_std_hz)`` by TD-PSOLA."""
    import parselmouth
    from parselmouth.praat import call

    samples = np.asarray(samples)
    if samples.ndim != 1 or samples.size == 0:
        raise ValueError(f"PSOLA expects non-empty mono audio (1-D), got shape {samples.shape}")
    if not 0 < f0_min_hz < f0_max_hz:
        raise ValueError(f"pitch range must satisfy 0 < f0_min_hz < f0_max_hz, got {f0_min_hz}, {f0_max_hz}")
    sound = parselmouth.Sound(samples.astype(np.float64), sampling_frequency=sample_rate)
    manipulation = call(sound, "To Manipulation", float(time_step), float(f0_min_hz), float(f0_max_hz))
    tier = call(manipulation, "Extract pitch tier")
    n_points = int(call(tier, "Get number of points"))
    times = [call(tier, "Get time from index", index) for index in range(1, n_points + 1)]
    values = np.array([call(tier, "Get value at index", index) for index in range(1, n_points + 1)])
    source = voiced_moments(values) if n_points else None
    if source is None:
        return PsolaResult(samples.astype(np.float32), None)
    targets = map_f0_to_moments(values, target_mean_hz, target_std_hz, floor_hz=f0_min_hz)
    neutral = call("Create PitchTier", "neutral", sound.xmin, sound.xmax)
    for time, value in zip(times, targets):
        call(neutral, "Add point", float(time), float(value))
    call([neutral, manipulation], "Replace pitch tier")
    output = call(manipulation, "Get resynthesis (overlap-add)").values[0]
    audio = np.zeros(len(samples), dtype=np.float32)
    kept = min(len(samples), len(output))
    audio[:kept] = output[:kept]
    return PsolaResult(audio, source)
