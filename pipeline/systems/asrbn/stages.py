"""Stages of SA-toolkit's ASR-BN anonymisation (VoicePrivacy 2024 B5 and B6): target, F0, BN, converter.

Data flow per utterance (``features`` keys in brackets), as SA-toolkit's ``hifigan.py`` converts one
utterance and the VPC 2024 recipe (``anonymization/modules/asrbn/anonymise_dir.py``) drives it:

1. ``asrbn_target``: the target speaker, one of the converter's training speakers (sorted), chosen by
   ``selection`` (:data:`SELECTIONS`) [``target``: its index]; recorded in the run journal.
2. ``f0`` with ``backend: sa-toolkit``: F0 by SA-toolkit's own YAAPT port with B5/B6's settings (35 ms
   frames every 20 ms, :func:`voxanon.models.f0.sa_yaapt.sa_toolkit_f0`; the F0 stage of every system, its cache
   keyed by backend) [``f0``].
3. ``asrbn_bn``: the ASR bottleneck features, vector-quantised (:class:`voxanon.models.nets.asrbn.bottleneck.AsrBnExtractor`)
   [``bn``].
4. ``asrbn_vocoder``: ``CoreHifiGan`` on [BN | F0 normalised over the utterance | one-hot target]
   (:mod:`voxanon.models.nets.asrbn.core_hifigan`). SA-toolkit's output has 320 samples per BN frame plus one; the
   recipe cuts it to the input's length, and so does this stage, which also pads with zeros where the
   converter gives fewer samples than the input (at most 78, when the length is just past a multiple of
   320), so that every output has exactly the input's length. No peak normalisation (``output_peak``:
   none, as the recipe writes the converter's output as it is).

No input normalisation or trimming: the recipe feeds the waveform as read. Inputs of under 400 samples
(25 ms) fail (in ``failures.tsv``, by name).

Target selection (``selection``; the VPC 2024 recipe's ``anon_level``), seeded through
:meth:`~voxanon.pipeline.systems.stage.Utterance.rng`:

* ``random_per_utt`` (the challenge's setting for every set): each utterance draws a target uniformly;
* ``random_per_spk``: each source speaker draws one target, for all its utterances (two speakers may
  draw the same one);
* ``random_per_spk_uniq``: each source speaker of the set gets its own target, no two the same (a set
  with more speakers than targets is refused before any utterance); one permutation of the targets, drawn
  once per run, dealt to the set's speakers in sorted order;
* ``constant``: every utterance gets ``constant`` (the recipe's ``target_constant_spkid``, ``6081``).

Batching: ``device`` (``cpu``, ``cuda``, ``auto``, ``cpu:N`` for the device code path on the CPU; ``voxanon
anonymise --device`` sets it) on the F0 (:class:`~voxanon.pipeline.systems.f0.F0Stage`), BN and converter
stages. On the CPU the BN and converter stages run
each utterance alone (the converter in windows, as the SSL-SAS vocoder); elsewhere wav2vec2 and the
converter run padded, length-masked batches of similar length in the direct form
(:func:`~voxanon.models.nets.precision.prepared_for_device`), each utterance's result equal to its one-at-a-time
result to float rounding. F0 is batched on any device, each track the same whatever the batch.
``precision`` (``float32``; ``bfloat16`` or ``float16``: SA-toolkit runs both networks under float16
autocast on CUDA) on the BN and converter stages; the TDNN-F layers, the quantiser and the F0 stay float32.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from ....data_prep.atomic import atomic_write_text
from ....data_prep.errors import VoxanonError
from ....data_prep.paths import contained_path
from ...model_service import cached_model, model_set, model_set_config, resolve_device, stage_precision
from ..stage import TARGET_SELECTIONS, ModelStage, Stage, Utterance, choose_target

SELECTIONS = TARGET_SELECTIONS[:2] + ("random_per_spk_uniq",) + TARGET_SELECTIONS[2:]
B5_MODELS = "hifigan_bn_tdnnf_wav2vec2_vq_48_v1"
CONSTANT_TARGET = "6081"
"""The VPC 2024 recipe's ``target_constant_spkid``, a LibriTTS train-clean-100 speaker."""


