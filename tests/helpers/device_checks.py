"""What the device-path tests hold the CPU device form to, and the settings that run a chain on it."""
from __future__ import annotations

import numpy as np


MIN_CONTENT_COSINE = 0.999


MIN_CONTENT_SNR_DB = 32.0


MIN_WAVE_SNR_DB = 45.0


def voiced_waves() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    waves = []
    for seconds in (0.8, 1.1):
        t = np.arange(int(seconds * 16000) // 320 * 320) / 16000
        f0 = 120 + 40 * np.sin(2 * np.pi * 1.5 * t)
        wave = 0.5 * np.sin(2 * np.pi * np.cumsum(f0) / 16000) + 0.05 * rng.standard_normal(len(t))
        waves.append((wave / np.max(np.abs(wave)) * 0.95).astype(np.float32))
    return waves


ON_CPU = ["--set", "content.device=cpu:0", "--set", "speaker.device=cpu:0", "--set", "vocoder.device=cpu:0"]
