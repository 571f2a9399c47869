"""The stage protocol: how one utterance's state flows through a system's chain.

A system is a list of stages. Each stage takes a batch of :class:`Utterance` objects
and updates them in place: it may replace ``audio`` (a transform or a vocoder), add
``features`` for later stages (F0, content, speaker vector), note the parameters it
drew in ``record`` (saved per utterance in the run journal, so runs are inspectable),
and put arrays in ``vectors`` (the runner writes each as ``<out>/<name>/<utt>.xvector``,
raw little-endian float32 as SSL-SAS reads them, e.g. B1's pseudo-speaker vectors).

A stage that needs facts about the whole set (B1 selects a pseudo-speaker from each
source speaker's mean vector) computes them in :meth:`Stage.prepare_set`, once, in the
main process, before any utterance is processed; the options it returns are merged into
the stage's configuration, which is what the worker processes are built from.

A stage states what it needs before it can run (model sets, pools, flows, speaker
sexes) in :meth:`Stage.needs`; the system checks every need before the first utterance.

Randomness comes only from :meth:`Utterance.rng`, whose seeds derive from (run seed,
system, utterance or speaker id) by sha256: reruns, resumed runs and runs with any
number of workers give bit-identical output.
"""
from __future__ import annotations

import hashlib
from abc import ABCMeta, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ...data_prep.errors import VoxanonError
from ..model_service import check_device_available, check_device_name

SEED_LEVELS = ("utterance", "speaker")
TARGET_SELECTIONS = ("random_per_utt", "random_per_spk", "constant")
"""How a conversion stage picks each utterance's target (voice, speaker) among its model's: one uniform draw per
utterance, one per source speaker (for all its utterances; two speakers may draw the same), or ``constant``."""


