"""Stages of VoicePrivacy 2024 B3 (STTTS, IMS Stuttgart: speech to phones to speech).

Data flow per utterance (``features`` keys in brackets), as the recipe's ``sttts_pipeline.py`` runs it:

1. ``sttts_recognise``: the ESPnet phone recogniser (Branchformer + CTC/attention beam search, beam 15, CTC
   weight 0.2), its output wrapped in ``~ ... ~#`` as ``ims_asr.py`` does
   (:func:`voxanon.models.nets.tts.recogniser.recognise`) [``phones``].
2. ``sttts_speaker``: the artificial target speaker, a WGAN vector [``style``]. The set is prepared once
   (:meth:`SttsSpeakerStage.prepare_set`): every utterance's original style embedding (loudness, VAD trim, log-mel,
   a 256-frame window, GST; cached per audio content) in a table named by its digest. Each process then draws
   the 5,000 GAN vectors and runs the recipe's sequential assignment (an unused vector of cosine similarity
   below 0.7 to the original, up to 20 tries; all used: reset) over the set's utterances in sorted-id order,
   both from the run's seed, so every worker, resumed run and backend deals the same vectors. The chosen index
   is recorded per utterance.
3. ``sttts_prosody``: the CTC aligner fine-tuned on the utterance (a copy; 3 SGD steps), durations per phone, pitch
   and energy averaged per phone, then pitch and energy scaled per phone by random integers in
   [``lower``, ``upper``) / 100, recorded per utterance [``prosody``].
4. ``sttts_synthesise``: articulatory features, FastSpeech2 with the given durations, pitch, energy and the target
   style, HiFi-GAN at 48 kHz, the recipe's silence and short-output handling, resampled to 16 kHz as the recipe
   does (resampy ``kaiser_best``).

Seeds: the recipe draws from unseeded global generators; here every draw comes from the utterance's seed
(:meth:`~voxanon.pipeline.systems.stage.Utterance.rng`), one stream per stage (:data:`STREAMS`), or, for the set's
GAN vectors and their assignment, from the run's seed (``utt.rng("run")``). The window of each original embedding
is drawn from the audio's own digest (:func:`content_rng`): the set is embedded before any utterance's seed
exists, and its embedding, cached per audio content, stays valid across seeds. A rerun, a resumed run, a run
with other workers or under Ray gives the same bytes.

``device`` (``cpu``, ``cuda``, ``auto``, ``cpu:N``) on the model stages runs their networks there; the GAN vectors,
the assignment and the silence cut (Silero VAD) are always computed on the CPU, so neither depends on the device.
On a GPU the synthesis runs the runner's batch (the streaming executor's length-sorted device batches) as one
padded, length-masked batch through FastSpeech2 and HiFi-GAN (:func:`batches_synthesis`): each waveform equals its
one-at-a-time one to float rounding; on the CPU, ``cpu:N`` included, one utterance at a time.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from ....data_prep.atomic import atomic_write_text
from ....data_prep.errors import VoxanonError
from ....data_prep.paths import contained_path
from ...model_service import cached_float32_model, model_set, resolve_device
from ...stage_settings import Number, SettingError, checked
from ..stage import ModelStage, Utterance, stream_seed

log = logging.getLogger(__name__)

MODELS = "sttts"
RELEASE = "sttts"
STREAMS = {"sttts_prosody": 1, "prosody_factors": 2, "sttts_synthesise": 3, "gan_vectors": 4, "gan_assignment": 5}
"""The generator stream of each stage's draws (and of the run-level GAN draws), so no two share a sequence."""
GAN_VECTORS = 5000
SIMILARITY_THRESHOLD = 0.7
TRIES = 20
SAMPLE_RATE = 16_000
INPUTS_HINT = "B3's stages run in the order sttts_recognise, sttts_speaker, sttts_prosody, sttts_synthesise"


def load_component(name: str, component: str, device: str = "cpu"):
    """A network of an installed B3 set (:func:`voxanon.models.checkpoints.sttts.load_component`), once per process
    and device."""
    from ....models.checkpoints import sttts

    return cached_float32_model(name, component, device, lambda: sttts.load_component(model_set(name, RELEASE), component))


