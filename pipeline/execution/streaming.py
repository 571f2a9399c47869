"""The streaming executor: a system's CPU stages in a pool of processes, its model stages in a device process.

Selected for a run whose system has a stage on a device other than the CPU (``anonymise --executor auto``,
the default; ``--executor streaming`` forces it, ``--executor pool`` keeps the forked pool):

- **CPU lane**: a pool of processes loads each utterance (read, resample) and runs the system's leading
  model-free CPU stages on it (``ssl_sas_input``, pYAAPT's F0: :func:`cpu_stage_count`); the same pool writes
  the results (16-bit WAV encoding, the atomic write, sha256), off the device's path.
- **Device lane**: one process per GPU (:func:`visible_gpus`; one for a stage on ``cuda:N`` or ``cpu:N``;
  one actor per GPU under Ray), each holding its GPU's only copy of the models and the only CUDA context
  there. Each runs the remaining stages (content, speaker, vocoder, and any stage after them) on one *device
  batch* at a time, while a thread of its own stages the next batch and another sends the last one's results
  back (:mod:`voxanon.pipeline.execution.device_process`); a batch goes to the device process with the fewest
  batches in hand. The device processes start first, and load torch and their models while the CPU lane starts.
- **Device batches** are planned before the run, from the job list alone (:func:`plan_batches`): the set's
  utterances, longest first (ties by id), cut into batches of at most ``batch_seconds`` of padded audio
  (the longest member's length times the member count) and at most 25 % padding, each of a row count the
  models batch without padding rows (1, 2, 3, 4, 6, 8, 12, ...). Their composition is
  therefore the same whatever the worker count, the queue timing or the order in which the CPU lane
  finishes; the device runs a batch once all its members have arrived. A resumed run plans over the whole
  set again; an unfinished job's batch is rerun with its finished members as *companions*, computed but
  neither written nor journaled again, so that a killed and resumed run gives the same bytes as an
  uninterrupted one, also where padded batches differ from one at a time by float rounding.
- **Back-pressure**: a batch is released to the CPU lane only while the audio released and not yet
  written stays within ``queue_seconds`` (:class:`StreamingOptions`); memory stays flat however long the set.

The driver (the runner's process) keeps the plan and hands each batch from lane to lane (locally, the
batch's arrays wait in shared memory meanwhile and only their references are pickled:
:mod:`voxanon.pipeline.execution.shared_arrays`); the lanes are
local processes (:class:`LocalLanes`) or Ray actors (:class:`voxanon.pipeline.execution.ray.RayLanes`), and
both call the per-utterance functions (:func:`~voxanon.pipeline.execution.batches.load_batch`,
:func:`~voxanon.pipeline.execution.batches.run_stages`, :func:`~voxanon.pipeline.execution.batches.write_batch`), as the pool does.
A model-level fault (a model set that does not load, a missing device, out of memory) stops the run with
one message (:class:`~voxanon.pipeline.systems.stage.RunFault`); the device process loads and checks its models
before it takes any work.

``run.json`` records, under ``executor``, what the run's device did: when its first batch started (seconds
after the run started, and the wall-clock time), the share of its time its device stages computed (a CPU stage
that runs in the device process is not device time), and the share of each
batch's time spent waiting in each queue (for the device; for the writers).
"""
from __future__ import annotations

import logging
import os
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from typing import Any, Iterator

from ...data_prep.errors import VoxanonError
from . import batches, shared_arrays, workers
from .batches import Batch, Job, Outcome
from .device_process import DeviceProcess
from .pool import fork_safe, kill_pool
from ..model_service import visible_gpus
from ..systems.stage import RunFault, one_line
from ..systems.recipes import System


log = logging.getLogger(__name__)

DEFAULT_BATCH_SECONDS = 200.0
MAX_PADDING = 0.25
ATTEMPTS = 3


@dataclass(frozen=True)
class StreamingOptions:
    """How the streaming executor runs; none of it changes the output but ``batch_seconds``, which is the
    system's ``batch_seconds`` setting (and so in the configuration hash). ``device_processes``: how many
    device processes run locally (default: one per visible GPU, :func:`device_process_count`)."""
    batch_seconds: float = DEFAULT_BATCH_SECONDS
    queue_seconds: float | None = None    # audio released and not yet written; default 4 batches' worth
    run_started: float = field(default_factory=time.time)
    device_processes: int | None = None

    @property
    def queue_cap(self) -> float:
        return self.queue_seconds if self.queue_seconds is not None else 4 * self.batch_seconds