def target_speakers(name: str) -> list[str]:
    """The sorted training speakers of an installed converter (its one-hot targets); reads its config only."""
    config = model_set_config(name, "sa-toolkit")
    if config.get("kind") != "converter":
        raise VoxanonError(f"model set {name!r} is not an SA-toolkit anonymisation model (a hifigan_bn_* tag "
                           "imported with voxanon models import sa-toolkit)")
    return list(config["speakers"])


def load_component(name: str, component: str, precision: str = "float32", device: str = "cpu"):
    """The set's ``extractor`` (:class:`~voxanon.models.nets.asrbn.bottleneck.AsrBnExtractor`) or ``converter`` ((Vocoder,
    speakers)), loaded once per process in the form for ``device`` (:func:`~voxanon.models.nets.precision.prepared_for_device`):
    on the CPU in float32 as built (the converter's spectral convolutions planned, for forked workers to share);
    on the CPU in a lower ``precision`` a copy run under autocast; on any other device (``cpu:N`` included)
    the direct form in ``precision``, built from the set's tensors without CPU plans."""
    device = resolve_device(device)

    def build():
        import torch

        from ....models.checkpoints.sa_toolkit import load_converter, load_extractor

        cpu, dtype = device == "cpu", getattr(torch, precision)
        if cpu and precision == "float32":
            loaded = model_set(name, "sa-toolkit")
            return load_extractor(loaded) if component == "extractor" else load_converter(loaded)
        if component == "extractor":
            extractor = load_component(name, component) if cpu else load_extractor(model_set(name, "sa-toolkit"))
            return extractor.for_device(device, dtype)
        from ....models.nets.hifigan import Vocoder
        from ....models.nets.precision import prepared_for_device

        vocoder, speakers = (load_component(name, component) if cpu
                             else load_converter(model_set(name, "sa-toolkit"), False))
        return Vocoder(prepared_for_device(vocoder.generator, device, dtype), vocoder.layout), speakers

    return cached_model(name, component, precision, device, build)


class AsrBnTargetStage(Stage):
    """The target speaker of each utterance, by the VPC 2024 recipe's selection rules (module doc)."""

    name = "asrbn_target"
    # Peak per sample, 0.0 measured by benchmarks/stage_memory.py (b5, full-size random set, 20 and 120 s).
    bytes_per_sample = 0.0
    model_free = True

    def __init__(self, models: str = B5_MODELS, selection: str = "random_per_utt", constant: str = CONSTANT_TARGET,
                 source_speakers: str | None = None):
        if selection not in SELECTIONS:
            raise ValueError(f"asrbn_target.selection must be one of {', '.join(SELECTIONS)}, got {selection!r}")
        self.models, self.selection, self.constant = models, selection, str(constant)
        self.source_speakers = source_speakers
        self._targets: list[str] | None = None
        self._dealt: dict[str, str] | None = None

    def needs(self) -> list[str]:
        return [f"checkpoint:{self.models}"]

    def prepare_set(self, data, work_dir, progress: bool = True) -> dict[str, Any]:
        """Check the selection against the set and the converter's speakers, once, before any utterance; for
        ``random_per_spk_uniq`` write the set's sorted speakers under ``work_dir`` (named by their digest)."""
        targets = target_speakers(self.models)
        if self.selection == "constant" and self.constant not in targets:
            raise VoxanonError(f"asrbn_target.constant {self.constant!r} is not one of model set {self.models!r}'s "
                               f"{len(targets)} target speakers (e.g. {', '.join(targets[:5])}, ...)")
        if self.selection != "random_per_spk_uniq":
            return {}
        speakers = sorted(set(data.utt2spk.values()))
        if len(speakers) > len(targets):
            raise VoxanonError(f"asrbn_target.selection random_per_spk_uniq gives each source speaker its own "
                               f"target, but set {data.name!r} has {len(speakers)} speakers and model set "
                               f"{self.models!r} {len(targets)} targets; use random_per_spk or random_per_utt")
        text = "".join(f"{speaker}\n" for speaker in speakers)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        path = contained_path(Path(work_dir).resolve(), f"asrbn-source-speakers-{digest}.txt")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
        return {"source_speakers": str(path)}

    def load_models(self) -> None:
        self._target_list()

    def _target_list(self) -> list[str]:
        if self._targets is None:
            self._targets = target_speakers(self.models)
        return self._targets

    def _uniq(self, utt: Utterance) -> str:
        if self._dealt is None:
            if not self.source_speakers:
                raise VoxanonError("asrbn_target: random_per_spk_uniq needs the set's speakers, which the runner "
                                   "prepares (Stage.prepare_set) before the first utterance")
            speakers = Path(self.source_speakers).read_text(encoding="utf-8").split()
            order = utt.rng("run").permutation(len(self._target_list()))
            self._dealt = {speaker: self._target_list()[i] for speaker, i in zip(speakers, order)}
        if utt.speaker not in self._dealt:
            raise VoxanonError(f"{utt.utt_id}: speaker {utt.speaker!r} is not among the set's speakers that "
                               "random_per_spk_uniq dealt targets to")
        return self._dealt[utt.speaker]

    def process(self, utt: Utterance) -> None:
        targets = self._target_list()
        if self.selection == "constant":
            target = self.constant
        elif self.selection == "random_per_spk_uniq":
            target = self._uniq(utt)
        else:
            target = choose_target(utt, self.selection, targets, self.constant)
        utt.features["target"] = targets.index(target)
        utt.record["target_speaker"] = target


