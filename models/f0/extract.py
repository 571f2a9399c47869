"""YAAPT F0 exactly as the SSL-SAS anonymiser computes it with pYAAPT (``amfm-decompy``).

SSL-SAS zero-pads the waveform by half a frame (160 samples) on each side and runs
pYAAPT with 20 ms frames every 10 ms, ``nccf_thresh1=0.25`` and a 25 ms TDA frame,
keeping the uninterpolated ``samp_values`` (Hz, 0 for unvoiced frames). For an input
of L samples, L a multiple of 160, that gives exactly L/160 frames, frame k centred on
sample 160·k of the unpadded input — the 100 Hz rate the SSL-SAS vocoder consumes.

Two backends compute it (:data:`~voxanon.models.f0.params.BACKENDS`):

- ``fast`` (the default): :mod:`voxanon.models.f0.yaapt`, pYAAPT's algorithm vectorised over frames
  with compiled per-frame decisions, 4-5x faster per core. On the demo corpus it returns
  pYAAPT's track bit for bit on all but 3 of 182 utterances, which differ on a frame or two
  where pYAAPT's dynamic programme meets two equally cheap paths (``benchmarks/f0.py``).
  :func:`yaapt_f0_batch` runs whole batches on a GPU (:mod:`voxanon.models.f0.yaapt_torch`).
- ``pyaapt``: amfm-decompy's pYAAPT itself, the reference.

A third backend is another algorithm, for other systems: ``sa-toolkit`` is SA-toolkit's own TorchScript
port of YAAPT (:mod:`voxanon.models.f0.sa_yaapt`), which VoicePrivacy 2024's B5/B6 were trained on, with
their settings (35 ms frames every 20 ms: ``ceil(n / 320)`` frames at 16 kHz); its parameters are a
:class:`~voxanon.models.f0.params.SaToolkitYaaptParams` (:func:`~voxanon.models.f0.params.backend_params`).

:class:`F0Cache` stores tracks on disk keyed by the audio content, the parameters and the
backend, so training and repeated runs compute each utterance once.
"""
from __future__ import annotations

import hashlib
import json
import warnings
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ...data_prep.atomic import atomic_path
from ...data_prep.paths import contained_path
from .params import DEFAULT_BACKEND, MIN_SAMPLES, SSL_SAS_YAAPT, YaaptParams, backend_params, check_backend

