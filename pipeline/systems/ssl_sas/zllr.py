"""Sex-attribute protection stages: zero-LLR flow on the speaker vector, F0 to neutral targets, TD-PSOLA.

* ``zero_llr`` (zLLR-VC step 1, Noé 2023 thesis §5.4): the source ECAPA vector, L2-normalised, is mapped
  by the sex flow to its base space, the LLR coordinate z1 is set to 0 and the vector mapped
  back; it replaces ``features["speaker"]``.
* ``f0_neutral`` (zLLR-VC step 2): the voiced frames of ``features["f0"]`` are mapped affinely to
  the sex-neutral target moments (:mod:`voxanon.models.dsp.f0_transform`).
* ``tdpsola`` (the thesis's TDPSOLA baseline): the same moment mapping realised on the waveform
  by Praat's PSOLA (:mod:`voxanon.models.dsp.psola`); no neural model, deterministic.

Targets are the published 154.37 Hz / 30.2 Hz unless ``mean_hz``/``std_hz`` say otherwise, or
``targets`` names a file written by ``voxanon f0-targets`` (which then replaces both numbers;
they enter the run's configuration hash, so changing the file's targets redoes the run).
Each stage notes what it measured in the utterance's journal record.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ....data_prep.errors import VoxanonError
from ....models.dsp.f0_transform import DEFAULT_FLOOR_HZ, NEUTRAL_F0_MEAN_HZ, NEUTRAL_F0_STD_HZ
from ....models.dsp.psola import PRAAT_F0_MAX_HZ, PRAAT_F0_MIN_HZ
from .f0_targets import read_f0_targets
from ...stage_settings import Number, SettingError, checked
from ..stage import Stage, Utterance

_flows: dict[str, Any] = {}


def load_sex_flow(name: str):
    """The saved zero-LLR flow ``name`` (under ``$VOXANON_HOME/flows`` or a path), cached per process."""
    from ....models.checkpoints.registry import asset_dir

    directory = asset_dir("flows", name).resolve()
    key = str(directory)
    if key not in _flows:
        from ....models.nets.flow import load_flow

        _flows[key] = load_flow(directory)
    return _flows[key]


_TARGET_SETTINGS = {"mean_hz": Number(0.0, low_inclusive=False, unit="(Hz)"), "std_hz": Number(0.0, unit="(Hz)")}


class _NeutralTargets:
    """The target moments of a stage: explicit numbers, or those of an ``f0-targets`` file."""

    def __init__(self, mean_hz: float, std_hz: float, targets: str | None):
        self.targets = targets
        if targets is not None:
            mean_hz, std_hz = read_f0_targets(targets)
        values = checked(self.name, _TARGET_SETTINGS, {"mean_hz": mean_hz, "std_hz": std_hz})
        self.mean_hz, self.std_hz = values["mean_hz"], values["std_hz"]

    def prepare_set(self, data, work_dir, progress: bool = True) -> dict[str, Any]:
        # The numbers, not only the file name, must enter the configuration hash.
        return {"mean_hz": self.mean_hz, "std_hz": self.std_hz} if self.targets is not None else {}


class F0NeutralStage(_NeutralTargets, Stage):
    """Voiced F0 mapped per utterance to the neutral mean and std (0 Hz frames stay unvoiced)."""

    name = "f0_neutral"

    def __init__(self, mean_hz: float = NEUTRAL_F0_MEAN_HZ, std_hz: float = NEUTRAL_F0_STD_HZ,
                 targets: str | None = None, floor_hz: float = DEFAULT_FLOOR_HZ):
        super().__init__(mean_hz, std_hz, targets)
        self.floor_hz = checked(self.name, {"floor_hz": Number(0.0, low_inclusive=False, unit="(Hz)")},
                                {"floor_hz": floor_hz})["floor_hz"]

    def process(self, utt: Utterance) -> None:
        from ....models.dsp.f0_transform import map_f0_to_moments, voiced_moments

        if "f0" not in utt.features:
            raise VoxanonError(f"{utt.utt_id}: f0_neutral needs an F0 track; put the f0 stage before it")
        f0 = utt.features["f0"]
        moments = voiced_moments(f0)
        mapped = map_f0_to_moments(f0, self.mean_hz, self.std_hz, floor_hz=self.floor_hz)
        utt.features["f0"] = mapped.astype(np.float32)
        utt.record["f0_voiced_frames"] = 0 if moments is None else moments.n_voiced
        if moments is not None:
            utt.record["f0_source_mean_hz"] = moments.mean_hz
            utt.record["f0_source_std_hz"] = moments.std_hz
            utt.record["f0_frames_at_floor"] = int(np.sum((f0 > 0) & (mapped == self.floor_hz)))


class ZeroLLRStage(Stage):
    """The speaker vector with its sex evidence removed: ``g(z with z1 = 0)``, ``z = g⁻¹(x / ‖x‖)``.

    Flows trained with ``l2_normalise_input`` normalise their inputs themselves; for others the
    stage normalises first (zLLR-VC works on unit-length ECAPA vectors). The journal records the
    flow's LLR (natural log, > 0 female) before and after; after is 0 up to float error.
    """

    name = "zero_llr"

    def __init__(self, flow: str = "sex"):
        if not str(flow):
            raise ValueError("zero_llr.flow must name a flow (under $VOXANON_HOME/flows) or give its path")
        self.flow = str(flow)

    def needs(self) -> list[str]:
        return [f"flow:{self.flow}"]

    def load_models(self) -> None:
        # A flow that cannot be read is the run's fault, found before any utterance.
        load_sex_flow(self.flow)

    def process_batch(self, batch: list[Utterance]) -> None:
        import torch

        from ....data_prep.vectors import l2_normalise

        missing = [utt.utt_id for utt in batch if "speaker" not in utt.features]
        if missing:
            raise VoxanonError(f"zero_llr needs a speaker vector; missing for {missing[:4]} "
                               "(put the speaker stage before it)")
        if not batch:
            return
        flow = load_sex_flow(self.flow)
        vectors = np.stack([np.asarray(utt.features["speaker"], dtype=np.float64) for utt in batch])
        if not flow.config.l2_normalise_input:
            vectors = l2_normalise(vectors)
        before = flow.llr_numpy(vectors)
        protected = flow.protect_numpy(vectors)
        with torch.no_grad():
            # Directly on the protected vector: llr_numpy would L2-normalise it again first.
            after = flow.llr(torch.as_tensor(protected, dtype=flow.log_mu.dtype)).double().numpy()
        for utt, vector, llr_before, llr_after in zip(batch, protected, before, after):
            utt.features["speaker"] = vector.astype(np.float32)
            utt.record["llr_before"] = float(llr_before)
            utt.record["llr_after"] = float(llr_after)


class TdPsolaStage(_NeutralTargets, Stage):
    """TD-PSOLA of the waveform to the neutral F0 moments (Praat); same length, envelope untouched."""

    name = "tdpsola"
    bytes_per_sample = 22.0  # 21.5 measured (benchmarks/stage_memory.py, 20 and 80 s at 16 kHz)

    def __init__(self, mean_hz: float = NEUTRAL_F0_MEAN_HZ, std_hz: float = NEUTRAL_F0_STD_HZ,
                 targets: str | None = None, f0_min_hz: float = PRAAT_F0_MIN_HZ,
                 f0_max_hz: float = PRAAT_F0_MAX_HZ):
        super().__init__(mean_hz, std_hz, targets)
        # Praat's pitch analysis refuses a floor below 3 Hz.
        pitch = Number(3.0, unit="(Hz)")
        values = checked(self.name, {"f0_min_hz": pitch, "f0_max_hz": pitch},
                         {"f0_min_hz": f0_min_hz, "f0_max_hz": f0_max_hz}, {"f0_min_hz": "Praat's pitch floor"})
        self.f0_min_hz, self.f0_max_hz = values["f0_min_hz"], values["f0_max_hz"]
        if not self.f0_min_hz < self.f0_max_hz:
            raise SettingError(f"tdpsola: need f0_min_hz < f0_max_hz, got {f0_min_hz} and {f0_max_hz}")

    def check_sample_rate(self, sample_rate: int) -> None:
        if self.f0_max_hz > sample_rate / 2:
            raise SettingError(f"tdpsola.f0_max_hz={self.f0_max_hz:g} is above the Nyquist frequency of "
                               f"{sample_rate} Hz ({sample_rate / 2:g} Hz): no pitch above it can be heard in the audio")

    def process(self, utt: Utterance) -> None:
        from ....models.dsp.psola import psola_to_moments

        result = psola_to_moments(utt.audio, utt.sample_rate, self.mean_hz, self.std_hz,
                                  f0_min_hz=self.f0_min_hz, f0_max_hz=self.f0_max_hz)
        utt.audio = result.audio
        utt.record["pitch_points"] = 0 if result.source is None else result.source.n_voiced
        if result.source is not None:
            utt.record["f0_source_mean_hz"] = result.source.mean_hz
            utt.record["f0_source_std_hz"] = result.source.std_hz