def cpu_stage_count(system: System) -> int:
    """How many of the system's stages, from the first, the CPU lane runs: the leading model-free stages
    that stay on the CPU. The rest run in the device process."""
    return next((i for i, stage in enumerate(system.stages) if not (stage.model_free and stage.device == "cpu")),
                len(system.stages))


def device_process_count(system: System) -> int:
    """Local device processes for ``system``: one per visible GPU where a stage asks for ``cuda`` or ``auto``
    (which GPU each process gets is its own CUDA_VISIBLE_DEVICES); one for a named device (``cuda:N``,
    ``cpu:N``)."""
    if not any(stage.device in ("cuda", "auto") for stage in system.stages):
        return 1
    return max(1, len(visible_gpus()))


def plan_batches(jobs: list[Job], batch_seconds: float, max_padding: float = MAX_PADDING) -> list[list[Job]]:
    """``jobs`` in device batches: longest first (:attr:`Job.seconds`; ties by utterance id, so that the
    set's order does not matter), as many as fit before the padded length (members times the longest) would
    pass ``batch_seconds`` or padding to the longest would pass ``max_padding`` of it, cut down to a row count
    of the models' grid (1, 2, 3, 4, 6, 8, 12, ...: :func:`voxanon.models.nets.precision.padded_rows`) so that no
    row the device computes is padding; the rest start the next batch. A job of unknown length (a pipe) goes
    alone, after the others, in the jobs' order. A function of its arguments only: every run over the same
    set plans the same batches."""
    from ...models.nets.precision import padded_rows  # torch: not for the driver's start-up

    if not batch_seconds > 0:
        raise VoxanonError(f"batch_seconds must be positive, got {batch_seconds}")
    known = sorted((job for job in jobs if job.seconds is not None), key=lambda job: (-job.seconds, job.utt))
    batches: list[list[Job]] = []
    start = 0
    while start < len(known):
        longest = known[start].seconds
        end = start + 1
        while (end < len(known) and (end - start + 1) * longest <= batch_seconds
               and known[end].seconds >= (1 - max_padding) * longest):
            end += 1
        count = end - start
        batches.append(known[start:start + max(rows for rows in range(1, count + 1) if padded_rows(rows) == rows)])
        start += len(batches[-1])
    return batches + [[job] for job in jobs if job.seconds is None]


def batches_to_run(plan: list[list[Job]], finished: set[str], with_companions: bool) -> list[list[Job]]:
    """The planned batches that still have work: each with its unfinished jobs and, ``with_companions``
    (where batching changes the output), its finished ones marked as companions."""
    batches = []
    for batch in plan:
        if all(job.utt in finished for job in batch):
            continue
        if with_companions:
            batches.append([replace(job, companion=True) if job.utt in finished else job for job in batch])
        else:
            batches.append([job for job in batch if job.utt not in finished])
    return batches


# --- The work of each lane: the runner's per-utterance functions, timed. -----------------------------------

def prepare(system: System, jobs: list[Job], allow_pipes: bool, stop: int) -> tuple[Batch, dict]:
    started = time.time()
    batch = batches.run_stages(system, batches.load_batch(system, jobs, allow_pipes), 0, stop)
    return batch, {"start": started, "end": time.time()}


def run_device(system: System, jobs: list[Job], start: int, parts: list[Batch]) -> tuple[Batch, dict]:
    """The device stages on one planned batch, its members gathered from ``parts`` into the plan's order; with its
    start and end (wall clock) and the seconds its stages on a device other than the CPU took."""
    started = time.time()
    position = {job.utt: index for index, job in enumerate(jobs)}
    batch = Batch(list(jobs), sorted((item for part in parts for item in part.ready),
                                     key=lambda item: position[item.utterance.utt_id]),
                  {utt: outcome for part in parts for utt, outcome in part.outcomes.items()})
    device_seconds = 0.0
    for index in range(start, len(system.stages)):
        began = time.perf_counter()
        batch = batches.run_stages(system, batch, index, index + 1)
        if system.stages[index].device != "cpu":  # a CPU stage here (a model-free one after a device stage) is not
            device_seconds += time.perf_counter() - began  # device time
    for item in batch.ready:
        # The writer needs the audio, the kept vectors and the record; the stages' features (content, F0, BN:
        # about as large as the audio) would only travel to it and back through the driver.
        item.utterance.features.clear()
    return batch, {"start": started, "end": time.time(), "device_seconds": device_seconds,
                   "utterances": len(batch.ready)}


