"""Synthetic voices that stress an F0 tracker, at 16 kHz: octave jumps, creak, digital silence, clipping.

Each voice is a glottal pulse train (one pulse per period of an F0 contour, through a -6 dB/octave
glottal filter) shaped by formant resonators, with voiceless stretches of filtered noise, exact
zeros for silence and a little background noise elsewhere. Used by the YAAPT parity tests and
``benchmarks/f0.py``; seeded, so every run analyses the same samples.
"""
from __future__ import annotations

import numpy as np
import scipy.signal


SAMPLE_RATE = 16000
VOWELS = {"a": [(700, 90), (1200, 110), (2600, 160)], "i": [(300, 60), (2300, 120), (3000, 180)],
          "u": [(350, 70), (800, 90), (2400, 160)]}


def _formants(source: np.ndarray, formants: list[tuple[float, float]]) -> np.ndarray:
    for frequency, bandwidth in formants:
        radius = np.exp(-np.pi * bandwidth / SAMPLE_RATE)
        theta = 2 * np.pi * frequency / SAMPLE_RATE
        source = scipy.signal.lfilter([1 - radius], [1, -2 * radius * np.cos(theta), radius ** 2], source)
    return source


def _pulses(f0: np.ndarray, rng: np.random.Generator, jitter: float, alternate: float) -> np.ndarray:
    """One pulse where the phase of the F0 contour (Hz per sample) passes an integer; ``jitter`` moves
    each pulse by up to that fraction of its period, ``alternate`` weakens every other pulse (creak)."""
    phase = np.cumsum(f0 / SAMPLE_RATE)
    onsets = np.flatnonzero(np.diff(np.floor(phase), prepend=0.0) > 0)
    source = np.zeros(len(f0))
    for index, onset in enumerate(onsets):
        period = SAMPLE_RATE / max(f0[onset], 1.0)
        position = int(np.clip(onset + rng.uniform(-jitter, jitter) * period, 0, len(f0) - 1))
        source[position] += 1.0 - alternate * (index % 2)
    return scipy.signal.lfilter([1.0], [1.0, -0.95], source)


def voice(segments: list[tuple], seed: int = 0, clip: float | None = None) -> np.ndarray:
    """Float32 samples, peak 0.95, of ``segments``: ``("voiced", seconds, f0_start, f0_end, vowel)``
    (an F0 glide), ``("creak", seconds, f0, vowel)`` (irregular, alternating pulses), ``("noise", seconds)``
    (a voiceless fricative) or ``("silence", seconds)`` (exact zeros). ``clip``: hard clipping at this
    fraction of the peak before the final scaling."""
    rng = np.random.default_rng(seed)
    parts, silent = [], []
    for kind, seconds, *rest in segments:
        n = int(seconds * SAMPLE_RATE)
        if kind == "voiced":
            f0_start, f0_end, vowel = rest
            part = _formants(_pulses(np.linspace(f0_start, f0_end, n), rng, 0.01, 0.0), VOWELS[vowel])
        elif kind == "creak":
            f0, vowel = rest
            contour = f0 * (1 + 0.25 * rng.standard_normal(n // 400 + 1)).repeat(400)[:n].clip(0.5, 1.5)
            part = _formants(_pulses(contour, rng, 0.15, 0.6), VOWELS[vowel])
        elif kind == "noise":
            part = scipy.signal.lfilter([1, -1], [1], rng.standard_normal(n)) * 0.3
        elif kind == "silence":
            part = np.zeros(n)
        else:
            raise ValueError(f"unknown segment kind {kind!r}")
        part = part / max(np.max(np.abs(part)), 1e-12)
        parts.append(part)
        silent.append(np.full(n, kind == "silence"))
    signal = np.concatenate(parts)
    signal = np.where(np.concatenate(silent), 0.0, signal + 0.003 * rng.standard_normal(len(signal)))
    if clip is not None:
        signal = np.clip(signal, -clip * np.max(np.abs(signal)), clip * np.max(np.abs(signal)))
    return (signal / np.max(np.abs(signal)) * 0.95).astype(np.float32)


def stress_voices() -> dict[str, np.ndarray]:
    """The named voices of the parity set (about 17 s in all)."""
    return {
        "octave_jumps": voice([("voiced", 0.5, 120, 125, "a"), ("voiced", 0.5, 250, 240, "a"),
                               ("voiced", 0.4, 120, 110, "i"), ("voiced", 0.4, 220, 230, "u")], seed=1),
        "octave_glide": voice([("voiced", 0.8, 95, 190, "a"), ("voiced", 0.6, 380, 300, "i")], seed=2),
        "creak": voice([("voiced", 0.4, 110, 100, "a"), ("creak", 0.7, 45, "a"), ("voiced", 0.4, 95, 90, "u")],
                       seed=3),
        "creaky_female": voice([("voiced", 0.5, 210, 190, "i"), ("creak", 0.5, 70, "i"), ("noise", 0.2),
                                ("voiced", 0.5, 200, 230, "a")], seed=4),
        "silences": voice([("silence", 0.3), ("voiced", 0.5, 150, 160, "a"), ("silence", 0.25),
                           ("voiced", 0.45, 200, 180, "u"), ("silence", 0.35)], seed=5),
        "clipped": voice([("noise", 0.15), ("voiced", 0.7, 130, 170, "a"), ("noise", 0.15),
                          ("voiced", 0.6, 160, 120, "i")], seed=6, clip=0.2),
        "clipped_octave": voice([("voiced", 0.6, 180, 175, "u"), ("voiced", 0.6, 90, 88, "u")], seed=7, clip=0.35),
        "fricatives": voice([("noise", 0.25), ("voiced", 0.5, 240, 260, "i"), ("noise", 0.2),
                             ("voiced", 0.5, 260, 200, "a"), ("noise", 0.2)], seed=8),
        "low_male": voice([("voiced", 0.9, 100, 80, "u"), ("creak", 0.4, 40, "u")], seed=9),
        "high": voice([("voiced", 0.9, 310, 390, "i"), ("silence", 0.1), ("voiced", 0.5, 350, 360, "a")], seed=10),
    }
