"""One batch of utterances through a system: load, run the stages, write; the per-utterance functions every
executor calls (in-process, the worker pool, the streaming lanes, Ray actors)."""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import soundfile

from ...data_prep.atomic import atomic_write_bytes
from ...data_prep.audio import Audio, AudioError, load_audio, to_pcm16
from ...data_prep.digest import sha256_file
from ...data_prep.paths import contained_path
from ..model_service import check_device_available
from ..systems.stage import RunFault, Stage, Utterance, is_run_fault, one_line
from ..systems.recipes import System


# Shorter, no system has one analysis frame (25 ms: the neural chains' first; McAdams takes 20 ms): the output
# would be silence (a 1-sample input gave a 1-sample silent output).
MIN_SECONDS = 0.025


@dataclass(frozen=True)
class Job:
    utt: str
    speaker: str
    gender: str | None
    source: str
    out_path: str
    seconds: float | None = None   # its length as the set's metadata or the file's header says; None: unknown
    companion: bool = False        # finished already: computed with its batch, neither written nor reported


@dataclass
class Outcome:
    utt: str
    sha256: str | None = None
    n_samples: int = 0
    input_seconds: float = 0.0
    record: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed_stage: str | None = None
    error: str | None = None


def _wav_bytes(samples, sample_rate: int) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, to_pcm16(samples), sample_rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue()


