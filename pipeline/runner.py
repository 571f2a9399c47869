"""The batch runner: anonymise every utterance of a set, in parallel, resumably.

Output goes to ``<out>/<set><suffix>/`` in the VoicePrivacy layout (``wav/<utt>.wav``,
16-bit mono, plus the set's metadata with ``wav.scp`` and ``utt2dur`` rebuilt). Beside it:

- ``.journal.jsonl``: one line per finished utterance (sha256 of its WAV, samples,
  the parameters it drew, the configuration hash), appended and synced as each one
  finishes. A rerun skips an utterance whose WAV exists and whose hash matches its
  journal line for the same configuration, so a ``kill -9`` loses nothing written:
  WAVs are written to a temporary file and renamed, and an utterance whose WAV landed
  but whose journal line did not is simply redone (bit-identically).
- ``<name>/<utt>.xvector``: per-utterance vectors a stage chose to keep (B1's pseudo
  speakers), raw little-endian float32 as SSL-SAS reads them.
- ``failures.tsv``: ``utt  stage  error`` for every utterance that failed; the rest of
  the set is still processed and the exit code says that something failed. A fault of the whole run
  (its models do not load, its device is missing or out of memory: :class:`RunFault`) is not an
  utterance's: the run stops at once with that one message (exit code 2), and ``run.json`` says so.
- ``run.json``: configuration, package versions, the backend and executor, timing and counts.
- ``.lock``: held while a run writes the set (:mod:`voxanon.data_prep.run_lock`); a second
  run into the same set fails at once, naming the first one's PID and host.

Every path built from an utterance id goes through :func:`voxanon.data_prep.paths.contained_path`,
so no id can make a run write outside its output folder.

Executors: a system whose stages all run on the CPU goes through a pool of worker processes forked from
this one once it has loaded the models (or this process alone, for one worker), each running whole
batches (:func:`process_jobs`); a system with a stage on another device goes through the streaming
executor (:mod:`voxanon.pipeline.streaming`: CPU stages in a pool, the models in one device process).
Both call the same per-utterance functions (:func:`load_batch`, :func:`run_stages`, :func:`write_batch`),
as the Ray backend does.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import logging
import os
import platform
import queue
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from importlib import metadata
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np
import soundfile
from tqdm import tqdm

from voxanon.data_prep.atomic import atomic_write_bytes, atomic_write_text
from voxanon.data_prep.audio import AudioError, load_audio, to_pcm16
from voxanon.data_prep.corpus import DataDir, DataDirError, write_anonymised_dir
from voxanon.data_prep.digest import sha256_file
from voxanon.data_prep.errors import VoxanonError
from voxanon.data_prep.paths import contained_path
from voxanon.data_prep.run_lock import run_lock
from voxanon.pipeline.neural_stages import check_device_available
from voxanon.pipeline.stages import RunFault, Stage, Utterance, is_run_fault, one_line
from voxanon.pipeline.systems import System, build_system, check_needs, config_hash

if TYPE_CHECKING:
    from voxanon.pipeline.streaming import StreamingOptions

log = logging.getLogger(__name__)

JOURNAL = ".journal.jsonl"
FAILURES = "failures.tsv"
RUN_MANIFEST = "run.json"
REPORTED_PACKAGES = ("voxanon", "numpy", "scipy", "librosa", "soundfile", "soxr", "torch", "torchaudio")


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


@dataclass
class SetResult:
    name: str
    out_dir: Path
    total: int
    processed: int
    resumed: int
    failures: list[Outcome]
    wall_seconds: float
    audio_seconds: float

    @property
    def ok(self) -> bool:
        return not self.failures


def _wav_bytes(samples, sample_rate: int) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, to_pcm16(samples), sample_rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue()


def _sha256_or_none(path: Path) -> str | None:
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


def _load(system: System, job: Job, allow_pipes: bool) -> Prepared:
    """``job``'s audio as a fresh utterance of ``system``; raises :class:`AudioError`."""
    audio = load_audio(job.source, system.sample_rate, max_seconds=system.max_seconds, allow_pipe=allow_pipes)
    return Prepared(system.new_utterance(job.utt, job.speaker, job.gender, audio.samples), 0, audio.seconds,
                    audio.notes())


