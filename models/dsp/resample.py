"""librosa 0.9.2's default resampling (resampy ``kaiser_best``), which B4 (NAC) takes its 24 kHz output back to
16 kHz with."""
from __future__ import annotations

import functools

import numpy as np

KAISER_BEST = {"num_zeros": 50, "precision": 13, "beta": 12.9846, "rolloff": 0.917347371260876}
"""resampy's ``kaiser_best`` filter (its documented parameters; the roll-off to all the digits of its table's first
value): the table recomputed from them is within 1e-8 of resampy's stored one."""


@functools.lru_cache(maxsize=1)
def _kaiser_best_table() -> np.ndarray:
    n = 2 ** KAISER_BEST["precision"] * KAISER_BEST["num_zeros"]
    taper = np.kaiser(2 * n + 1, KAISER_BEST["beta"])[n:]
    rolloff = KAISER_BEST["rolloff"]
    return taper * rolloff * np.sinc(rolloff * np.linspace(0, KAISER_BEST["num_zeros"], n + 1))


def resample_kaiser_best(x: np.ndarray, rate: int, new_rate: int) -> np.ndarray:
    """librosa 0.9.2's ``resample`` (resampy ``kaiser_best``, then the length fixed to ceil(len × ratio)):
    resampy's interpolated-table loop, each output's taps summed in resampy's order, vectorised over outputs."""
    ratio = new_rate / rate
    x = np.asarray(x, dtype=np.float64)
    table = _kaiser_best_table() * min(1.0, ratio)
    delta = np.diff(table, append=table[-1])
    num_table = 2 ** KAISER_BEST["precision"]
    scale = min(1.0, ratio)
    step = int(scale * num_table)
    times = np.arange(int(len(x) * ratio)) / ratio
    n = times.astype(np.int64)
    y = np.zeros(len(times))
    for right in (False, True):
        frac = scale * (times - n)
        if right:
            frac = scale - frac
        index = frac * num_table
        offset = index.astype(np.int64)
        eta = index - offset
        taps = np.minimum(len(x) - n - 1 if right else n + 1, (len(table) - offset) // step)
        for i in range(int(taps.max(initial=0))):
            use = taps > i
            where = offset[use] + i * step
            weight = table[where] + eta[use] * delta[where]
            y[use] += weight * x[n[use] + i + 1 if right else n[use] - i]
    target = int(np.ceil(len(x) * ratio))
    return np.pad(y, (0, max(0, target - len(y))))[:target]