class _ModelStage(ModelStage):
    """A stage whose models come from an SA-toolkit set, on ``device`` in ``precision``."""

    component: str

    def __init__(self, models: str = B5_MODELS, precision: str = "float32", device: str = "cpu"):
        self.precision, self.tf32 = stage_precision(precision, f"{self.name}.precision")
        super().__init__(models, device)

    def model(self):
        return load_component(self.models, self.component, self.precision, self.device)

    def _on_cpu(self) -> bool:
        return resolve_device(self.device) == "cpu"


class AsrBnStage(_ModelStage):
    """BN features (50 Hz, vector-quantised) of SA-toolkit's ASR; wav2vec2 in padded batches off the CPU."""

    name = "asrbn_bn"
    # Peak per sample, 792.5 measured by benchmarks/stage_memory.py (b5, full-size random set, 20 and 120 s).
    bytes_per_sample = 793.0
    component = "extractor"

    def process_batch(self, batch: list[Utterance]) -> None:
        extractor = self.model()
        waves = [utt.audio for utt in batch]
        from ....models.nets.precision import float32_products

        with float32_products(self.tf32):
            features = extractor.extract(waves) if self._on_cpu() else extractor.extract_batch(waves)
        for utt, bn in zip(batch, features):
            utt.features["bn"] = bn


class AsrBnVocoderStage(_ModelStage):
    """``CoreHifiGan`` on [BN | normalised F0 | one-hot target]; the output cut or zero-padded to the input's
    length. ``output_peak`` (default none, as SA-toolkit) scales each output's peak to it."""

    name = "asrbn_vocoder"
    # Peak per sample, 101.7 measured by benchmarks/stage_memory.py (b5, full-size random set, 20 and 120 s).
    bytes_per_sample = 102.0
    component = "converter"
    inputs = ("bn", "f0", "target")
    inputs_hint = "put the asrbn_target, f0 (backend sa-toolkit) and asrbn_bn stages before it"

    def __init__(self, models: str = B5_MODELS, precision: str = "float32", device: str = "cpu",
                 output_peak: float | None = None):
        super().__init__(models, precision, device)
        if output_peak is not None and not 0.0 < float(output_peak) <= 1.0:
            raise ValueError(f"asrbn_vocoder.output_peak must be in (0, 1] or null, got {output_peak}")
        self.output_peak = None if output_peak is None else float(output_peak)

    def process_batch(self, batch: list[Utterance]) -> None:
        import torch

        from ....models.nets.asrbn.core_hifigan import conditioning

        vocoder, speakers = self.model()
        self.check_inputs(batch)
        items = [conditioning(u.features["bn"], u.features["f0"], u.features["target"], len(speakers)) for u in batch]
        from ....models.nets.precision import float32_products

        with float32_products(self.tf32):
            waves = (vocoder.synthesise(items, getattr(torch, self.precision)) if self._on_cpu()
                     else vocoder.synthesise_padded(items))
        for utt, wave in zip(batch, waves):
            length = len(utt.audio)
            wave = np.pad(wave[:length], (0, max(0, length - len(wave))))
            peak = float(np.max(np.abs(wave)))
            if self.output_peak is not None and peak > 0:
                wave = wave / peak * self.output_peak
            utt.audio = wave.astype(np.float32)