def load_batch(system: System, jobs: list[Job], allow_pipes: bool,
               prepared: dict[str, Prepared] | None = None) -> Batch:
    """``jobs`` loaded (a load failure is the job's outcome); a job in ``prepared`` starts from there."""
    batch = Batch(list(jobs), [], {job.utt: Outcome(job.utt) for job in jobs})
    for job in jobs:
        try:
            item = prepared[job.utt] if prepared and job.utt in prepared else _load(system, job, allow_pipes)
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


_worker_state: dict = {}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _reuse_freed_memory(single_threaded: bool = False) -> None:
    """glibc: serve allocations up to 32 MB from the heap and keep freed memory there for reuse; in a
    ``single_threaded`` process (a forked pool worker), every allocation, however large.

    By default glibc maps each allocation of more than a few MB afresh and unmaps it when freed, so every
    large tensor (HuBERT's first activations, 50 MB for 8 s, the vocoder's) costs page faults and zeroing on
    every utterance: an out-of-place GELU over a 50 MB tensor took 36 ms, in place 10 ms. Measured on one
    core, 6-10 s utterances: content about 10 % and vocoder about 5 % faster, for about 300 MB more resident
    memory (the peak working set stays mapped). 32 MB is glibc's largest threshold, and blocks above it must
    stay mappable where threads allocate (their arenas cannot grow past 64 MB); a process of one thread can
    do without mappings. Set once per process that runs batches; elsewhere than glibc nothing changes."""
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return
    import ctypes

    libc = ctypes.CDLL(None)
    libc.mallopt(-3, 32 << 20)     # M_MMAP_THRESHOLD (fixed, no longer adjusted as blocks are freed)
    libc.mallopt(-1, 2**31 - 1)    # M_TRIM_THRESHOLD: never give the heap's free top back
    if single_threaded:
        libc.mallopt(-4, 0)        # M_MMAP_MAX: no mappings at all


def _init_worker(system: System, allow_pipes: bool, head_start_jobs: list[Job] | None = None,
                 device_models: bool = True) -> "_HeadStart | None":
    """Set up a process that runs batches (this one, a spawned pool worker, a Ray actor, or the parent of
    forked workers): ``system`` with every stage's models loaded and checked now, before any work
    (:func:`load_stage_models`; ``device_models`` false in the parent of forked workers: a CUDA context does
    not survive a fork, so each worker loads those itself).

    Given ``head_start_jobs`` (the parent of forked workers, in the order they will be taken), and a
    system that opens with model-free stages and then loads models, it starts a :class:`_HeadStart`
    on them once the model-free stages are loaded, and returns it."""
    _reuse_freed_memory()
    model_free = next((i for i, stage in enumerate(system.stages) if not stage.model_free), len(system.stages))
    load_stage_models(system, system.stages[:model_free], device_models)
    head_start = (_HeadStart(system, model_free, head_start_jobs, allow_pipes)
                  if head_start_jobs and 0 < model_free < len(system.stages) else None)
    try:
        load_stage_models(system, system.stages[model_free:], device_models)
    except BaseException:
        if head_start:
            head_start.close()
        raise
    _worker_state.update(system=system, allow_pipes=allow_pipes, fault=None)
    return head_start


def _die_with_parent() -> None:
    """Ask the kernel to kill this process when its parent dies (``PR_SET_PDEATHSIG``): a forked one holds
    copies of the parent's files, the output lock's among them, and must not keep them (nor the models'
    memory, nor a device) after a killed run."""
    import ctypes
    import signal

    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