def write(system: System, batch: Batch) -> tuple[list[Outcome], dict]:
    started = time.time()
    return batches.write_batch(system, batch), {"start": started, "end": time.time()}


@dataclass(frozen=True)
class Tag:
    """What a lane's task is: the step of a planned batch's attempt (and which part, for ``prepare``)."""
    batch: int
    attempt: int
    step: str
    part: int = 0


class Lost(Exception):
    """A task whose worker (process, actor, node) was lost with it: its batch is tried again."""


@dataclass
class _Planned:
    index: int
    jobs: list[Job]
    seconds: float
    attempts: int = 0
    parts: dict[int, Any] = field(default_factory=dict)
    expected_parts: int = 0
    times: dict[str, float] = field(default_factory=dict)


class StreamingRun:
    """Drives the planned ``batches`` through ``lanes`` (prepare on the CPU lane, the device stages on the
    device lane, write on the CPU lane), at most ``options.queue_cap`` seconds of audio released and not yet
    written; yields each batch's outcomes as it is written. Closing it (or leaving ``with``) ends the lanes.

    A batch whose task was lost with its worker (Ray: an actor's process or node) is tried again from its
    start, up to ``ATTEMPTS`` times, then one utterance at a time; an utterance lost that often is a failure
    (stage ``worker``). A :class:`RunFault` from any lane ends the run."""

    def __init__(self, lanes, batches: list[list[Job]], options: StreamingOptions):
        self.lanes, self.options = lanes, options
        self._next_index = 0
        self._queue = deque(self._planned(batch) for batch in batches)
        self._open: dict[int, _Planned] = {}
        self._stats = {"batches": len(batches), "started": time.time(), "device_busy": 0.0, "device_first": None,
                       "device_last": None, "wait_device": 0.0, "wait_write": 0.0, "lifetime": 0.0,
                       "held_back": 0.0, "max_open_seconds": 0.0, "max_open_utterances": 0}

    def _planned(self, jobs: list[Job]) -> _Planned:
        """A batch to run, with the audio it holds (padded; a job of unknown length counted at the system's
        longest allowed) for the queue's cap."""
        self._next_index += 1
        longest = max(self.lanes.max_seconds if job.seconds is None else job.seconds for job in jobs)
        return _Planned(self._next_index - 1, jobs, longest * len(jobs))

    @property
    def open_seconds(self) -> float:
        return sum(batch.seconds for batch in self._open.values())

    def _release(self) -> None:
        while self._queue and (not self._open or self.open_seconds + self._queue[0].seconds <= self.options.queue_cap):
            batch = self._queue.popleft()
            self._open[batch.index] = batch
            self._start(batch)
        self._stats["max_open_seconds"] = max(self._stats["max_open_seconds"], self.open_seconds)
        self._stats["max_open_utterances"] = max(self._stats["max_open_utterances"],
                                                 sum(len(batch.jobs) for batch in self._open.values()))

    def _start(self, batch: _Planned) -> None:
        """Its jobs to the CPU lane, dealt round-robin into as many parts as the lane has workers (each part
        about as long as the others)."""
        parts = min(len(batch.jobs), self.lanes.cpu_workers)
        batch.parts, batch.expected_parts = {}, parts
        batch.times = {"released": time.time()}
        for part in range(parts):
            self.lanes.prepare(Tag(batch.index, batch.attempts, "prepare", part), batch.jobs[part::parts])

    def __iter__(self) -> Iterator[list[Outcome]]:
        self._release()
        while self._open:
            held_since = time.time() if self._queue else None
            for tag, payload, info, error in self.lanes.completed():
                batch = self._open.get(tag.batch)
                if batch is None or tag.attempt != batch.attempts:
                    continue   # a part of an attempt already given up
                if error is not None:
                    yield from self._lost(batch, error)
                    continue
                if tag.step == "prepare":
                    batch.parts[tag.part] = payload
                    if len(batch.parts) == batch.expected_parts:
                        batch.times["prepared"] = time.time()
                        self.lanes.device(Tag(batch.index, batch.attempts, "device"), batch.jobs,
                                          [batch.parts[part] for part in range(batch.expected_parts)])
                        batch.parts = {}
                elif tag.step == "device":
                    self._device_done(batch, info)
                    self.lanes.write(Tag(batch.index, batch.attempts, "write"), payload)
                else:
                    self._stats["wait_write"] += max(0.0, info["start"] - batch.times["device_end"])
                    self._stats["lifetime"] += time.time() - batch.times["released"]
                    del self._open[batch.index]
                    yield payload
            if held_since is not None:
                self._stats["held_back"] += time.time() - held_since
            self._release()

    def _device_done(self, batch: _Planned, info: dict) -> None:
        stats = self._stats
        stats["device_busy"] += info["device_seconds"]
        stats["device_first"] = min(filter(None, (stats["device_first"], info["start"])))
        stats["device_last"] = max(filter(None, (stats["device_last"], info["end"])))
        stats["wait_device"] += max(0.0, info["start"] - batch.times["prepared"])
        batch.times["device_end"] = info["end"]

    def _lost(self, batch: _Planned, error: BaseException) -> Iterator[list[Outcome]]:
        if not isinstance(error, Lost):
            raise error
        batch.attempts += 1
        log.warning("a worker lost a device batch of %d (attempt %d): %s", len(batch.jobs), batch.attempts, error)
        if batch.attempts < ATTEMPTS:
            self._start(batch)
            return
        del self._open[batch.index]
        if len(batch.jobs) > 1:
            self._queue.extendleft(self._planned([job]) for job in reversed(batch.jobs) if not job.companion)
            return
        yield [Outcome(job.utt, failed_stage="worker", error=f"worker lost it {batch.attempts} times: {error}")
               for job in batch.jobs if not job.companion]

    def stats(self) -> dict:
        """What run.json records under ``executor``."""
        stats, ended = self._stats, time.time()
        span = (stats["device_last"] - stats["device_first"]) if stats["device_first"] else 0.0
        lifetime = stats["lifetime"] or 1.0
        return {
            "kind": "streaming", "cpu_workers": self.lanes.cpu_workers, "device_workers": self.lanes.device_workers,
            "device_batches": stats["batches"], "batch_seconds": self.options.batch_seconds,
            "queue_seconds": self.options.queue_cap,
            "max_queued_seconds": round(stats["max_open_seconds"], 3),
            "max_queued_utterances": stats["max_open_utterances"],
            "first_device_batch_seconds": (round(stats["device_first"] - self.options.run_started, 3)
                                           if stats["device_first"] else None),
            "first_device_batch_at": stats["device_first"],
            "device_busy_share": round(stats["device_busy"] / span, 4) if span > 0 else None,
            "queue_wait_share": {"device": round(stats["wait_device"] / lifetime, 4),
                                 "write": round(stats["wait_write"] / lifetime, 4)},
            "held_back_share": round(stats["held_back"] / max(ended - stats["started"], 1e-9), 4),
        }

    def close(self) -> None:
        self.lanes.close()

    def __enter__(self) -> "StreamingRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- Local lanes: a forked (or spawned) CPU pool and one spawned device process per GPU. -----------------

