"""The local worker pool: batches on forked (or spawned) processes, killed cleanly on a fault or a stop."""
from __future__ import annotations

import contextlib
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Iterator

from .batches import Job, Outcome, process_jobs
from .planning import parallel_batches
from .workers import HeadStart, init_forked_worker, init_spawned_worker, init_worker, one_cpu_thread, worker_process
from ..systems.stage import RunFault, one_line
from ..systems.recipes import System


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
                 head_start: HeadStart | None = None):
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
        return self._pool.submit(worker_process, batch, prepared)

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


def run_parallel(system: System, batches: list[list[Job]], workers: int, allow_pipes: bool) -> _PoolRun:
    """Outcomes of ``batches`` from a pool of ``workers`` processes, one torch thread each.

    On Linux the models are loaded once, here, and the workers are forked from this process:
    they share the loaded weights (copy-on-write) and start at once, where spawned workers each
    imported torch and loaded every model again (about 12 s of both cores for the neural chain).
    The pool starts now, before the caller's progress bar starts a thread. Elsewhere, or when this
    process already runs other threads, workers are spawned and each loads the system itself.
    """
    batches = parallel_batches(batches, workers, system.config)
    workers = min(workers, len(batches))   # a pool of fork processes starts them all, busy or not
    device_models = any(stage.device != "cpu" for stage in system.stages)
    if fork_safe():
        # Not THP_MEM_ALLOC_ENABLE here: forked workers keep every block on their heap
        # (heap.reuse_freed_memory), so huge pages only slow the first touch of each block; measured on the
        # neural chain, each worker's first two utterances took 0.3-0.4 s longer in HuBERT, and the set
        # 0.8 s longer, with them.
        head_start = init_worker(system, allow_pipes, [job for batch in batches for job in batch],
                                  device_models=False, before_fork=True)
        pool = ProcessPoolExecutor(workers, mp_context=get_context("fork"), initializer=init_forked_worker,
                                   initargs=(device_models,))
        return _PoolRun(pool, batches, workers, head_start)
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=init_spawned_worker,
                               initargs=(system.config, allow_pipes))
    return _PoolRun(pool, batches, workers)


class NoWork(contextlib.nullcontext):
    """The outcomes of no batch."""

    def __init__(self):
        super().__init__(())


class InProcess:
    """Batches run one after the other in this process, its models loaded (and checked) first."""

    def __init__(self, system: System, batches: list[list[Job]], allow_pipes: bool):
        init_worker(system, allow_pipes)
        self._batches, self._allow_pipes, self._system = batches, allow_pipes, system

    def __iter__(self) -> Iterator[list[Outcome]]:
        # As in a worker: the bytes must not depend on where a batch ran. Set once for the run (about 3 ms), the
        # models and their libraries loaded; the driver gets its threads back when the batches end or stop.
        with one_cpu_thread():
            for batch in self._batches:
                yield process_jobs(self._system, batch, self._allow_pipes)

    def close(self) -> None:
        pass

    def __enter__(self) -> "InProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
