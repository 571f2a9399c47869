"""Worker processes: the system each one holds, its start-up (forked from a parent that built the models, or
spawned and building them), Ctrl-C left to the parent, and the head start that prepares late utterances while
models load."""
from __future__ import annotations

import contextlib
import gc
import os
import queue
import sys
from multiprocessing import get_context
from typing import Iterator

from .batches import Job, Outcome, Prepared, load_prepared, load_stage_models, process_jobs
from .heap import reuse_freed_memory
from ..model_service import model_sets_verified_meanwhile
from ..systems.stage import RunFault, Stage
from ..systems.recipes import System, build_system


_worker_state: dict = {}


THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
"""Read once, when each library loads: a spawned worker or Ray actor sets them to 1 before it imports any."""


def limit_to_one_cpu_thread() -> None:
    """From now on this process computes on one CPU thread (torch's, BLAS's and OpenMP's pools): a worker's
    setting, for the reason :func:`one_cpu_thread` gives."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)   # kept: only leaving it as a context restores the pools
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


@contextlib.contextmanager
def one_cpu_thread() -> Iterator[None]:
    """While it lasts, this process computes on one CPU thread (torch's, BLAS's and OpenMP's pools), as every
    worker does. A sum split over threads rounds differently with their count, so a batch run on the machine's
    cores gave other bytes than the same batch in a worker (B4, B5 and B6 did, in the last bits): a run's output
    must not depend on the core count, nor on whether a batch ran in the driver or in a worker. Parallelism
    comes from the workers."""
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else 1
    with threadpool_limits(limits=1):
        if threads != 1:
            torch.set_num_threads(1)
        try:
            yield
        finally:
            if threads != 1:
                torch.set_num_threads(threads)


def set_worker(system, allow_pipes: bool) -> None:
    """This process's system and input rule, for a worker forked from the process that built them."""
    _worker_state.update(system=system, allow_pipes=allow_pipes, fault=None)


def worker_allow_pipes() -> bool:
    return _worker_state["allow_pipes"]


@contextlib.contextmanager
def collections_deferred(freeze: bool) -> Iterator[None]:
    """No garbage collection while the body loads libraries and models, then one; with ``freeze``, what survives
    it is moved out of every later collection (``gc.freeze``), in this process and in those forked from it.

    Loading the neural chain's models (torch's import, the networks, the vocoder's plans) makes about 420 000
    objects, and the collector walked them all in each of its 5 full collections on the way: 0.5 of the main
    process's CPU seconds before its first utterance, where this one collection takes 0.2. It finds 120 000
    objects of garbage (about 60 MB), which a freeze without it would keep for good. Frozen, the models' objects
    are not walked again, and a forked worker's collections do not write to their headers (which copied the
    pages it shares with its parent). ``freeze`` is for processes of our own (the parent of forked workers, a
    worker), not a caller's that runs batches in its own process: its later garbage among the frozen objects
    would never be collected."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.collect()
        if freeze:
            gc.freeze()
    finally:
        if enabled:
            gc.enable()


def _model_sets(stages: list[Stage], device_models: bool) -> list[str]:
    """The installed model sets that loading ``stages`` here reads (their ``checkpoint:`` needs; with
    ``device_models`` false, those of stages on the CPU only)."""
    return [need.partition(":")[2] for stage in stages if device_models or stage.device == "cpu"
            for need in stage.needs() if need.startswith("checkpoint:")]


def init_worker(system: System, allow_pipes: bool, head_start_jobs: list[Job] | None = None,
                device_models: bool = True, before_fork: bool = False) -> "HeadStart | None":
    """Set up a process that runs batches (this one, a spawned pool worker, a Ray actor, or the parent of
    forked workers): ``system`` with every stage's models loaded and checked now, before any work
    (:func:`load_stage_models`; ``device_models`` false in the parent of forked workers: a CUDA context does
    not survive a fork, so each worker loads those itself). The model sets' checksums are computed beside the
    model-free stages' loading (:func:`voxanon.pipeline.model_service.model_sets_verified_meanwhile`), and the
    garbage collector waits for the loading to end (:func:`collections_deferred`; ``before_fork``: the parent of
    forked workers, which also freezes what it loaded).

    Given ``head_start_jobs`` (the parent of forked workers, in the order they will be taken), and a
    system that opens with model-free stages and then loads models, it starts a :class:`HeadStart`
    on them once the model-free stages are loaded, and returns it."""
    reuse_freed_memory()
    model_free = next((i for i, stage in enumerate(system.stages) if not stage.model_free), len(system.stages))
    with (model_sets_verified_meanwhile(_model_sets(system.stages[model_free:], device_models)),
          collections_deferred(before_fork)):
        load_stage_models(system, system.stages[:model_free], device_models)
    head_start = (HeadStart(system, model_free, head_start_jobs, allow_pipes)
                  if head_start_jobs and 0 < model_free < len(system.stages) else None)
    try:
        with collections_deferred(before_fork):
            load_stage_models(system, system.stages[model_free:], device_models)
    except BaseException:
        if head_start:
            head_start.close()
        raise
    _worker_state.update(system=system, allow_pipes=allow_pipes, fault=None)
    return head_start


def die_with_parent() -> None:
    """Ask the kernel to kill this process when its parent dies (``PR_SET_PDEATHSIG``): a forked one holds
    copies of the parent's files, the output lock's among them, and must not keep them (nor the models'
    memory, nor a device) after a killed run. Ctrl-C, which the terminal sends to every process of the run, is
    left to the parent, which ends its workers: a worker that took it printed a 20-line traceback of its own."""
    import ctypes
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


class HeadStart:
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
    die_with_parent()
    limit_to_one_cpu_thread()  # its values are the workers' own
    for job in jobs:
        if stop.is_set():
            break
        try:
            prepared = load_prepared(system, job, allow_pipes)
            for stage in system.stages[:stages]:
                stage.process_batch([prepared.utterance])
        except Exception:  # the job's worker meets the same failure and reports it
            continue
        prepared.stages_done = stages
        results.put(prepared)


def init_forked_worker(device_models: bool, stages: tuple[int, int] | None = None) -> None:
    """A forked worker: one torch thread (the pool gives the parallelism), gone with its parent, and the
    models its parent did not load for it: with ``device_models``, those of its system's stages on another
    device than the CPU (a CUDA context does not survive a fork); with ``stages`` (a range), every model of
    those stages. A fault is kept, and raised by the worker's first batch: an initializer's exception would
    only break the pool, without its message."""
    die_with_parent()
    os.environ.update({name: "1" for name in THREAD_VARIABLES})
    # The libraries the parent loaded keep the thread pools they started with: each is set to one here.
    limit_to_one_cpu_thread()
    reuse_freed_memory(every_block=True)
    system = _worker_state["system"]
    try:
        if stages is not None:
            load_stage_models(system, system.stages[slice(*stages)], False)
        if device_models:
            load_stage_models(system, [stage for stage in system.stages if stage.device != "cpu"], True)
    except RunFault as fault:
        _worker_state["fault"] = fault


def init_spawned_worker(config: dict, allow_pipes: bool, stages: tuple[int, int] | None = None) -> None:
    """A spawned worker (or device process): the environment its libraries read once, set before they load
    (torch reads the thread variables at import and THP_MEM_ALLOC_ENABLE at its first large allocation, so
    they are set here, in the new process, never in the parent), then :func:`load_worker`."""
    # One thread per worker process: the pool gives the parallelism. Huge pages for torch's large CPU
    # buffers, which spawned workers map afresh for each block above 32 MB (2-8 % faster neural chains,
    # measured).
    os.environ.update({name: "1" for name in (*THREAD_VARIABLES, "THP_MEM_ALLOC_ENABLE")})
    limit_to_one_cpu_thread()  # NumPy's BLAS loaded with this module, before the variables were set
    die_with_parent()
    load_worker(config, allow_pipes, stages)


def load_worker(config: dict, allow_pipes: bool, stages: tuple[int, int] | None = None) -> None:
    """This process as a worker of a run (a spawned pool worker, the device process, a Ray actor): the system,
    with the models of its ``stages`` (a range; all by default) loaded and checked; a fault is kept, and
    raised by its first batch. The run's driver has already warned of random weights."""
    from ...models.checkpoints.registry import quiet_random_warnings

    quiet_random_warnings()
    reuse_freed_memory()
    system = build_system(config)
    start, stop = stages or (0, len(system.stages))
    _worker_state.update(system=system, allow_pipes=allow_pipes, fault=None)
    try:
        with collections_deferred(freeze=True):
            load_stage_models(system, system.stages[start:stop], True)
    except RunFault as fault:
        _worker_state["fault"] = fault


def worker_system() -> System:
    """This worker's system; its model fault, if loading failed, raised for the batch to report."""
    if _worker_state.get("fault") is not None:
        raise _worker_state["fault"]
    return _worker_state["system"]


def worker_process(jobs: list[Job], prepared: dict[str, Prepared] | None = None) -> list[Outcome]:
    return process_jobs(worker_system(), jobs, _worker_state["allow_pipes"], prepared)