# Batches travel between the local processes with their arrays in shared memory, not in the pickle.

def _prepare_task(jobs: list[Job], stop: int) -> tuple[Batch, dict]:
    batch, info = prepare(workers.worker_system(), jobs, workers.worker_allow_pipes(), stop)
    return shared_arrays.pack(batch), info


def _write_task(batch: Batch) -> tuple[list[Outcome], dict]:
    return write(workers.worker_system(), shared_arrays.unpack(batch))


def _init_device_process(config: dict, allow_pipes: bool, start: int, gpu: str | None) -> None:
    """A device process: gone with the run's driver, then (on its own GPU ``gpu``, where several share the
    run) the system with its device stages' models loaded and checked (device included) before it takes any
    work."""
    workers.die_with_parent()
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # before torch loads: "cuda" is this process's GPU
    workers.init_spawned_worker(config, allow_pipes, (start, len(config["stages"])))


def _load_device_process(initializer, initargs: tuple) -> None:
    """``initializer(*initargs)`` (:func:`_init_device_process`, or a test's), then the model fault, if any,
    raised: the device process's ready reply carries it."""
    initializer(*initargs)
    workers.worker_system()


def _stage_device_task(jobs: list[Job], start: int, parts: list[Batch]) -> tuple:
    """In the device process's receiver thread, while the batch before runs: the parts' arrays in its memory."""
    return jobs, start, [shared_arrays.unpack(part, private=True) for part in parts]


def _device_task(jobs: list[Job], start: int, parts: list[Batch]) -> tuple[Batch, dict]:
    return run_device(workers.worker_system(), jobs, start, parts)