class _HeadStart:
    """A system's leading model-free stages (loading, peak normalisation, pYAAPT's F0) run over the jobs
    the pool will take last, in a process forked before the models load, while this process loads them.

    Loading the neural chain's models takes this process about 2 s (torch's import, the weights, the
    vocoder's plans) on one core, and the other core would idle until the workers start: there, it
    prepares the utterances at the end of the queue (the shortest, longest first): 9-10 of 20, about
    40 % of the F0 work of a 160 s set. Each batch takes the preparations ready when it is submitted
    (:meth:`take`); its worker starts those utterances after their prepared stages, with the same
    values (the stages are deterministic and the utterance's seeds travel with it). An utterance the
    head start could not prepare (bad audio, a stage's error) is left to its worker, which reports it.
    It takes no new job once the workers run (:meth:`stop`) and is ended with the run (:meth:`close`).
    (At the lowest priority it prepared a quarter fewer utterances, and the run was no faster.)"""

    def __init__(self, system: System, stages: int, jobs: list[Job], allow_pipes: bool):
        context = get_context("fork")
        # A queue, not a bare pipe: its feeder thread holds what this process has not read yet, so the
        # head start never waits for it (this process reads only when it submits a batch).
        self._results = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(target=_head_start, daemon=True,
                                        args=(system, stages, jobs[::-1], allow_pipes, self._results, self._stop))
        self._process.start()
        self._ready: dict[str, Prepared] = {}

    def take(self, jobs: list[Job]) -> dict[str, Prepared]:
        """The preparations of ``jobs`` that have arrived (each handed out once)."""
        while True:
            try:
                prepared = self._results.get_nowait()
            except queue.Empty:
                break
            self._ready[prepared.utterance.utt_id] = prepared
        return {job.utt: self._ready.pop(job.utt) for job in jobs if job.utt in self._ready}

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Ends the head start, whatever it still holds: every job has been submitted."""
        self._process.kill()
        self._process.join()
        self._results.close()


def _head_start(system: System, stages: int, jobs: list[Job], allow_pipes: bool, results, stop) -> None:
    _die_with_parent()
    for job in jobs:
        if stop.is_set():
            break
        try:
            prepared = _load(system, job, allow_pipes)
            for stage in system.stages[:stages]:
                stage.process_batch([prepared.utterance])
        except Exception:  # the job's worker meets the same failure and reports it
            continue
        prepared.stages_done = stages
        results.put(prepared)


def _init_forked_worker(device_models: bool, stages: tuple[int, int] | None = None) -> None:
    """A forked worker: one torch thread (the pool gives the parallelism), gone with its parent, and the
    models its parent did not load for it: with ``device_models``, those of its system's stages on another
    device than the CPU (a CUDA context does not survive a fork); with ``stages`` (a range), every model of
    those stages. A fault is kept, and raised by the worker's first batch: an initializer's exception would
    only break the pool, without its message."""
    _die_with_parent()
    os.environ.update({name: "1" for name in THREAD_VARIABLES})
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    _reuse_freed_memory(single_threaded=True)
    system = _worker_state["system"]
    try:
        if stages is not None:
            load_stage_models(system, system.stages[slice(*stages)], False)
        if device_models:
            load_stage_models(system, [stage for stage in system.stages if stage.device != "cpu"], True)
    except RunFault as fault:
        _worker_state["fault"] = fault


def _init_spawned_worker(config: dict, allow_pipes: bool, stages: tuple[int, int] | None = None) -> None:
    """A spawned worker (or device process): the environment its libraries read once, set before they load
    (torch reads the thread variables at import and THP_MEM_ALLOC_ENABLE at its first large allocation, so
    they are set here, in the new process, never in the parent), then :func:`load_worker`."""
    # One thread per worker process: the pool gives the parallelism. Huge pages for torch's large CPU
    # buffers, which spawned workers map afresh for each block above 32 MB (2-8 % faster neural chains,
    # measured).
    os.environ.update({name: "1" for name in (*THREAD_VARIABLES, "THP_MEM_ALLOC_ENABLE")})
    load_worker(config, allow_pipes, stages)


def load_worker(config: dict, allow_pipes: bool, stages: tuple[int, int] | None = None) -> None:
    """This process as a worker of a run (a spawned pool worker, the device process, a Ray actor): the system,
    with the models of its ``stages`` (a range; all by default) loaded and checked; a fault is kept, and
    raised by its first batch. The run's driver has already warned of random weights."""
    from voxanon.models.registry import quiet_random_warnings

    quiet_random_warnings()
    _reuse_freed_memory()
    system = build_system(config)
    start, stop = stages or (0, len(system.stages))
    _worker_state.update(system=system, allow_pipes=allow_pipes, fault=None)
    try:
        load_stage_models(system, system.stages[start:stop], True)
    except RunFault as fault:
        _worker_state["fault"] = fault