def _prepared(audio: np.ndarray, sample_rate: int, params: YaaptParams) -> tuple[np.ndarray | None, int]:
    """(The zero-padded float64 signal YAAPT analyses, or None for digital silence; the frame count),
    after the checks every backend shares."""
    audio = np.asarray(audio)
    if audio.ndim != 1:
        raise ValueError(f"yaapt_f0 expects mono audio (1-D), got shape {audio.shape}")
    if len(audio) < MIN_SAMPLES:
        raise ValueError(f"audio of {len(audio)} samples is too short for pYAAPT (minimum {MIN_SAMPLES})")
    pad = params.pad_samples(sample_rate)
    hop = int(round(params.frame_space_ms / 1000 * sample_rate))
    frame = 2 * pad
    n_frames = len(range(frame // 2, len(audio) + 2 * pad - frame // 2, hop))
    if not np.any(audio):
        return None, n_frames
    return np.pad(audio.astype(np.float64), (pad, pad), mode="constant"), n_frames


def _checked_track(samp_values: np.ndarray, n_samples: int, n_frames: int, backend: str) -> np.ndarray:
    f0 = np.asarray(samp_values, dtype=np.float32)
    if len(f0) != n_frames:
        raise RuntimeError(f"YAAPT ({backend}) returned {len(f0)} frames for {n_samples} samples, expected {n_frames}")
    return f0


def yaapt_f0(audio: np.ndarray, sample_rate: int = 16000, params: YaaptParams = SSL_SAS_YAAPT,
             backend: str = DEFAULT_BACKEND) -> np.ndarray:
    """F0 track in Hz (0 = unvoiced), float32, one value per ``frame_space_ms``.

    ``audio`` is mono float in [-1, 1]. Digital silence (all samples equal to zero)
    is returned as all-zero F0 without running YAAPT, whose normalisation divides by
    the signal's standard deviation. Inputs shorter than :data:`MIN_SAMPLES` raise
    ``ValueError`` (pYAAPT cannot analyse them); NaN or infinite samples give what
    pYAAPT gives (an unvoiced track). ``backend``: one of :data:`BACKENDS` (``sa-toolkit``: its own
    parameters, :func:`backend_params`, and its own handling of bad input,
    :func:`~voxanon.models.f0.sa_yaapt.sa_toolkit_f0`).
    """
    if check_backend(backend) == "sa-toolkit":
        from .sa_yaapt import sa_toolkit_f0

        return sa_toolkit_f0(audio, sample_rate, _sa_toolkit_params(params))
    signal, n_frames = _prepared(audio, sample_rate, params)
    if signal is None:
        return np.zeros(n_frames, dtype=np.float32)
    if backend == "fast":
        from .yaapt import yaapt_samp_values

        return _checked_track(yaapt_samp_values(signal, sample_rate, params), len(audio), n_frames, backend)
    import amfm_decompy.basic_tools as basic
    import amfm_decompy.pYAAPT as pYAAPT

    with warnings.catch_warnings():
        # Near-silent frames make pYAAPT divide by zero, and short ones its median filters warn; the track is valid.
        warnings.simplefilter("ignore")
        pitch = pYAAPT.yaapt(basic.SignalObj(signal, sample_rate), **params.yaapt_kwargs())
    return _checked_track(pitch.samp_values, len(audio), n_frames, backend)


def yaapt_f0_batch(audios: list[np.ndarray], sample_rate: int = 16000, params: YaaptParams = SSL_SAS_YAAPT,
                   device: str = "cuda", backend: str = DEFAULT_BACKEND) -> list[np.ndarray | Exception]:
    """:func:`yaapt_f0` (``fast`` or ``sa-toolkit``) of each utterance, the whole batch at once on ``device``
    (a torch device).

    Each item is the track or the exception :func:`yaapt_f0` raises for that utterance, so one bad
    utterance does not stop the others. Silence, too-short and non-finite inputs are settled as
    :func:`yaapt_f0` settles them (for ``fast``, the last by the CPU version: they are rare and pYAAPT's
    outcome for them follows from its NaN arithmetic step by step).
    """
    if check_backend(backend) == "sa-toolkit":
        return _sa_toolkit_batch(audios, sample_rate, params, device)
    if backend != "fast":
        raise ValueError(f"F0 backend {backend!r} has no batched version (fast or sa-toolkit)")
    from .yaapt import yaapt_samp_values

    results: list[np.ndarray | Exception | None] = [None] * len(audios)
    batch: list[tuple[int, np.ndarray, int]] = []
    for index, audio in enumerate(audios):
        try:
            signal, n_frames = _prepared(audio, sample_rate, params)
            if signal is None:
                results[index] = np.zeros(n_frames, dtype=np.float32)
            elif not np.all(np.isfinite(signal)):
                results[index] = _checked_track(yaapt_samp_values(signal, sample_rate, params), len(audio),
                                                n_frames, "fast")
            else:
                batch.append((index, signal, n_frames))
        except Exception as error:  # reported for this utterance; the batch goes on
            results[index] = error
    if batch:
        from .yaapt_torch import yaapt_samp_values_batch

        tracks = yaapt_samp_values_batch([signal for _, signal, _ in batch], sample_rate, params, device)
        for (index, signal, n_frames), track in zip(batch, tracks):
            if isinstance(track, Exception):
                results[index] = track
            else:
                try:
                    results[index] = _checked_track(track, len(audios[index]), n_frames, "fast")
                except RuntimeError as error:
                    results[index] = error
    return results


def _sa_toolkit_params(params):
    """SA-toolkit's port runs with its own frames: given SSL-SAS's :class:`YaaptParams`, only their F0 range."""
    if isinstance(params, YaaptParams):
        return backend_params("sa-toolkit", params.f0_min_hz, params.f0_max_hz)
    return params


def _sa_toolkit_batch(audios: list[np.ndarray], sample_rate: int, params, device: str) -> list[np.ndarray | Exception]:
    """SA-toolkit's port over the utterances it can take, in one call (it batches them itself); the error of
    each one it refuses (empty, multi-channel, not float, non-finite) in its place."""
    from .sa_yaapt import check_waveform, sa_toolkit_f0

    results: list[np.ndarray | Exception | None] = [None] * len(audios)
    usable = []
    for index, audio in enumerate(audios):
        try:
            check_waveform(audio, index)
            usable.append(index)
        except ValueError as error:
            results[index] = error
    if usable:
        for index, track in zip(usable, sa_toolkit_f0([audios[i] for i in usable], sample_rate,
                                                      _sa_toolkit_params(params), device=device)):
            results[index] = track
    return results


class F0Cache:
    """F0 tracks on disk, one ``.npy`` per (audio content, parameters, backend), written atomically."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    @staticmethod
    def key(audio: np.ndarray, sample_rate: int, params: YaaptParams, backend: str = DEFAULT_BACKEND) -> str:
        digest = hashlib.sha256(np.ascontiguousarray(audio, dtype=np.float32).tobytes())
        digest.update(json.dumps({"sample_rate": sample_rate, **asdict(params), "backend": check_backend(backend)},
                                 sort_keys=True).encode())
        return digest.hexdigest()

    def path(self, audio: np.ndarray, sample_rate: int, params: YaaptParams, backend: str = DEFAULT_BACKEND) -> Path:
        return contained_path(self.directory, f"{self.key(audio, sample_rate, params, backend)}.npy")

    def load(self, audio: np.ndarray, sample_rate: int = 16000, params: YaaptParams = SSL_SAS_YAAPT,
             backend: str = DEFAULT_BACKEND) -> np.ndarray | None:
        """The cached track, or None."""
        path = self.path(audio, sample_rate, params, backend)
        return np.load(path) if path.is_file() else None

    def store(self, audio: np.ndarray, f0: np.ndarray, sample_rate: int = 16000, params: YaaptParams = SSL_SAS_YAAPT,
              backend: str = DEFAULT_BACKEND) -> None:
        with atomic_path(self.path(audio, sample_rate, params, backend)) as tmp, open(tmp, "wb") as handle:
            np.save(handle, f0)

    def f0(self, audio: np.ndarray, sample_rate: int = 16000, params: YaaptParams = SSL_SAS_YAAPT,
           backend: str = DEFAULT_BACKEND) -> np.ndarray:
        """The cached track, computing and storing it on a miss."""
        f0 = self.load(audio, sample_rate, params, backend)
        if f0 is None:
            f0 = yaapt_f0(audio, sample_rate, params, backend)
            self.store(audio, f0, sample_rate, params, backend)
        return f0