def _finish_device_task(result: tuple[Batch, dict]) -> tuple[Batch, dict]:
    """In the device process's sender thread, while the next batch runs: the results' arrays to shared memory."""
    batch, info = result
    return shared_arrays.pack(batch), info


class LocalLanes:
    """The streaming executor's lanes on this machine: ``device_processes`` device processes (default
    :func:`device_process_count`: one per GPU; :class:`~voxanon.pipeline.execution.device_process.DeviceProcess`),
    spawned first so that they import torch and load their models while the CPU lane starts, and
    ``cpu_workers`` processes for the CPU lane (forked from this process once the CPU stages' models are
    loaded, where that is safe; else spawned)."""

    def __init__(self, system: System, allow_pipes: bool, cpu_workers: int, device_processes: int | None = None):
        self.system, self.cpu_workers = system, max(1, cpu_workers)
        self.device_workers = device_processes or device_process_count(system)
        gpus = visible_gpus() if self.device_workers > 1 and device_processes is None else []
        self.max_seconds = system.max_seconds or 120.0
        self.start = cpu_stage_count(system)
        self._pending: dict[Future, Tag] = {}
        self._device_of: dict[Future, int] = {}
        self._pools: list[ProcessPoolExecutor] = []
        self._devices: list[DeviceProcess] = []
        shared_arrays.remove_leftovers(os.getpid())
        try:
            # Spawned with pipes, the device processes start no thread here: the CPU pool can still be forked.
            for index in range(self.device_workers):
                initargs = (system.config, allow_pipes, self.start, gpus[index] if gpus else None)
                self._devices.append(DeviceProcess(_load_device_process, (_init_device_process, initargs),
                                                   _device_task, _stage_device_task, _finish_device_task))
            if fork_safe():
                # Forked at once, each worker loading its stages' models itself (pYAAPT's imports).
                workers.set_worker(system, allow_pipes)
                self._cpu = self._pool(self.cpu_workers, "fork", workers.init_forked_worker,
                                       (False, (0, self.start)))
            else:
                self._cpu = self._pool(self.cpu_workers, "spawn", workers.init_spawned_worker,
                                       (system.config, allow_pipes, (0, self.start)))
            # A first task starts the CPU workers (a forked pool forks them all at once), before the pool's and the
            # device processes' threads start here, which a fork would copy.
            self._cpu.submit(os.getpid)
            self._in_hand = [0] * self.device_workers
            for device in self._devices:
                self._pending[device.listen()] = Tag(-1, 0, "ready")
        except BaseException:
            self.close()
            raise

    def _pool(self, workers: int, method: str, initializer, initargs) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(workers, mp_context=get_context(method), initializer=initializer,
                                   initargs=initargs)
        self._pools.append(pool)
        return pool

    def prepare(self, tag: Tag, jobs: list[Job]) -> None:
        self._pending[self._cpu.submit(_prepare_task, jobs, self.start)] = tag

    def device(self, tag: Tag, jobs: list[Job], parts: list[Batch]) -> None:
        """To the device process with the fewest batches in hand (the first of them on a tie)."""
        chosen = min(range(self.device_workers), key=lambda index: self._in_hand[index])
        future = self._devices[chosen].submit(jobs, self.start, parts)
        self._in_hand[chosen] += 1
        self._pending[future], self._device_of[future] = tag, chosen

    def write(self, tag: Tag, batch: Batch) -> None:
        self._pending[self._cpu.submit(_write_task, batch)] = tag

    def completed(self) -> list[tuple[Tag, Any, dict, BaseException | None]]:
        """The tasks finished since the last call (at least one, waiting for it): ``(tag, result, timing,
        None)``; a :class:`RunFault` (a model fault, a dead process) is raised."""
        done, _ = wait(list(self._pending), return_when=FIRST_COMPLETED)
        results = []
        for future in done:
            tag = self._pending.pop(future)
            if future in self._device_of:
                self._in_hand[self._device_of.pop(future)] -= 1
            try:
                value = future.result()
            except BrokenProcessPool as error:
                lane = "device" if tag.step in ("device", "ready") else "CPU"
                raise RunFault(f"the {lane} process died ({one_line(error)}): killed for memory, or by a signal; "
                               "rerun to resume") from None
            if tag.step != "ready":
                results.append((tag, *value, None))
        return results

    def close(self) -> None:
        for device in self._devices:
            device.close()
        for pool in self._pools:
            kill_pool(pool)
        shared_arrays.remove_leftovers(os.getpid())  # the arrays of batches a process took with it