def _worker_system() -> System:
    """This worker's system; its model fault, if loading failed, raised for the batch to report."""
    if _worker_state.get("fault") is not None:
        raise _worker_state["fault"]
    return _worker_state["system"]


def _worker_process(jobs: list[Job], prepared: dict[str, Prepared] | None = None) -> list[Outcome]:
    return process_jobs(_worker_system(), jobs, _worker_state["allow_pipes"], prepared)


def batch_invariant(config: dict) -> bool:
    """Whether the system's output is the same however its utterances are batched: on the CPU every stage
    processes an utterance on its own; on another device the neural stages run padded batches, equal to
    one at a time only to float rounding."""
    return all(str((config.get(stage) or {}).get("device", "cpu")) == "cpu" for stage in config.get("stages", []))


def _parallel_batches(batches: list[list[Job]], workers: int, config: dict) -> list[list[Job]]:
    """The batches split so that each worker gets at least eight: a small set's last batch must not run
    alone while the other workers idle (20 utterances in batches of 4 on 2 workers: 3 batches for one,
    2 for the other, which then idled a third of the run). Only where the output does not depend on the
    batching (:func:`batch_invariant`), so that it never depends on the worker count or the backend."""
    if not batch_invariant(config):
        return batches
    jobs = [job for batch in batches for job in batch]
    size = max(1, min(max(map(len, batches), default=1), len(jobs) // (8 * workers)))
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


def fork_safe() -> bool:
    """Whether this process may fork workers: on Linux, with no other thread running (a forked child
    inherits every lock as it was at the fork, held or not)."""
    return sys.platform == "linux" and threading.active_count() == 1


def kill_pool(pool: ProcessPoolExecutor) -> None:
    """Ends ``pool`` now: its queued batches are dropped and its processes killed rather than waited for
    (their batches' outcomes are no longer wanted; what they wrote is redone, bit-identically, on resume)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
    for process in processes:
        process.join()


class _PoolRun:
    """Outcomes, batch by batch, of batches run by a process pool; :meth:`close` (or leaving the ``with``)
    ends the pool whatever the iteration's state, also when the run stops before reading any outcome.

    The first batches are submitted now, which starts the pool's processes; each batch goes with what
    ``head_start`` has prepared of it by then."""

    def __init__(self, pool: ProcessPoolExecutor, batches: list[list[Job]], workers: int,
                 head_start: _HeadStart | None = None):
        self._pool, self._head_start, self._queue = pool, head_start, iter(batches)
        try:
            self._pending = {self._submit(batch) for _, batch in zip(range(workers * 3), self._queue)}
        except BaseException:
            self.close()
            raise
        if head_start:
            head_start.stop()

    def _submit(self, batch: list[Job]):
        prepared = self._head_start.take(batch) if self._head_start else None
        return self._pool.submit(_worker_process, batch, prepared)

    def __iter__(self) -> Iterator[list[Outcome]]:
        while self._pending:
            done, self._pending = wait(self._pending, return_when=FIRST_COMPLETED)
            for future in done:
                try:
                    outcomes = future.result()
                except BrokenProcessPool as error:
                    raise RunFault(f"a worker process died ({one_line(error)}): killed for memory, or by a "
                                   "signal; rerun to resume") from None
                batch = next(self._queue, None)
                if batch is not None:
                    self._pending.add(self._submit(batch))
                yield outcomes

    def close(self) -> None:
        kill_pool(self._pool)
        if self._head_start:
            self._head_start.close()

    def __enter__(self) -> "_PoolRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _run_parallel(system: System, batches: list[list[Job]], workers: int, allow_pipes: bool) -> _PoolRun:
    """Outcomes of ``batches`` from a pool of ``workers`` processes, one torch thread each.

    On Linux the models are loaded once, here, and the workers are forked from this process:
    they share the loaded weights (copy-on-write) and start at once, where spawned workers each
    imported torch and loaded every model again (about 12 s of both cores for the neural chain).
    The pool starts now, before the caller's progress bar starts a thread. Elsewhere, or when this
    process already runs other threads, workers are spawned and each loads the system itself.
    """
    batches = _parallel_batches(batches, workers, system.config)
    device_models = any(stage.device != "cpu" for stage in system.stages)
    if fork_safe():
        # Not THP_MEM_ALLOC_ENABLE here: forked workers keep every block on their heap
        # (_reuse_freed_memory), so huge pages only slow the first touch of each block; measured on the
        # neural chain, each worker's first two utterances took 0.3-0.4 s longer in HuBERT, and the set
        # 0.8 s longer, with them.
        head_start = _init_worker(system, allow_pipes, [job for batch in batches for job in batch],
                                  device_models=False)
        pool = ProcessPoolExecutor(workers, mp_context=get_context("fork"), initializer=_init_forked_worker,
                                   initargs=(device_models,))
        return _PoolRun(pool, batches, workers, head_start)
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init_spawned_worker,
                               initargs=(system.config, allow_pipes))
    return _PoolRun(pool, batches, workers)


class _NoWork(contextlib.nullcontext):
    """The outcomes of no batch."""

    def __init__(self):
        super().__init__(())


class _InProcess:
    """Batches run one after the other in this process, its models loaded (and checked) first."""

    def __init__(self, system: System, batches: list[list[Job]], allow_pipes: bool):
        _init_worker(system, allow_pipes)
        self._batches, self._allow_pipes, self._system = batches, allow_pipes, system

    def __iter__(self) -> Iterator[list[Outcome]]:
        for batch in self._batches:
            yield process_jobs(self._system, batch, self._allow_pipes)

    def close(self) -> None:
        pass

    def __enter__(self) -> "_InProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


EXECUTORS = ("auto", "pool", "streaming")


class LocalBackend:
    """Batches in this process (one worker) or in a pool of ``workers`` local processes; device runs in the
    streaming executor (:mod:`voxanon.pipeline.streaming`)."""

    name = "local"

    def __init__(self, workers: int = 1):
        self.workers = max(1, workers)

    def describe(self) -> dict:
        return {"name": self.name, "workers": self.workers, "cpus": os.cpu_count()}

    def check_devices(self, system: System, streaming: bool) -> None:
        """Before anything is written, where this process runs the batches itself: every device the system's
        stages name is here. Processes that run batches (the streaming executor's device process, the pool's
        workers) check their own before they take work, and a missing device stops the run there, once: this
        process must not ask CUDA itself before it forks them (a CUDA driver started before a fork is unusable
        in the children)."""
        if not streaming and self.workers == 1:
            for device in sorted({stage.device for stage in system.stages}):
                check_device_available(device)

    def outcomes(self, system: System, batches: list[list[Job]], allow_pipes: bool, output_dir: Path,
                 streaming: "StreamingOptions | None" = None):
        """The outcomes of ``batches``, a list per finished batch, from an object to close (or leave with
        ``with``) once read, or when the run stops early."""
        if streaming is not None:
            from voxanon.pipeline.streaming import LocalLanes, StreamingRun

            return StreamingRun(LocalLanes(system, allow_pipes, self.workers, streaming.device_processes), batches,
                                streaming)
        if self.workers > 1 and len(batches) > 1:
            return _run_parallel(system, batches, self.workers, allow_pipes)
        return _InProcess(system, batches, allow_pipes)


def read_run_identity(out_dir: Path) -> dict | None:
    """``system``, ``config_hash`` and ``status`` from an output set's run.json; None when it has none
    (an original set); a VoxanonError naming the file when it is unreadable."""
    manifest = Path(out_dir) / RUN_MANIFEST
    if not manifest.is_file():
        return None
    try:
        run = json.loads(manifest.read_text(encoding="utf-8"))
        return {"system": run["system"], "config_hash": run["config_hash"], "status": run.get("status")}
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise VoxanonError(f"{manifest}: not a voxanon run manifest ({type(error).__name__}: {error})") from None


def read_journal(path: Path, current_hash: str) -> dict[str, dict]:
    """Journal entries of the current configuration; a torn last line (a kill) is ignored."""
    entries: dict[str, dict] = {}
    if not path.is_file():
        return entries
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("config") == current_hash:
            entries[entry["utt"]] = entry
    return entries


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in REPORTED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _write_failures(path: Path, failures: Iterable[Outcome]) -> None:
    lines = ["utt\tstage\terror\n"]
    lines += [f"{f.utt}\t{f.failed_stage}\t{' '.join(str(f.error).split())}\n" for f in failures]
    atomic_write_text(path, "".join(lines))


def _longest_first(jobs: list[Job]) -> list[Job]:
    """``jobs`` longest first (ties in set order), so that parallel workers finish together: in set order a
    long utterance met last runs alone while the other workers idle (20 utterances of 6-10 s on 2 workers:
    4.5 s of one idle core in a 50 s run). A job of unknown length (a pipe) goes last. The output never
    depends on the order."""
    return sorted(jobs, key=lambda job: -(job.seconds or 0.0))


def _durations(data: DataDir, utterances: list[str]) -> dict[str, float | None]:
    """Each utterance's length in seconds: from ``utt2dur`` when it covers them all, else from each file's
    header (None for a pipe, 0 for a file that cannot be read: its job reports why)."""
    if all(utt in data.utt2dur for utt in utterances):
        return {utt: float(data.utt2dur[utt]) for utt in utterances}
    return {utt: None if data.is_pipe(utt) else _header_seconds(data.audio_path(utt)) for utt in utterances}


def _header_seconds(path) -> float:
    try:
        return float(soundfile.info(str(path)).duration)
    except (OSError, RuntimeError, soundfile.LibsndfileError):
        return 0.0


def prepare_set(system: System, data: DataDir, work_dir: Path, progress: bool = True) -> dict:
    """The system's configuration with every stage's set-level options (:meth:`Stage.prepare_set`) merged in."""
    config = copy.deepcopy(system.config)
    for stage in system.stages:
        options = stage.prepare_set(data, work_dir, progress)
        if options:
            config[stage.name] = {**(config.get(stage.name) or {}), **options}
    return config


def choose_executor(system: System, executor: str = "auto") -> str:
    """``streaming`` or ``pool`` for ``executor`` (``auto``: streaming when a stage runs on a device other
    than the CPU, which is where it pays; the forked pool is the fastest on CPUs alone)."""
    if executor not in EXECUTORS:
        raise VoxanonError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    on_device = any(stage.device != "cpu" for stage in system.stages)
    if executor == "auto":
        return "streaming" if on_device else "pool"
    if executor == "pool" and on_device:
        log.warning("--executor pool with a stage on a device: each worker runs padded batches of its own, so the "
                    "output (to float rounding) depends on the worker count and on resumes; the streaming "
                    "executor (the default) plans batches from the set alone")
    return executor


def run_hash(config: dict, executor: str) -> str:
    """The journal's configuration hash: the system's, and, where batching changes the output (a stage on
    another device than the CPU: :func:`batch_invariant`), how the executor batches (the streaming
    executor's ``batch_seconds``; the pool's ``batch_size`` is in the configuration already)."""
    if batch_invariant(config):
        return config_hash(config)
    from voxanon.pipeline.streaming import DEFAULT_BATCH_SECONDS

    batching = {"kind": executor}
    if executor == "streaming":
        batching["batch_seconds"] = float(config.get("batch_seconds", DEFAULT_BATCH_SECONDS))
    return config_hash({**config, "executor": batching})


def warn_random_model_sets(system: System) -> None:
    """The random-weights warning for each model set the system uses, once for the run: its workers,
    which load the sets again, stay quiet (:func:`voxanon.models.registry.quiet_random_warnings`)."""
    from voxanon.models.registry import warn_if_random

    for need in system.needs:
        kind, _, name = need.partition(":")
        if kind == "checkpoint":
            warn_if_random(name)


def anonymise_set(data: DataDir, config: dict, out_dir: Path, *, workers: int = 1, resume: bool = True,
                  allow_pipes: bool = False, progress: bool = True, backend=None, executor: str = "auto",
                  queue_seconds: float | None = None, device_processes: int | None = None,
                  started: float | None = None) -> SetResult:
    """Anonymise one data set into ``out_dir`` (see the module doc for what lands there).

    ``backend`` runs the batches and yields their outcomes (default ``LocalBackend(workers)``;
    :class:`voxanon.pipeline.ray_backend.RayBackend` for a cluster); whichever it is, this
    process alone writes the journal, ``failures.tsv``, ``run.json`` and the metadata.
    ``executor`` (:func:`choose_executor`) picks the streaming executor or the pool; ``queue_seconds``
    caps the audio the streaming executor holds and ``device_processes`` sets how many device processes it
    runs locally (default one per GPU: :class:`voxanon.pipeline.streaming.StreamingOptions`). ``started``: when
    the run's clock started (``time.time()``; default: this call), which run.json's wall time and the device's
    first batch count from (the anonymise command passes its own start: interpreter, imports, set preparation).
    """
    started = time.time() if started is None else started
    backend = backend if backend is not None else LocalBackend(workers)
    system = build_system(config)
    check_needs(system)
    streaming = choose_executor(system, executor) == "streaming"
    problems = [p for p in data.validate(check_files=False, need_gender=system.needs_gender)]
    if problems:
        raise DataDirError(str(data.path or data.name), problems)
    backend_info = backend.describe()    # joins a cluster before anything is written
    backend.check_devices(system, streaming)
    warn_random_model_sets(system)
    out_dir = Path(out_dir)
    with run_lock(out_dir):  # a second run into the same set fails at once, naming this one
        return _anonymise_locked(data, system, out_dir, backend, backend_info, resume, allow_pipes, progress,
                                 streaming, queue_seconds, device_processes, started)


def _anonymise_locked(data: DataDir, system: System, out_dir: Path, backend, backend_info: dict, resume: bool,
                      allow_pipes: bool, progress: bool, streaming: bool, queue_seconds: float | None,
                      device_processes: int | None, started: float) -> SetResult:
    from voxanon.pipeline.streaming import DEFAULT_BATCH_SECONDS, StreamingOptions, batches_to_run, plan_batches

    config = prepare_set(system, data, out_dir / ".prepared", progress)
    system = build_system(config)
    wav_dir = out_dir / "wav"
    wav_dir.mkdir(parents=True, exist_ok=True)
    executor = "streaming" if streaming else "pool"
    current_hash = run_hash(config, executor)
    journal_path = out_dir / JOURNAL
    if not resume and journal_path.exists():
        journal_path.unlink()
    journal = read_journal(journal_path, current_hash)
    finished = {utt: entry for utt, entry in journal.items()
                if utt in data.wav and _sha256_or_none(contained_path(wav_dir, f"{utt}.wav")) == entry["sha256"]}
    options = None
    if streaming:
        options = StreamingOptions(float(config.get("batch_seconds", DEFAULT_BATCH_SECONDS)), queue_seconds, started,
                                   device_processes)
        plan = plan_batches(_jobs(data, data.utterances, wav_dir), options.batch_seconds)
        batches = batches_to_run(plan, set(finished), with_companions=not batch_invariant(config))
        jobs = [job for batch in batches for job in batch if not job.companion]
    else:
        todo = [utt for utt in data.utterances if utt not in finished]
        jobs = _jobs(data, todo, wav_dir, lengths=backend_info["workers"] > 1)
        if backend_info["workers"] > 1:
            jobs = _longest_first(jobs)
        batches = [jobs[i:i + system.batch_size] for i in range(0, len(jobs), system.batch_size)]
    manifest = {
        "system": system.name, "config": config, "config_hash": current_hash,
        "data": str(data.path.resolve()) if data.path else data.name, "out": str(out_dir.resolve()),
        "workers": backend_info["workers"], "backend": backend_info, "executor": {"kind": executor},
        "versions": package_versions(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)), "status": "running",
    }
    atomic_write_text(out_dir / RUN_MANIFEST, json.dumps(manifest, indent=2) + "\n")
    if finished:
        log.info("%s: resuming, %d of %d utterances already done", data.name, len(finished), len(data.wav))

    failures: list[Outcome] = []
    audio_seconds = 0.0
    try:
        # The backend starts its processes (nothing to start, no models to load, for a finished set) before
        # the progress bar starts a thread.
        with backend.outcomes(system, batches, allow_pipes, wav_dir, options) if batches else _NoWork() as outcomes:
            audio_seconds = _journal_outcomes(outcomes, jobs, backend, journal_path, current_hash, finished,
                                              failures, data, system, progress, started)
            if hasattr(outcomes, "stats"):
                manifest["executor"] = outcomes.stats()
    except RunFault as fault:
        manifest.update({"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "status": "failed", "error": str(fault)})
        atomic_write_text(out_dir / RUN_MANIFEST, json.dumps(manifest, indent=2) + "\n")
        raise

    wall = time.time() - started
    _write_failures(out_dir / FAILURES, failures)
    produced = {utt: entry["samples"] / system.sample_rate for utt, entry in finished.items()}
    write_anonymised_dir(data, out_dir, produced)
    manifest.update({
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "wall_seconds": round(wall, 3),
        "audio_seconds_processed": round(audio_seconds, 3),
        "real_time_factor": round(wall / audio_seconds, 5) if audio_seconds else None,
        "counts": {"total": len(data.wav), "processed": len(jobs) - len(failures),
                   "resumed": len(data.wav) - len(jobs), "failed": len(failures)},
        "status": "complete" if not failures else "failures",
    })
    atomic_write_text(out_dir / RUN_MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return SetResult(data.name, out_dir, len(data.wav), len(jobs) - len(failures), len(data.wav) - len(jobs),
                     failures, wall, audio_seconds)


def _jobs(data: DataDir, utterances: list[str], wav_dir: Path, lengths: bool = True) -> list[Job]:
    seconds = _durations(data, utterances) if lengths else {}
    return [Job(utt, data.utt2spk[utt], data.spk2gender.get(data.utt2spk[utt]),
                data.wav[utt] if data.is_pipe(utt) else str(data.audio_path(utt)),
                str(contained_path(wav_dir, f"{utt}.wav")), seconds.get(utt))
            for utt in utterances]


def _journal_outcomes(outcomes: Iterable[list[Outcome]], jobs: list[Job], backend, journal_path: Path,
                      current_hash: str, finished: dict, failures: list[Outcome], data: DataDir, system: System,
                      progress: bool, started: float) -> float:
    """Journals each batch of outcomes as it comes (one fsync per batch), collects the failures, shows
    progress; returns the audio seconds processed. A backend must report each job once: an outcome of an
    utterance it was not given, or given back already, or a job left without one is a bug, not a result."""
    expected = {job.utt for job in jobs}
    audio_seconds = 0.0
    bar = tqdm(total=len(data.wav), initial=len(finished), unit="utt", desc=f"{system.name} {data.name}",
               disable=not progress, dynamic_ncols=True)
    with bar, open(journal_path, "a", encoding="utf-8") as journal_file:
        for batch in outcomes:
            for outcome in batch:
                if outcome.utt not in expected:
                    raise RuntimeError(f"backend {backend.name!r} returned an outcome for {outcome.utt!r}, which "
                                       "it was not given or has returned before")
                expected.discard(outcome.utt)
                if outcome.error is not None:
                    failures.append(outcome)
                    bar.write(f"FAILED {outcome.utt} [{outcome.failed_stage}]: {outcome.error}")
                else:
                    for note in outcome.notes:
                        log.info("%s: %s", outcome.utt, note)
                    entry = {"utt": outcome.utt, "sha256": outcome.sha256, "samples": outcome.n_samples,
                             "config": current_hash, "record": outcome.record}
                    journal_file.write(json.dumps(entry) + "\n")
                    finished[outcome.utt] = entry
                    audio_seconds += outcome.input_seconds
            journal_file.flush()
            os.fsync(journal_file.fileno())
            bar.update(len(batch))
            elapsed = time.time() - started
            if elapsed > 0:
                bar.set_postfix_str(f"{audio_seconds / elapsed:.1f} s audio/s", refresh=False)
    if expected:
        raise RuntimeError(f"backend {backend.name!r} returned no outcome for {len(expected)} utterance(s), e.g. "
                           f"{sorted(expected)[:3]}")
    return audio_seconds