def derive_seed(run_seed: int, system: str, key: str) -> int:
    """A 64-bit seed from sha256 of (run seed, system name, key): stable across processes."""
    digest = hashlib.sha256(f"{run_seed}\x1f{system}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def stream_seed(seed: int, stream: int) -> int:
    """A seed for stream number ``stream`` of the draws made from ``seed`` (an utterance's, a speaker's or the
    run's): each stage of a family numbers its own streams, so no two share a sequence."""
    return int(np.random.default_rng([seed, stream]).integers(2 ** 63))


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
    vectors: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def create(cls, utt_id: str, speaker: str, gender: str | None, audio: np.ndarray,
               sample_rate: int, run_seed: int, system: str) -> "Utterance":
        # "run": one draw shared by every utterance of the run (B5/B6's distinct target per source speaker).
        seeds = {"utterance": derive_seed(run_seed, system, f"utt:{utt_id}"),
                 "speaker": derive_seed(run_seed, system, f"spk:{speaker}"),
                 "run": derive_seed(run_seed, system, "run")}
        return cls(utt_id, speaker, gender, audio, sample_rate, seeds)

    def rng(self, level: str = "utterance") -> np.random.Generator:
        """A fresh generator for draws made once per utterance, once per speaker, or once per run (``run``)."""
        if level not in self.seeds:
            raise ValueError(f"seed level must be one of {SEED_LEVELS + ('run',)}, got {level!r}")
        return np.random.default_rng(self.seeds[level])


class Stage:
    """One step of a system. Subclasses set ``name`` and override ``process`` or ``process_batch``."""

    name: ClassVar[str]
    model_free: ClassVar[bool] = False
    """True for a stage that needs neither torch nor a loaded model (reading-level DSP, pYAAPT's F0): the
    runner may run a system's leading model-free stages in a helper process while it loads the models, and
    the streaming executor runs them in its pool of CPU processes."""
    bytes_per_sample: float | None = None
    """The memory the stage takes at its peak on the CPU above what the utterance held before it, in bytes per
    sample of the utterance at the system's rate, measured (benchmarks/stage_memory.py): a class attribute, or a
    property where it depends on the settings (F0's backend). The run's memory check
    (:mod:`voxanon.pipeline.execution.memory_plan`) multiplies it by the samples in flight. None: not measured,
    and left out of the estimate, which is then a lower bound."""
    device: str = "cpu"
    """Where the stage's models run (``cpu``, ``cuda``, ``cuda:N``, ``auto``; ``cpu:N`` runs the device code
    path on the CPU). A stage whose device is not ``cpu`` runs in the streaming executor's device process."""

    def needs(self) -> list[str]:
        """Requirements as ``kind:name`` strings (``checkpoint:ssl-sas``, ``pool:libritts``, ``flow:sex``,
        ``spk2gender``); :func:`voxanon.pipeline.systems.recipes.check_needs` resolves them."""
        return []

    def prepare_set(self, data: Any, work_dir: Any, progress: bool = True) -> dict[str, Any]:
        """Options to add to this stage's configuration for the run over ``data`` (a
        :class:`~voxanon.data_prep.corpus.DataDir`); files it writes go under ``work_dir`` with
        names that change with their content, so the configuration hash does too. ``progress``:
        whether long set-level work may show a progress bar (``--quiet`` turns it off)."""
        return {}

    @classmethod
    def prepares_from_set(cls) -> bool:
        """Whether :meth:`prepare_set` draws on the whole set (B1's speaker means, a target per source speaker), so
        that an utterance anonymised alone (``voxanon.load_system``) needs the set prepared first: by default,
        whether the class overrides it."""
        return cls.prepare_set is not Stage.prepare_set

    @classmethod
    def takes_stage_wide(cls, setting: str, options: dict) -> bool:
        """Whether a command-line flag that sets ``setting`` on every stage that has it (``--device``,
        ``--precision``) sets it on this stage, configured with ``options`` (its recipe section)."""
        return True

    def check_sample_rate(self, sample_rate: int) -> None:
        """Refuse (``ValueError`` naming ``stage.setting``) settings that cannot work at the system's
        ``sample_rate`` (a window of no samples, a frequency above Nyquist): checked when the system is built,
        before any utterance, rather than by every utterance in turn."""

    def load_models(self) -> None:
        """Load in this process what ``process_batch`` will need on the CPU (the runner calls it once before
        it forks its workers, which then share what was loaded). Models for another device are left to
        :meth:`load_device_models`: a CUDA context does not survive a fork."""

    def load_device_models(self) -> None:
        """Load in this process the models ``process_batch`` runs on a device other than the CPU (checking
        that the device is there). The runner calls it, after :meth:`load_models`, in each process that runs
        batches and forks nothing afterwards, before the process takes any work."""

    def process(self, utt: Utterance) -> None:
        raise TypeError(f"stage {self.name!r} defines neither process nor process_batch")

    def process_batch(self, batch: list[Utterance]) -> None:
        for utt in batch:
            self.process(utt)


class ModelStage(Stage, metaclass=ABCMeta):
    """A stage that runs models of the installed model set ``models`` on ``device``: it needs the set, and loads
    its models on the CPU before the runner forks its workers, or on another device in the process that runs
    its batches (checking first that the device is there). Subclasses set ``name`` and define :meth:`model`;
    ``inputs`` names the ``features`` earlier stages must have given each utterance (:meth:`check_inputs`)."""

    inputs: ClassVar[tuple[str, ...]] = ()
    inputs_hint: ClassVar[str] = ""
    """Which stages give the ``inputs``, for the message when one is missing."""

    def __init__(self, models: str, device: str = "cpu"):
        self.models = models
        self.device = check_device_name(device, f"{self.name}.device")

    def needs(self) -> list[str]:
        return [f"checkpoint:{self.models}"]

    @abstractmethod
    def model(self) -> Any:
        """The stage's models on its device, loaded once per process (the model service caches them)."""

    def load_models(self) -> None:
        if self.device == "cpu":
            self.model()

    def load_device_models(self) -> None:
        if self.device != "cpu":
            check_device_available(self.device)
            self.model()

    def check_inputs(self, batch: list[Utterance]) -> None:
        """Refuse a batch some of whose utterances lack one of ``inputs`` (the stages before it are not those it
        needs), naming the first few."""
        missing = [f"{utt.utt_id}:{key}" for utt in batch for key in self.inputs if key not in utt.features]
        if missing:
            raise VoxanonError(f"{self.name} needs {', '.join(self.inputs)} features; missing {missing[:4]} "
                               f"({self.inputs_hint})")


def choose_target(utt: Utterance, selection: str, targets: list[str], constant: str | None) -> str:
    """``utt``'s target among ``targets`` by ``selection`` (:data:`TARGET_SELECTIONS`), drawn from the utterance's
    or its speaker's seed."""
    if selection == "constant":
        return constant
    level = "utterance" if selection == "random_per_utt" else "speaker"
    return targets[int(utt.rng(level).integers(len(targets)))]


class RunFault(VoxanonError):
    """A fault of the whole run rather than of one utterance (its models cannot load, its device is missing
    or out of memory): the runner stops the run with this one message instead of failing every utterance."""


DEVICE_FAULT_MESSAGES = ("CUDA error", "CUDA out of memory", "CUBLAS_STATUS", "cuDNN error", "CUDA driver")


def is_run_fault(error: BaseException) -> bool:
    """Whether a stage's ``error`` is the run's: a :class:`RunFault`, or the device's (out of memory, a CUDA
    error), which would fail every utterance after it too. Told apart by name, so that no torch is imported."""
    if isinstance(error, RunFault) or type(error).__name__ in ("OutOfMemoryError", "AcceleratorError"):
        return True
    return isinstance(error, RuntimeError) and any(text in str(error) for text in DEVICE_FAULT_MESSAGES)


def one_line(error: BaseException) -> str:
    """``error`` as one line: its type (unless a VoxanonError, whose message says it all) and its message."""
    message = " ".join(str(error).split())
    return message if isinstance(error, VoxanonError) else f"{type(error).__name__}: {message}"
