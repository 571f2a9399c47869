"""Where speech begins and ends in an utterance, for B3's style embedding: the span the recipe keeps when it cuts
leading and trailing silence (IMS-Toucan's ``AudioPreprocessor.cut_silence_from_audio``: from the first speech
segment's start to the last one's end).

The recipe finds the segments with Silero VAD loaded by ``torch.hub`` from the repository's moving default branch,
so its model is whichever version was current when a machine first downloaded it (version 4 until mid 2024,
then 5; PyPI's ``silero-vad`` ships a newer one still): no fixed reference exists to match. This module is a
stated difference: a frame-energy detector with Silero's own edge rules (a 512-sample window, speech shorter than
250 ms ignored, 30 ms of padding either side, the whole utterance kept when no speech is found, as the recipe's
``IndexError`` fallback does). Its decision only narrows the frames the style embedding's random 256-frame window
is drawn from.
"""
import numpy as np

SAMPLE_RATE = 16000
WINDOW = 512
# A window is speech when its energy is within this many decibels of the loudest window's.
SPEECH_BELOW_PEAK_DB = 40.0
MIN_SPEECH_SAMPLES = SAMPLE_RATE * 250 // 1000
SPEECH_PAD_SAMPLES = SAMPLE_RATE * 30 // 1000


def speech_span(audio: np.ndarray) -> tuple[int, int]:
    """(start, end) sample indices of the speech in 16 kHz ``audio``; (0, len(audio)) when none is found."""
    windows = len(audio) // WINDOW
    if windows == 0:
        return 0, len(audio)
    framed = np.asarray(audio[:windows * WINDOW], dtype=np.float64).reshape(windows, WINDOW)
    energy = np.mean(framed * framed, axis=1)
    peak = energy.max()
    if peak <= 0.0:
        return 0, len(audio)
    speech = energy >= peak * 10.0 ** (-SPEECH_BELOW_PEAK_DB / 10.0)
    runs = _runs(speech)
    kept = [(first * WINDOW, (last + 1) * WINDOW) for first, last in runs
            if (last + 1 - first) * WINDOW >= MIN_SPEECH_SAMPLES]
    if not kept:
        return 0, len(audio)
    return max(0, kept[0][0] - SPEECH_PAD_SAMPLES), min(len(audio), kept[-1][1] + SPEECH_PAD_SAMPLES)


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) indices of each run of True in ``flags``."""
    edges = np.diff(np.concatenate(([0], flags.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1))
