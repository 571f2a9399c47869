"""The local backend: batches in this process, in the worker pool, or (a device stage) in the streaming executor."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .batches import Job
from .pool import InProcess, run_parallel
from ..model_service import check_device_available
from ..systems.recipes import System


if TYPE_CHECKING:
    from .streaming import StreamingOptions

log = logging.getLogger(__name__)


EXECUTORS = ("auto", "pool", "streaming")


class LocalBackend:
    """Batches in this process (one worker) or in a pool of ``workers`` local processes; device runs in the
    streaming executor (:mod:`voxanon.pipeline.execution.streaming`)."""

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
        workers = self._set_workers(batches)
        if streaming is not None:
            from .streaming import LocalLanes, StreamingRun

            return StreamingRun(LocalLanes(system, allow_pipes, workers, streaming.device_processes), batches,
                                streaming)
        if workers > 1 and len(batches) > 1:
            return run_parallel(system, batches, workers, allow_pipes)
        return InProcess(system, batches, allow_pipes)

    def _set_workers(self, batches: list[list[Job]]) -> int:
        """The workers that ``batches`` can keep busy: at most one per utterance to do (a forked pool starts
        every process it is given at once)."""
        todo = sum(not job.companion for batch in batches for job in batch)
        if self.workers > todo:
            log.info("%d utterance(s) to do: %d worker process(es), not %d", todo, max(1, todo), self.workers)
        return max(1, min(self.workers, todo))
