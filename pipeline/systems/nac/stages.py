"""Stages of VoicePrivacy 2024 B4 (NAC: HuBERT semantic tokens -> Bark coarse and fine -> EnCodec).

Data flow per utterance (``features`` keys in brackets), as the recipe's ``anonymizer.py`` runs it:

1. ``nac_voice``: the voice prompt, one of the set's Bark voices (sorted by name), chosen by ``selection``
   (:data:`SELECTIONS`) [``voice``]; its name is recorded in the run journal.
2. ``nac_semantic``: HuBERT-base layer 9 through the quantiser's LSTM, argmax (input 16 kHz -> 24 kHz -> 16 kHz
   as the recipe resamples it; :func:`voxanon.models.nets.nac.semantic.semantic_tokens`) [``semantic``], 49.9 Hz.
3. ``nac_coarse``: Bark's coarse GPT, 2 codebooks at 75 Hz, prompted by the voice (60-step windows, 630
   steps of history, KV cache; ``temperature`` 0.7, ``top_k`` none) [``coarse``].
4. ``nac_fine``: Bark's fine GPT fills codebooks 3-8 (1,024-frame windows every 512; ``temperature`` 0.5;
   null: argmax) [``fine``].
5. ``nac_decode``: EnCodec 24 kHz at 6 kbps (the 8 codebooks), resampled to 16 kHz as librosa 0.9.2's
   default (resampy ``kaiser_best``) does. The output's length is the chain's own, as the recipe writes it:
   320 samples at 24 kHz per coarse frame, floor(HuBERT frames × 75 / 49.9) frames, some tens of
   milliseconds shorter than the input.

Every draw (coarse, fine) takes a :class:`torch.Generator` seeded from the utterance's seed
(:meth:`~voxanon.pipeline.systems.stage.Utterance.rng`), one stream per stage: a rerun, a resumed run or a run
with other workers gives the same bytes. The recipe's draws are unseeded.

Voice selection (``selection``):

* ``random_per_utt`` (the challenge's: ``random.choice`` per utterance): each utterance draws a voice;
* ``random_per_spk``: each source speaker draws one voice, for all its utterances;
* ``constant``: every utterance takes ``constant``: a voice name, or ``random`` (:data:`EMPTY_PROMPT`), the
  reference's empty prompt (no semantic, coarse or fine history), as the recipe's ``target_voice_id: random``.

``device`` (``cpu``, ``cuda``, ``auto``, ``cpu:N``) on the model stages: on the CPU each utterance runs alone,
through the reference's exact calls; elsewhere the coarse and fine stages sample the runner's batch together
(left-padded coarse windows with per-row positions and key masks, stacked fine windows;
:func:`voxanon.models.nets.nac.bark.generate_coarse`), each utterance's draws still from its own generator, and
``precision: bfloat16`` runs them under bfloat16 autocast, as the recipe does on a GPU that supports it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ....data_prep.errors import VoxanonError
from ...model_service import cached_float32_model, check_precision, model_set, model_set_config, resolve_device
from ..stage import TARGET_SELECTIONS, ModelStage, Stage, Utterance, choose_target, stream_seed

SELECTIONS = TARGET_SELECTIONS
EMPTY_PROMPT = "random"
"""The voice name that means no prompt: the coqui fork's ``load_voice`` returns (None, None, None) for it before
looking at any voice folder, so it wins over a voice of that name, as there."""
MODELS = "nac"
MIN_SAMPLES = 400
"""HuBERT's feature encoder needs 400 samples (25 ms) at 16 kHz for one frame."""
STREAMS = {"nac_coarse": 1, "nac_fine": 2}


def load_component(name: str, component: str, device: str = "cpu"):
    """A component of an installed B4 set (:func:`voxanon.models.checkpoints.nac.load_component`), once per process and device."""
    from ....models.checkpoints import nac

    return cached_float32_model(name, component, device, lambda: nac.load_component(model_set(name, "nac"), component),
                                movable=component != "voices")


def generator(utt: Utterance, stage: str):
    """A CPU :class:`torch.Generator` for ``stage``'s draws on ``utt``, from the utterance's seed."""
    import torch

    return torch.Generator().manual_seed(stream_seed(utt.seeds["utterance"], STREAMS[stage]))


class NacVoiceStage(Stage):
    """The Bark voice prompt of each utterance (module doc)."""

    name = "nac_voice"
    model_free = True

    def __init__(self, models: str = MODELS, selection: str = "random_per_utt", constant: str | None = None):
        if selection not in SELECTIONS:
            raise ValueError(f"nac_voice.selection must be one of {', '.join(SELECTIONS)}, got {selection!r}")
        if selection == "constant" and not constant:
            raise ValueError("nac_voice.selection constant needs nac_voice.constant (a voice name)")
        self.models, self.selection, self.constant = models, selection, constant
        self._voices: list[str] | None = None

    def needs(self) -> list[str]:
        return [f"checkpoint:{self.models}"]

    def _names(self) -> list[str]:
        if self._voices is None:
            self._voices = list(model_set_config(self.models, "nac")["voices"])
        return self._voices

    def prepare_set(self, data, work_dir, progress: bool = True) -> dict[str, Any]:
        if self.selection == "constant" and self.constant != EMPTY_PROMPT and self.constant not in self._names():
            raise VoxanonError(f"nac_voice.constant {self.constant!r} is not one of model set {self.models!r}'s "
                               f"{len(self._names())} voices (e.g. {', '.join(self._names()[:5])}, ...) nor "
                               f"{EMPTY_PROMPT!r} (no prompt)")
        return {}

    def load_models(self) -> None:
        self._names()

    def process(self, utt: Utterance) -> None:
        voices = self._names()
        if self.selection == "constant":
            if self.constant != EMPTY_PROMPT and self.constant not in voices:
                raise VoxanonError(f"nac_voice.constant {self.constant!r} is not a voice of model set {self.models!r}")
        voice = choose_target(utt, self.selection, voices, self.constant)
        utt.features["voice"] = voice
        utt.record["voice"] = voice