def rng(utt: Utterance, stream: str, level: str = "utterance") -> np.random.Generator:
    """A NumPy generator for ``stream``'s draws on ``utt``, from the utterance's (or the run's) seed."""
    return np.random.default_rng(stream_seed(utt.seeds[level], STREAMS[stream]))


def generator(utt: Utterance, stream: str, level: str = "utterance"):
    """A CPU :class:`torch.Generator` for ``stream``'s draws on ``utt``, from the utterance's (or the run's) seed."""
    import torch

    return torch.Generator().manual_seed(stream_seed(utt.seeds[level], STREAMS[stream]))


def unembedded_path(originals: Path) -> Path:
    """Beside the table of original embeddings: the utterances left out of it and why (JSON)."""
    return originals.with_name(originals.stem + "-unembedded.json")


def content_rng(wave: np.ndarray) -> np.random.Generator:
    """A generator seeded by the audio itself (sha256 of its float32 samples): the original embedding's window."""
    digest = hashlib.sha256(np.ascontiguousarray(wave, dtype="<f4").tobytes()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


class _SttsStage(ModelStage):
    component: str
    inputs_hint = INPUTS_HINT

    def __init__(self, models: str = MODELS, device: str = "cpu"):
        super().__init__(models, device)

    def model(self):
        return load_component(self.models, self.component, self.device)


class SttsRecogniseStage(_SttsStage):
    """The phone string of each utterance, as the recipe's ``ims_asr.py`` hands it to the TTS."""

    name = "sttts_recognise"
    component = "asr"
    # 2251 measured (benchmarks/stage_memory.py, 10 and 30 s at 16 kHz): the attention grows faster than the
    # length, so near max_seconds (120 s) this is an underestimate; a 30/90 s measurement ran past 11 minutes.
    bytes_per_sample = 2260.0

    def process_batch(self, batch: list[Utterance]) -> None:
        from ....models.nets.tts.recogniser import recognise

        recogniser = self.model()
        for utt in batch:
            utt.features["phones"] = recognise(recogniser, utt.audio)


# The set's GAN deal, per process: (originals table, run seed, settings) -> utterance id -> vector index.
_deals: dict[tuple, tuple[np.ndarray, dict[str, int]]] = {}


class SttsSpeakerStage(_SttsStage):
    """B3's target speaker: a WGAN vector dealt to each utterance of the set (module doc)."""

    name = "sttts_speaker"
    component = "wgan"
    bytes_per_sample = 0.0  # measured -31.5 (10 and 30 s): the utterance's embedding was made for the set beforehand
    SETTINGS = {"vectors": Number(1, integer=True), "threshold": Number(-1.0, 1.0), "tries": Number(1, integer=True)}

    def __init__(self, models: str = MODELS, vectors: int = GAN_VECTORS, threshold: float = SIMILARITY_THRESHOLD,
                 tries: int = TRIES, cache_dir: str | None = None, originals: str | None = None):
        # No device: the embedding of the set and the deal run on the CPU, so the deal cannot depend on it.
        super().__init__(models, "cpu")
        values = checked(self.name, self.SETTINGS, dict(vectors=vectors, threshold=threshold, tries=tries),
                         {"threshold": "a cosine similarity"})
        self.vectors, self.threshold, self.tries = values["vectors"], values["threshold"], values["tries"]
        self.cache_dir = cache_dir
        self.originals = originals

    def prepare_set(self, data, work_dir, progress: bool = True) -> dict[str, Any]:
        """Embed every utterance of the set (its original style; cached per audio content) and write the table,
        in sorted-id order, under ``work_dir``, named by its digest."""
        from ....data_prep.vectors import Vectors, write_vectors
        from ...execution.workers import one_cpu_thread
        from ...feature_cache import ContentCache

        cache = ContentCache.from_option(self.cache_dir)
        tag = f"sttts-style-{model_set(self.models, RELEASE).manifest['files']['style.safetensors'][:16]}"
        found, failures = {}, {}
        # One thread, as every worker computes: the embeddings must not depend on the machine's cores.
        with one_cpu_thread():
            self._embed_set(data, cache, tag, found, failures, progress)
        if not found:
            first = next(iter(failures.items()))
            raise VoxanonError(f"sttts_speaker: no utterance of {data.name} could be embedded (e.g. {first[0]}: "
                               f"{first[1]})")
        if failures:
            # Each fails by name in failures.tsv, when the runner reads it or when it reaches this stage.
            log.info("sttts_speaker: %d utterance(s) of %s left out of the GAN deal", len(failures), data.name)
        ids = sorted(found)
        matrix = np.stack([found[utt] for utt in ids])
        digest = hashlib.sha256("\n".join(ids).encode() + matrix.astype("<f4").tobytes()).hexdigest()
        path = contained_path(Path(work_dir).resolve(), f"sttts-originals-{self.models}-{digest[:16]}.npy")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_vectors(path, Vectors(tuple(ids), matrix))
        atomic_write_text(unembedded_path(path), json.dumps(failures, indent=1, sort_keys=True) + "\n")
        return {"originals": str(path)}

    def _embed_set(self, data, cache, tag: str, found: dict, failures: dict, progress: bool) -> None:
        """Each utterance's original style embedding into ``found``, or why not into ``failures``."""
        from tqdm import tqdm

        from ....data_prep.audio import AudioError, load_audio
        from ....data_prep.digest import sha256_file
        from ....models.nets.tts.style import style_embedding

        for utt in tqdm(sorted(data.utterances), desc=f"B3 style {data.name}", unit="utt", leave=False,
                        disable=not progress, dynamic_ncols=True):
            if data.is_pipe(utt):
                failures[utt] = f"wav.scp entry {data.wav[utt]!r} is a command; B3 embeds the set's files before the run"
                continue
            try:
                digest = sha256_file(data.audio_path(utt))
                vector = cache.get(tag, digest, "vector")
                if vector is None:
                    wave = load_audio(data.audio_path(utt), SAMPLE_RATE).samples
                    vector = style_embedding(load_component(self.models, "style"), wave, content_rng(wave),
                                             load_component(self.models, "vad"))
                    cache.put(tag, digest, "vector", vector)
            except (AudioError, OSError, ValueError) as error:
                failures[utt] = str(error)
                continue
            found[utt] = np.asarray(vector, dtype=np.float32)

    def _deal(self, utt: Utterance) -> tuple[np.ndarray, dict[str, int]]:
        """The set's GAN vectors and each utterance's index among them, computed once per process."""
        if self.originals is None:
            raise VoxanonError("sttts_speaker needs the set's original style embeddings, which the runner computes "
                               "before the run (Stage.prepare_set); run the system with voxanon anonymise")
        key = (self.models, self.originals, utt.seeds["run"], self.vectors, self.threshold, self.tries)
        if key not in _deals:
            from ....data_prep.vectors import read_vectors
            from ....models.nets.tts.wgan import assign_targets, generate_vectors

            table = read_vectors(self.originals)
            wgan = load_component(self.models, "wgan")
            vectors = generate_vectors(wgan, wgan.mean, wgan.std, self.vectors, generator(utt, "gan_vectors", "run"))
            originals = [row.astype(np.float32) for row in table.matrix]
            chosen = assign_targets(originals, vectors, rng(utt, "gan_assignment", "run"), self.threshold, self.tries)
            _deals[key] = (np.asarray(vectors, dtype=np.float32), dict(zip(table.ids, map(int, chosen))))
        return _deals[key]

    def model(self):
        return load_component(self.models, "wgan")

    def process(self, utt: Utterance) -> None:
        vectors, dealt = self._deal(utt)
        if utt.utt_id not in dealt:
            reason = json.loads(unembedded_path(Path(self.originals)).read_text(encoding="utf-8")).get(
                utt.utt_id, "not in the set prepared before the run")
            raise VoxanonError(f"{utt.utt_id}: no original style embedding, so no GAN target ({reason})")
        index = dealt[utt.utt_id]
        utt.features["style"] = vectors[index]
        utt.record["gan_index"] = index


class SttsProsodyStage(_SttsStage):
    """Durations, pitch and energy per phone from the fine-tuned aligner, pitch and energy scaled at random."""

    name = "sttts_prosody"
    component = "aligner"
    bytes_per_sample = 715.0  # 714.6 measured (benchmarks/stage_memory.py, 10 and 30 s at 16 kHz)
    inputs = ("phones",)
    SETTINGS = {"lower": Number(0, low_inclusive=False, integer=True, unit="(%)"),
                "upper": Number(0, low_inclusive=False, integer=True, unit="(%)")}

    def __init__(self, models: str = MODELS, device: str = "cpu", lower: int = 60, upper: int = 140):
        super().__init__(models, device)
        values = checked(self.name, self.SETTINGS, dict(lower=lower, upper=upper))
        if not values["lower"] < values["upper"]:
            raise SettingError(f"sttts_prosody.lower and upper are percentages with 0 < lower < upper, got {lower}, "
                               f"{upper}")
        self.lower, self.upper = values["lower"], values["upper"]

    def load_models(self) -> None:
        super().load_models()
        load_component(self.models, "vad")  # on the CPU whatever the device: where the speech is must not depend on it

    def process_batch(self, batch: list[Utterance]) -> None:
        import torch

        from ....models.nets.tts.prosody import anonymise_prosody, extract_prosody
        from ....models.nets.tts.vad import speech_span

        self.check_inputs(batch)
        aligner, vad = self.model(), load_component(self.models, "vad")
        for utt in batch:
            prosody = extract_prosody(aligner, utt.features["phones"], utt.audio, generator(utt, self.name),
                                      find_speech=lambda wave: speech_span(vad, wave))
            factors = generator(utt, "prosody_factors")
            drawn = factors.get_state()
            utt.features["prosody"] = anonymise_prosody(prosody, factors, self.lower, self.upper)
            # The factors anonymise_prosody drew (energy's, then pitch's), drawn again from the same state for the journal.
            factors.set_state(drawn)
            size = (len(prosody["energy"]),)
            energy = torch.randint(self.lower, self.upper, size, generator=factors)
            pitch = torch.randint(self.lower, self.upper, size, generator=factors)
            utt.record["prosody_factors"] = {"pitch": pitch.tolist(), "energy": energy.tolist()}


class SttsSynthesiseStage(_SttsStage):
    """FastSpeech2 and HiFi-GAN with the phones, the anonymised prosody and the target style, at 16 kHz."""

    name = "sttts_synthesise"
    component = "fastspeech2"
    bytes_per_sample = 946.0  # 945.7 measured (benchmarks/stage_memory.py, 10 and 30 s at 16 kHz)
    inputs = ("phones", "style", "prosody")

    def load_models(self) -> None:
        if self.device == "cpu":
            self.model()
            load_component(self.models, "hifigan")

    def load_device_models(self) -> None:
        if self.device != "cpu":
            super().load_device_models()
            load_component(self.models, "hifigan", self.device)

    def process_batch(self, batch: list[Utterance]) -> None:
        from ....models.dsp.resample import resample_kaiser_best
        from ....models.nets.tts.hifigan import SAMPLE_RATE as SYNTHESIS_RATE
        from ....models.nets.tts.synthesis import synthesise_48k, synthesise_batch_48k

        self.check_inputs(batch)
        fastspeech2, hifigan = self.model(), load_component(self.models, "hifigan", self.device)
        inputs = [{"phones": utt.features["phones"], "durations": utt.features["prosody"]["durations"],
                   "pitch": utt.features["prosody"]["pitch"], "energy": utt.features["prosody"]["energy"],
                   "style": utt.features["style"], "generator": generator(utt, self.name),
                   "start_silence": utt.features["prosody"]["start_silence"],
                   "end_silence": utt.features["prosody"]["end_silence"]} for utt in batch]
        if batches_synthesis(self.device):
            waves = synthesise_batch_48k(fastspeech2, hifigan, inputs)
        else:
            waves = [synthesise_48k(fastspeech2, hifigan, **utterance) for utterance in inputs]
        for utt, wave in zip(batch, waves):
            # resampy.resample's output length (the recipe resamples with it): ceil would give one more sample.
            utt.audio = resample_kaiser_best(wave, SYNTHESIS_RATE, utt.sample_rate)[:len(wave) * utt.sample_rate
                                                                                 // SYNTHESIS_RATE].astype(np.float32)


def batches_synthesis(device: str) -> bool:
    """Whether the synthesis runs the runner's batch as one padded batch: on a GPU, where it pays; on the CPU
    (``cpu:N`` included) one utterance at a time, faster there and the bytes of a local run."""
    return not resolve_device(device).startswith("cpu")
