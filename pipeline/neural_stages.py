"""Stages of the neural analysis/synthesis chain (SSL-SAS layout): input, F0, content, speaker, vocoder.

Data flow per utterance (``features`` keys in brackets):

1. ``ssl_sas_input``: peak-normalise to 0.95 (``librosa.util.normalize(x) * 0.95``) and
   **trim to a multiple of 320 samples**, as SSL-SAS does. L, the trimmed length, is
   what the chain reproduces: the output has exactly L samples (at most 319 fewer than
   the input). Inputs under 640 samples (40 ms) are refused.
2. ``f0``: pYAAPT, L/160 frames at 100 Hz [``f0``].
3. ``content``: HuBERT soft content, L/320 frames at 50 Hz [``content``].
4. ``speaker``: ECAPA vector of the utterance itself [``speaker``] (copy-synthesis).
5. ``vocoder``: HiFi-GAN on [content ×2 | F0 | speaker] -> L samples.

torch and the models load lazily on the first batch, so systems that do not use these
stages never import torch. Model sets come from the models directory
(:mod:`voxanon.models.registry`); each process loads a set once.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from voxanon.data_prep.errors import VoxanonError
from voxanon.pipeline.stages import Stage, Utterance

SSL_SAS_MULTIPLE = 320
MIN_SAMPLES = 640

_loaded: dict[tuple[str, str], Any] = {}


def load_ssl_sas_models(name: str = "ssl-sas"):
    """(content encoder, speaker encoder, vocoder) of an installed SSL-SAS-layout set, cached per process."""
    from voxanon.models.registry import load_model_set, models_dir

    key = (str(models_dir()), name)
    if key not in _loaded:
        from voxanon.models.hifigan import ConditioningLayout, GeneratorConfig, HifiganGenerator, Vocoder
        from voxanon.models.hubert import SoftContentConfig, SoftContentEncoder
        from voxanon.models.speaker import EcapaConfig, EcapaEncoder

        model_set = load_model_set(name)
        config = model_set.config
        content = SoftContentEncoder(SoftContentConfig.from_dict(config["content"]))
        content.load_state_dict(model_set.tensors("content"))
        speaker = EcapaEncoder(EcapaConfig.from_dict(config["speaker"]))
        speaker.embedding_model.load_state_dict(model_set.tensors("speaker"))
        generator = HifiganGenerator(GeneratorConfig.from_dict(config["generator"]))
        generator.load_state_dict(model_set.tensors("generator"))
        vocoder = Vocoder(generator.eval(), ConditioningLayout.from_dict(config["layout"]))
        _loaded[key] = (content.eval(), speaker.eval(), vocoder)
    return _loaded[key]


class SslSasInputStage(Stage):
    """Peak normalisation and the 320-sample trim that the rest of the chain relies on."""

    name = "ssl_sas_input"

    def __init__(self, peak: float = 0.95):
        if not 0.0 < float(peak) <= 1.0:
            raise ValueError(f"ssl_sas_input.peak must be in (0, 1], got {peak}")
        self.peak = float(peak)

    def process(self, utt: Utterance) -> None:
        length = len(utt.audio) // SSL_SAS_MULTIPLE * SSL_SAS_MULTIPLE
        if length < MIN_SAMPLES:
            raise VoxanonError(f"{utt.utt_id}: {len(utt.audio)} samples is too short for the neural chain "
                               f"(minimum {MIN_SAMPLES}, i.e. 40 ms at 16 kHz)")
        audio = utt.audio[:length].astype(np.float32)
        peak = float(np.max(np.abs(audio)))
        utt.audio = audio / peak * self.peak if peak > 0 else audio
        utt.record["trimmed_samples"] = len(utt.audio)


class F0Stage(Stage):
    """pYAAPT F0 (SSL-SAS settings), optionally cached on disk per utterance content."""

    name = "f0"

    def __init__(self, cache_dir: str | None = None, f0_min_hz: float = 60.0, f0_max_hz: float = 400.0):
        from voxanon.models.f0 import F0Cache, YaaptParams

        self.params = YaaptParams(f0_min_hz=float(f0_min_hz), f0_max_hz=float(f0_max_hz))
        self.cache = F0Cache(cache_dir) if cache_dir else None

    def process(self, utt: Utterance) -> None:
        from voxanon.models.f0 import yaapt_f0

        if self.cache is not None:
            utt.features["f0"] = self.cache.f0(utt.audio, utt.sample_rate, self.params)
        else:
            utt.features["f0"] = yaapt_f0(utt.audio, utt.sample_rate, self.params)


class ContentStage(Stage):
    """SSL-SAS soft content (HuBERT + 200 centroids)."""

    name = "content"

    def __init__(self, models: str = "ssl-sas"):
        self.models = models

    def needs(self) -> list[str]:
        return [f"checkpoint:{self.models}"]

    def process_batch(self, batch: list[Utterance]) -> None:
        content, _, _ = load_ssl_sas_models(self.models)
        for utt, features in zip(batch, content.encode([u.audio for u in batch])):
            utt.features["content"] = features


class SpeakerStage(Stage):
    """The ECAPA vector of the utterance itself (copy-synthesis keeps the source speaker)."""

    name = "speaker"

    def __init__(self, models: str = "ssl-sas"):
        self.models = models

    def needs(self) -> list[str]:
        return [f"checkpoint:{self.models}"]

    def process_batch(self, batch: list[Utterance]) -> None:
        _, speaker, _ = load_ssl_sas_models(self.models)
        for utt, vector in zip(batch, speaker.embed([u.audio for u in batch])):
            utt.features["speaker"] = vector


class VocoderStage(Stage):
    """HiFi-GAN from content, F0 and speaker features (:meth:`Vocoder.synthesise`: one utterance after
    the other on CPU, one padded, length-masked pass on a GPU; the same outputs either way).

    ``layout`` overrides fields of the model set's conditioning layout (e.g. ``standardise_content``),
    for vocoders trained with a layout the set's config does not record.
    """

    name = "vocoder"

    def __init__(self, models: str = "ssl-sas", output_peak: float | None = 0.95, layout: dict | None = None):
        from voxanon.models.hifigan import ConditioningLayout

        self.models = models
        self.output_peak = None if output_peak is None else float(output_peak)
        self.layout = dict(layout or {})
        unknown = set(self.layout) - set(ConditioningLayout.__dataclass_fields__)
        if unknown:
            raise ValueError(f"vocoder.layout has no field(s) {sorted(unknown)}; fields: "
                             f"{sorted(ConditioningLayout.__dataclass_fields__)}")

    def needs(self) -> list[str]:
        return [f"checkpoint:{self.models}"]

    def _vocoder(self):
        from voxanon.models.hifigan import Vocoder

        vocoder = load_ssl_sas_models(self.models)[2]
        if not self.layout:
            return vocoder
        return Vocoder(vocoder.generator, dataclasses.replace(vocoder.layout, **self.layout))

    def process_batch(self, batch: list[Utterance]) -> None:
        import torch

        vocoder = self._vocoder()
        missing = [f"{u.utt_id}:{k}" for u in batch for k in ("content", "f0", "speaker") if k not in u.features]
        if missing:
            raise VoxanonError(f"vocoder needs content, f0 and speaker features; missing {missing[:4]} "
                               "(put the content, f0 and speaker stages before it)")
        items = [(torch.from_numpy(u.features["content"]), torch.from_numpy(u.features["f0"]),
                  torch.from_numpy(np.asarray(u.features["speaker"], dtype=np.float32))) for u in batch]
        for utt, wave in zip(batch, vocoder.synthesise(items)):
            peak = float(np.max(np.abs(wave)))
            if self.output_peak is not None and peak > 0:
                wave = wave / peak * self.output_peak
            utt.audio = wave.astype(np.float32)


NEURAL_STAGES = (SslSasInputStage, F0Stage, ContentStage, SpeakerStage, VocoderStage)
