"""The stage protocol: how one utterance's state flows through a system's chain.

A system is a list of stages. Each stage takes a batch of :class:`Utterance` objects
and updates them in place: it may replace ``audio`` (a transform or a vocoder), add
``features`` for later stages (F0, content, speaker vector), and note the parameters it
drew in ``record`` (saved per utterance in the run journal, so runs are inspectable).

Randomness comes only from :meth:`Utterance.rng`, whose seeds derive from (run seed,
system, utterance or speaker id) by sha256: reruns, resumed runs and runs with any
number of workers give bit-identical output.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from voxanon.models.mcadams import mcadams

SEED_LEVELS = ("utterance", "speaker")


def derive_seed(run_seed: int, system: str, key: str) -> int:
    """A 64-bit seed from sha256 of (run seed, system name, key): stable across processes."""
    digest = hashlib.sha256(f"{run_seed}\x1f{system}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


@dataclass
class Utterance:
    utt_id: str
    speaker: str
    gender: str | None
    audio: np.ndarray
    sample_rate: int
    seeds: dict[str, int]
    features: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(cls, utt_id: str, speaker: str, gender: str | None, audio: np.ndarray,
               sample_rate: int, run_seed: int, system: str) -> "Utterance":
        seeds = {"utterance": derive_seed(run_seed, system, f"utt:{utt_id}"),
                 "speaker": derive_seed(run_seed, system, f"spk:{speaker}")}
        return cls(utt_id, speaker, gender, audio, sample_rate, seeds)

    def rng(self, level: str = "utterance") -> np.random.Generator:
        """A fresh generator for draws made once per utterance or once per speaker."""
        if level not in self.seeds:
            raise ValueError(f"seed level must be one of {SEED_LEVELS}, got {level!r}")
        return np.random.default_rng(self.seeds[level])


class Stage:
    """One step of a system. Subclasses set ``name`` and override ``process`` or ``process_batch``."""

    name: ClassVar[str]

    def process(self, utt: Utterance) -> None:
        raise TypeError(f"stage {self.name!r} defines neither process nor process_batch")

    def process_batch(self, batch: list[Utterance]) -> None:
        for utt in batch:
            self.process(utt)


class McAdamsStage(Stage):
    """McAdams coefficient anonymisation (B2 with a fixed alpha, B2r with a drawn one)."""

    name = "mcadams"

    def __init__(self, alpha: float = 0.8, randomise: str = "none",
                 alpha_range: tuple[float, float] | list[float] = (0.7, 0.9),
                 lp_order: int = 20, win_ms: float = 20.0, shift_ms: float = 10.0):
        if randomise not in ("none",) + SEED_LEVELS:
            raise ValueError(f"mcadams.randomise must be none, utterance or speaker, got {randomise!r}")
        low, high = (float(v) for v in alpha_range)
        if not 0.0 < low <= high:
            raise ValueError(f"mcadams.alpha_range must be [low, high] with 0 < low <= high, got {alpha_range}")
        self.alpha = float(alpha)
        self.randomise = randomise
        self.alpha_range = (low, high)
        self.lp_order = int(lp_order)
        self.win_ms = float(win_ms)
        self.shift_ms = float(shift_ms)

    def process(self, utt: Utterance) -> None:
        alpha = self.alpha if self.randomise == "none" else float(utt.rng(self.randomise).uniform(*self.alpha_range))
        utt.record["mcadams_alpha"] = alpha
        utt.audio = mcadams(utt.audio, utt.sample_rate, alpha, lp_order=self.lp_order,
                            win_ms=self.win_ms, shift_ms=self.shift_ms)


from voxanon.pipeline.neural_stages import NEURAL_STAGES  # noqa: E402 (neural stages subclass Stage)

STAGES: dict[str, type[Stage]] = {stage.name: stage for stage in (McAdamsStage, *NEURAL_STAGES)}
