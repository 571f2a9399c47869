"""Stages of the neural analysis/synthesis chain (SSL-SAS layout): input, F0, content, speaker, vocoder.

Data flow per utterance (``features`` keys in brackets):

1. ``ssl_sas_input``: peak-normalise to 0.95 (``librosa.util.normalize(x) * 0.95``) and
   **trim to a multiple of 320 samples**, as SSL-SAS does. L, the trimmed length, is
   what the chain reproduces: the output has exactly L samples (at most 319 fewer than
   the input). Inputs under 640 samples (40 ms) are refused.
2. ``f0``: YAAPT (the fast version of pYAAPT, or pYAAPT), L/160 frames at 100 Hz [``f0``].
3. ``content``: HuBERT soft content, L/320 frames at 50 Hz [``content``].
4. ``speaker``: ECAPA vector of the utterance itself [``speaker``] (copy-synthesis).
5. ``vocoder``: HiFi-GAN on [content ×2 | F0 | speaker] -> L samples.

torch and the models load lazily (:meth:`Stage.load_models`, or the first batch), so systems that
do not use these stages never import torch. Model sets come from the models directory
(:mod:`voxanon.models.checkpoints.registry`); each process loads a set once, and the runner's forked workers
share the CPU models their parent loaded.

``device`` on the content, speaker and vocoder stages (``voxanon anonymise --device cpu|cuda|auto``;
default ``cpu``; ``auto`` is CUDA when the process running the stage sees one): off the CPU, content,
speaker and vocoder run the runner's batch as padded groups of similar length, on models in their direct
form (:func:`voxanon.models.nets.precision.prepared_for_device`: plain convolutions, weights cast to
``precision`` once at load, no autocast), and ``precision`` may also be ``float16``. ``cpu:N`` (for
example ``cpu:0``) runs that device code path on the CPU: how the GPU path, and the streaming executor
that serves it, are tested on machines without a GPU.

``precision: bfloat16`` on the content and vocoder stages (opt-in, ``voxanon anonymise --precision
bfloat16``; ``float32``, the default, is unchanged) runs their matrix products and convolutions in
bfloat16, on model copies whose weights are already bfloat16: about 1.6x (content) and 3.4x
(vocoder) faster on CPUs with AMX, at about 37 dB content SNR and 38 dB waveform SNR against
float32 (random full-size weights; 36 dB against the float32 reference's 16-bit output in
``benchmarks/pipeline.py``). On a CPU without bfloat16 instructions (no AMX, no ``avx512_bf16``, e.g. the
Ice Lake development machine) oneDNN emulates them and the stages run about 3.4x slower than in float32
(docs/benchmarks.md). The speaker stage has no such option: ECAPA is about 5 % of the
chain and gained under 0.005 RTF.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ....data_prep.errors import VoxanonError
from ...model_service import resolve_device, stage_precision
from ..stage import ModelStage, Stage, Utterance
from .loader import load_model

SSL_SAS_MULTIPLE = 320
MIN_SAMPLES = 640

class SslSasInputStage(Stage):
    """Peak normalisation and the 320-sample trim that the rest of the chain relies on."""

    name = "ssl_sas_input"
    # Peak per sample, measured by benchmarks/stage_memory.py (resynth, full-size SSL-SAS set, 20 and 120 s).
    bytes_per_sample = 12.0
    model_free = True

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


class ContentStage(ModelStage):
    """Soft content at 50 Hz: SSL-SAS (HuBERT + 200 centroids) or, for a ``hubert-soft`` set, bshall's
    256-d units (then the vocoder must be one trained on them: ``vocoder.models`` of a 449-channel set).

    ``precision: bfloat16`` (opt-in) runs the encoder under bfloat16 autocast with its layer/group
    norms and the SSL-SAS time normalisation in float32 (:func:`voxanon.models.nets.hubert.encode_lower_precision`):
    about 1.5x faster on an AMX CPU; cost, against float32 on random HuBERT-base weights, about 37 dB
    content SNR, per-frame cosine similarity above 0.9998. Features are float32 either way.

    ``device`` (``cpu``, ``cuda``, ``auto``: CUDA when there is one): off the CPU the batch's
    utterances run in padded groups of similar length (:func:`voxanon.models.nets.hubert.encode_on_device`),
    each equal to its one-at-a-time output to float rounding, on the encoder in its direct form
    (:func:`voxanon.models.nets.precision.prepared_for_device`: weights in ``precision`` since loading, no
    autocast); ``float16`` is a precision there too.
    """

    name = "content"
    # Peak per sample, 927 measured by benchmarks/stage_memory.py (resynth, full-size SSL-SAS set, 20 and 120 s;
    # 915 from 20 and 80 s: it grows with the length, not its square).
    bytes_per_sample = 930.0

    def __init__(self, models: str = "ssl-sas", precision: str = "float32", device: str = "cpu"):
        self.precision, self.tf32 = stage_precision(precision, "content.precision")
        super().__init__(models, device)

    def model(self):
        return load_model(self.models, "content", self.precision, self.device)

    def process_batch(self, batch: list[Utterance]) -> None:
        device = resolve_device(self.device)
        content = self.model()
        waves = [u.audio for u in batch]
        if device != "cpu":
            from ....models.nets.hubert import encode_on_device
            from ....models.nets.precision import float32_products

            with float32_products(self.tf32):
                encoded = encode_on_device(content, waves)
        elif self.precision == "float32":
            encoded = content.encode(waves)
        else:
            import torch

            from ....models.nets.hubert import encode_lower_precision

            encoded = encode_lower_precision(content, waves, getattr(torch, self.precision))
        for utt, features in zip(batch, encoded):
            utt.features["content"] = features


class SpeakerStage(ModelStage):
    """The ECAPA vector of the utterance itself (copy-synthesis keeps the source speaker).

    ``device`` as the content stage's; in float32 on every device (about 5 % of the chain). On CPU one
    utterance at a time; off the CPU padded batches of similar length whose reflection padding, means
    and attention each see only the item's own frames (:meth:`EcapaEncoder.embed_on_device`): the same
    vectors to float rounding, without a few hundred small kernels per utterance.
    """

    name = "speaker"
    # Peak per sample, 225.7 measured by benchmarks/stage_memory.py (resynth, full-size SSL-SAS set, 20 and 120 s).
    bytes_per_sample = 226.0

    def __init__(self, models: str = "ssl-sas", device: str = "cpu"):
        super().__init__(models, device)

    def model(self):
        return load_model(self.models, "speaker", device=self.device)

    def process_batch(self, batch: list[Utterance]) -> None:
        device = resolve_device(self.device)
        speaker = self.model()
        waves = [u.audio for u in batch]
        if device == "cpu":
            vectors = speaker.embed(waves)
        else:
            from ....models.nets.precision import float32_products

            with float32_products(False):
                vectors = speaker.embed_on_device(waves)
        for utt, vector in zip(batch, vectors):
            utt.features["speaker"] = vector


class VocoderStage(ModelStage):
    """HiFi-GAN from content, F0 and speaker features (:meth:`Vocoder.synthesise`: on CPU one utterance
    after the other, in windows of a few fixed lengths whose kernels each process builds the first time
    it meets them; off the CPU (``device``, as the content stage's) padded, length-masked batches of
    utterances of similar length; the same outputs, to float rounding, either way).

    ``layout`` overrides fields of the model set's conditioning layout (e.g. ``standardise_content``),
    for vocoders trained with a layout the set's config does not record.

    ``precision: bfloat16`` (opt-in) runs the generator under bfloat16 autocast on CPU (conditioning frames
    and their layer norms stay float32): about 3.4x faster than float32 on an AMX CPU; cost, against float32
    on random full-size SSL-SAS weights, about 38 dB waveform SNR (largest error about 6e-4 before the
    output peak normalisation, some 20 steps of 16 bits). Off the CPU the generator is in its direct form
    (plain convolutions, weights in ``precision`` since loading, no autocast). The output is float32 either way.
    """

    name = "vocoder"
    # Peak per sample, 25.4 measured by benchmarks/stage_memory.py (resynth, full-size SSL-SAS set, 20 and 120 s).
    bytes_per_sample = 26.0
    inputs = ("content", "f0", "speaker")
    inputs_hint = "put the content, f0 and speaker stages before it"

    def __init__(self, models: str = "ssl-sas", output_peak: float | None = 0.95, layout: dict | None = None,
                 precision: str = "float32", device: str = "cpu"):
        self.precision, self.tf32 = stage_precision(precision, "vocoder.precision")
        super().__init__(models, device)
        self.output_peak = None if output_peak is None else float(output_peak)
        self.layout = dict(layout or {})

    @classmethod
    def prepares_from_set(cls) -> bool:
        return False  # its prepare_set only checks a setting

    def prepare_set(self, data: Any, work_dir: Any, progress: bool = True) -> dict[str, Any]:
        # A layout override is checked here, once before the first utterance, not when the stage is built:
        # describing a system (voxanon systems) then imports no torch, nor does a run without an override
        # before it loads its models.
        if not self.layout:
            return {}
        from ....models.nets.hifigan import ConditioningLayout

        unknown = set(self.layout) - set(ConditioningLayout.__dataclass_fields__)
        if unknown:
            raise VoxanonError(f"vocoder.layout has no field(s) {sorted(unknown)}; fields: "
                               f"{sorted(ConditioningLayout.__dataclass_fields__)}")
        return {}

    def model(self):
        """The generator, with the layout override (loading it checks that the override fits)."""
        from ....models.nets.hifigan import Vocoder

        vocoder = load_model(self.models, "vocoder", self.precision, resolve_device(self.device))
        if not self.layout:
            return vocoder
        return Vocoder(vocoder.generator, dataclasses.replace(vocoder.layout, **self.layout))

    def process_batch(self, batch: list[Utterance]) -> None:
        import torch

        vocoder = self.model()
        self.check_inputs(batch)
        items = [(torch.from_numpy(u.features["content"]), torch.from_numpy(u.features["f0"]),
                  torch.from_numpy(np.asarray(u.features["speaker"], dtype=np.float32))) for u in batch]
        from ....models.nets.precision import float32_products

        # Off the CPU (cpu:N included) the generator is in its direct form, which synthesise runs as padded batches.
        with float32_products(self.tf32):
            waves = vocoder.synthesise(items, getattr(torch, self.precision))
        for utt, wave in zip(batch, waves):
            peak = float(np.max(np.abs(wave)))
            if self.output_peak is not None and peak > 0:
                wave = wave / peak * self.output_peak
            utt.audio = wave.astype(np.float32)