def sha256_or_none(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None


@dataclass
class Prepared:
    """A job's utterance as loaded and taken through its system's first ``stages_done`` stages, with what
    loading it reported."""
    utterance: Utterance
    stages_done: int
    input_seconds: float
    notes: list[str]


@dataclass
class Batch:
    """Jobs on their way through a system: the utterances still going (``ready``, in job order) and every
    job's outcome so far. The unit that the runner's per-utterance functions (:func:`load_batch`,
    :func:`run_stages`, :func:`write_batch`) pass on, whichever process or machine runs each of them."""
    jobs: list[Job]
    ready: list[Prepared]
    outcomes: dict[str, Outcome]


def load_prepared(system: System, job: Job, allow_pipes: bool) -> Prepared:
    """``job``'s audio as a fresh utterance of ``system``; raises :class:`AudioError`."""
    return prepare_audio(system, job, load_audio(job.source, system.sample_rate, max_seconds=system.max_seconds,
                                                 min_seconds=MIN_SECONDS, allow_pipe=allow_pipes))


def prepare_audio(system: System, job: Job, audio: Audio) -> Prepared:
    """``job``'s loaded ``audio`` (checked, as :func:`load_audio` checks it with ``min_seconds=MIN_SECONDS``) as a
    fresh utterance of ``system``."""
    return Prepared(system.new_utterance(job.utt, job.speaker, job.gender, audio.samples), 0, audio.seconds,
                    audio.notes())


def load_batch(system: System, jobs: list[Job], allow_pipes: bool,
               prepared: dict[str, Prepared] | None = None) -> Batch:
    """``jobs`` loaded (a load failure is the job's outcome); a job in ``prepared`` starts from there."""
    batch = Batch(list(jobs), [], {job.utt: Outcome(job.utt) for job in jobs})
    for job in jobs:
        try:
            item = prepared[job.utt] if prepared and job.utt in prepared else load_prepared(system, job, allow_pipes)
        except AudioError as error:
            batch.outcomes[job.utt].failed_stage, batch.outcomes[job.utt].error = "load", error.reason
            continue
        batch.ready.append(item)
        batch.outcomes[job.utt].input_seconds = item.input_seconds
        batch.outcomes[job.utt].notes = item.notes
    return batch


def run_stages(system: System, batch: Batch, start: int = 0, stop: int | None = None) -> Batch:
    """The system's stages ``start`` to ``stop`` on the batch's utterances (each from where it stands). A stage
    that fails on the batch is rerun one utterance at a time, so that the failure is the utterance's at fault
    (and the rest go on); a fault of the run's device or models (:func:`is_run_fault`) stops it instead."""
    stop = len(system.stages) if stop is None else stop
    for index in range(start, stop):
        stage = system.stages[index]
        items = [item for item in batch.ready if item.stages_done <= index]
        if not items:  # every member failed earlier (or, in a device batch, was done elsewhere)
            continue
        try:
            stage.process_batch([item.utterance for item in items])
        except Exception as error:
            if is_run_fault(error):
                raise _stage_fault(system, stage, items, error) from None
            for item in items:
                try:
                    stage.process_batch([item.utterance])
                except Exception as error:
                    if is_run_fault(error):
                        raise _stage_fault(system, stage, [item], error) from None
                    outcome = batch.outcomes[item.utterance.utt_id]
                    outcome.failed_stage, outcome.error = stage.name, f"{type(error).__name__}: {error}"
            batch.ready = [item for item in batch.ready if batch.outcomes[item.utterance.utt_id].error is None]
        for item in items:
            item.stages_done = max(item.stages_done, index + 1)
    return batch


def _stage_fault(system: System, stage: Stage, items: list[Prepared], error: BaseException) -> RunFault:
    longest = max(len(item.utterance.audio) for item in items) / system.sample_rate
    return RunFault(f"system {system.name!r}, stage {stage.name!r}, on a batch of {len(items)} utterance(s) (the "
                    f"longest {longest:.1f} s): {one_line(error)}"
                    + ("; lower the batches: --set batch_seconds=S (the streaming executor) or --batch-size N"
                       if "memory" in str(error) else ""))


def write_batch(system: System, batch: Batch) -> list[Outcome]:
    """Writes the batch's finished utterances (each WAV atomically, its vectors first) and returns the outcome
    of every job but its companions (:attr:`Job.companion`: in the batch only so that the others are computed
    exactly as in the batch they were planned in)."""
    by_id = {job.utt: job for job in batch.jobs}
    for item in batch.ready:
        utt = item.utterance
        job, outcome = by_id[utt.utt_id], batch.outcomes[utt.utt_id]
        if job.companion:
            continue
        out_path = Path(job.out_path)
        try:
            # Vectors first: a WAV whose journal line landed implies its vectors did too.
            for name, vector in utt.vectors.items():
                path = contained_path(out_path.parent.parent, name, f"{utt.utt_id}.xvector")
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(path, np.asarray(vector, dtype="<f4").tobytes())
            data = _wav_bytes(utt.audio, system.sample_rate)
            atomic_write_bytes(out_path, data)
        except Exception as error:
            outcome.failed_stage, outcome.error = "write", f"{type(error).__name__}: {error}"
            continue
        outcome.sha256 = hashlib.sha256(data).hexdigest()
        outcome.n_samples = len(utt.audio)
        outcome.record = utt.record
    return [batch.outcomes[job.utt] for job in batch.jobs if not job.companion]


def process_jobs(system: System, jobs: list[Job], allow_pipes: bool,
                 prepared: dict[str, Prepared] | None = None) -> list[Outcome]:
    """Load, transform and write one batch; every failure of an utterance is caught and attributed to a stage.
    An utterance in ``prepared`` starts where its preparation stopped."""
    return write_batch(system, run_stages(system, load_batch(system, jobs, allow_pipes, prepared)))


def load_stage_models(system: System, stages: Iterable[Stage], device_models: bool) -> None:
    """Each of ``stages``' models loaded in this process (and checked: the model set's checksums, its shapes,
    the device), before the process takes any work; with ``device_models``, also those that run on a device
    other than the CPU. A failure is the run's (:class:`RunFault`), in one line naming the stage."""
    for stage in stages:
        try:
            stage.load_models()
            if device_models:
                check_device_available(stage.device)  # every stage's, whether or not it loads a model there
                stage.load_device_models()
        except Exception as error:
            raise RunFault(f"system {system.name!r}, stage {stage.name!r}: cannot load its models: "
                           f"{one_line(error)}") from None