class _NacModelStage(ModelStage):
    component: str
    inputs_hint = "B4's stages run in the order nac_voice, nac_semantic, nac_coarse, nac_fine, nac_decode"

    def __init__(self, models: str = MODELS, device: str = "cpu"):
        super().__init__(models, device)

    def model(self):
        return load_component(self.models, self.component, self.device)

    def _voices(self, batch: list[Utterance]):
        """Each utterance's prompt; None for :data:`EMPTY_PROMPT`."""
        voices = load_component(self.models, "voices")
        return [None if utt.features["voice"] == EMPTY_PROMPT else voices[utt.features["voice"]] for utt in batch]


class _SamplingStage(_NacModelStage):
    """A Bark stage: ``precision`` other than float32 runs it under autocast to it (the recipe's bfloat16 on a GPU)."""

    def __init__(self, models: str = MODELS, device: str = "cpu", precision: str = "float32"):
        super().__init__(models, device)
        self.precision = check_precision(precision, f"{self.name}.precision")

    def _groups(self, batch: list[Utterance]) -> list[list[Utterance]]:
        """One utterance at a time on the CPU (the reference's calls); the batch together elsewhere."""
        return [[utt] for utt in batch] if resolve_device(self.device) == "cpu" else [batch]

    def _dtype(self):
        import torch

        return getattr(torch, self.precision)


class NacSemanticStage(_NacModelStage):
    name = "nac_semantic"
    component = "hubert"

    def process_batch(self, batch: list[Utterance]) -> None:
        from ....models.nets.nac.semantic import semantic_tokens

        hubert = self.model()
        quantiser = load_component(self.models, "quantiser", self.device)
        layer = int(model_set(self.models, "nac").config["hubert_layer"])
        for utt in batch:
            if len(utt.audio) < MIN_SAMPLES:
                raise VoxanonError(f"{utt.utt_id}: {len(utt.audio)} samples; B4's HuBERT needs at least "
                                   f"{MIN_SAMPLES} (25 ms)")
            utt.features["semantic"] = semantic_tokens(hubert, quantiser, utt.audio, layer)


class NacCoarseStage(_SamplingStage):
    """Bark's coarse tokens; ``temperature`` (0.7) and ``top_k`` (none; 1 is deterministic) as the reference's."""

    name = "nac_coarse"
    component = "coarse"
    inputs = ("voice", "semantic")

    def __init__(self, models: str = MODELS, device: str = "cpu", precision: str = "float32",
                 temperature: float = 0.7, top_k: int | None = None):
        super().__init__(models, device, precision)
        if not float(temperature) > 0:
            raise ValueError(f"nac_coarse.temperature must be positive, got {temperature}")
        if top_k is not None and int(top_k) < 1:
            raise ValueError(f"nac_coarse.top_k must be at least 1 or null, got {top_k}")
        self.temperature, self.top_k = float(temperature), None if top_k is None else int(top_k)

    def process_batch(self, batch: list[Utterance]) -> None:
        from ....models.nets.nac.bark import generate_coarse

        self.check_inputs(batch)
        for group in self._groups(batch):
            codes = generate_coarse(self.model(), [u.features["semantic"] for u in group], self._voices(group),
                                    [generator(u, self.name) for u in group], self.temperature, self.top_k,
                                    dtype=self._dtype())
            for utt, coarse in zip(group, codes):
                utt.features["coarse"] = coarse


class NacFineStage(_SamplingStage):
    """Bark's fine tokens; ``temperature`` 0.5, null for argmax."""

    name = "nac_fine"
    component = "fine"
    inputs = ("voice", "coarse")

    def __init__(self, models: str = MODELS, device: str = "cpu", precision: str = "float32",
                 temperature: float | None = 0.5):
        super().__init__(models, device, precision)
        if temperature is not None and not float(temperature) > 0:
            raise ValueError(f"nac_fine.temperature must be positive or null (argmax), got {temperature}")
        self.temperature = None if temperature is None else float(temperature)

    def process_batch(self, batch: list[Utterance]) -> None:
        from ....models.nets.nac.bark import generate_fine

        self.check_inputs(batch)
        for group in self._groups(batch):
            codes = generate_fine(self.model(), [u.features["coarse"] for u in group], self._voices(group),
                                  [generator(u, self.name) for u in group], self.temperature, dtype=self._dtype())
            for utt, fine in zip(group, codes):
                utt.features["fine"] = fine


class NacDecodeStage(_NacModelStage):
    """EnCodec 24 kHz decode at 6 kbps, resampled to the system's 16 kHz as the recipe does."""

    name = "nac_decode"
    component = "encodec"
    inputs = ("fine",)

    def process_batch(self, batch: list[Utterance]) -> None:
        import torch

        from ....models.dsp.resample import resample_kaiser_best
        from ....models.nets.nac.semantic import SAMPLE_RATE

        self.check_inputs(batch)
        decoder = self.model()
        device = next(decoder.parameters()).device
        for utt in batch:
            codes = torch.from_numpy(np.ascontiguousarray(utt.features["fine"]))[None].to(device)
            with torch.inference_mode():
                audio = decoder(codes)[0].float().cpu().numpy()
            utt.audio = resample_kaiser_best(audio, SAMPLE_RATE, utt.sample_rate).astype(np.float32)
