"""Memory planning: whether a run's utterances in flight fit in the memory this process may take, decided before
the first utterance from the inputs' lengths (their headers or ``utt2dur``, read for planning) and the figures the
stages declare, by the rule ``train asv`` follows too: estimate the peak, compare it with
:func:`voxanon.data_prep.memory.available_memory` (``MemAvailable``, or what a cgroup v1 or v2 limit leaves), and
refuse in one line before any work rather than be killed by the kernel (exit 137) mid-run.

The estimate of a batch is its samples (at the system's rate, each utterance at most ``max_seconds``, which the
loader refuses beyond) times the system's bytes per sample: :data:`LOAD_BYTES_PER_SAMPLE` for the loaded audio
plus each stage's :attr:`~voxanon.pipeline.systems.stage.Stage.bytes_per_sample` where it runs on the CPU (the sum
bounds the chain's peak: each figure is what its stage takes above what the utterance held before it). The run's
estimate is the models the run loads on the CPU (their installed files' size, once: forked workers share them)
plus the batches that run at once: the pool's largest ``workers`` batches; the streaming executor's largest device
batch and one utterance per CPU-lane worker, and its queue's other audio as loaded audio.

Where the output does not depend on the batching (:func:`~voxanon.pipeline.execution.planning.batch_invariant`),
batches that would not fit are planned smaller, down to one utterance each, the bytes unchanged; where even that
does not fit, or the batching shapes the output, the run is refused naming the longest file, the estimate, the
limit, and what fits. A file of unknown length (a pipe) is left out of the estimate.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from ...data_prep.errors import VoxanonError
from ...data_prep.memory import available_memory
from .batches import Job
from .planning import batch_invariant, pool_batches

if TYPE_CHECKING:
    from ..systems.recipes import System

log = logging.getLogger(__name__)

LOAD_BYTES_PER_SAMPLE = 8.0
"""An utterance's loading: its decoded float32 samples and the copies reading and down-mixing make, per sample at
the system's rate (5.3 measured for a 16 kHz mono 16-bit WAV by benchmarks/stage_memory.py; 8 leaves room for a
stereo file's second channel at the same rate)."""


class NotEnoughMemory(VoxanonError):
    """A run whose utterances in flight will not fit in the memory left."""


@dataclass(frozen=True)
class MemoryNeed:
    """What a system's run takes: ``per_sample`` bytes for each sample in flight, and ``models`` bytes once."""
    per_sample: float
    models: int
    sample_rate: int
    max_seconds: float | None

    def batch_bytes(self, batch: list[Job]) -> int:
        return int(self.per_sample * sum(self.samples(job) for job in batch))

    def samples(self, job: Job) -> int:
        seconds = job.seconds or 0.0  # a pipe's length is unknown until it runs
        if self.max_seconds is not None:
            seconds = min(seconds, self.max_seconds)
        return int(seconds * self.sample_rate)


def on_cpu(device: str) -> bool:
    """Whether a stage on ``device`` takes the machine's memory (``cpu:N`` runs the device code path on the CPU)."""
    return str(device).split(":")[0] == "cpu"


def system_need(system: System) -> MemoryNeed:
    stages = sum(stage.bytes_per_sample or 0.0 for stage in system.stages if on_cpu(stage.device))
    return MemoryNeed(LOAD_BYTES_PER_SAMPLE + stages, _model_bytes(system), system.sample_rate, system.max_seconds)


def _model_bytes(system: System) -> int:
    """The installed files of each model set a stage loads on the CPU, each set once."""
    from ...models.checkpoints.registry import models_dir
    from ..systems.stage import ModelStage

    sets = {stage.models for stage in system.stages if isinstance(stage, ModelStage) and on_cpu(stage.device)}
    total = 0
    for name in sorted(sets):
        total += sum(path.stat().st_size for path in (models_dir() / name).rglob("*") if path.is_file())
    return total


def _gb(count: float) -> str:
    return f"{count / 1e9:.2f} GB"


def fit_pool_batches(system: System, jobs: list[Job], batches: list[list[Job]], workers: int,
                     available: int | None) -> list[list[Job]]:
    """The pool's ``batches`` (of ``jobs``, ``workers`` at a time), planned smaller where the largest would not fit
    in ``available`` bytes and the output does not depend on the batching; refused (:class:`NotEnoughMemory`) where
    one utterance per worker does not fit either. ``available`` None (unknown): unchanged."""
    if available is None or not jobs:
        return batches
    need = system_need(system)
    parallel = workers > 1

    def estimate(planned: list[list[Job]]) -> int:
        at_once = sorted((need.batch_bytes(batch) for batch in planned), reverse=True)[:workers]
        return need.models + sum(at_once)

    if estimate(batches) <= available:
        return batches
    if batch_invariant(system.config):
        for size in range(max(map(len, batches)) - 1, 0, -1):
            smaller = pool_batches(jobs, size, parallel)
            if estimate(smaller) <= available:
                log.info("%s: batches of %d utterance(s) instead of %d, so that the largest %d at once fit in the "
                         "%s available (about %s)", system.name, size, system.batch_size, workers,
                         _gb(available), _gb(estimate(smaller)))
                return smaller
    smallest = [[job] for job in jobs] if batch_invariant(system.config) else batches
    refuse(system, need, jobs, min(workers, len(jobs)), estimate(smallest), available)


def check_streaming(system: System, batches: list[list[Job]], workers: int, queue_seconds: float,
                    available: int | None) -> None:
    """Refuse a streaming run whose largest device batch, one utterance per CPU-lane worker and its queue's other
    audio (``queue_seconds``, as loaded audio) will not fit in ``available`` bytes. Its batches shape the output
    (a stage on a device), so they are never planned smaller here."""
    jobs = [job for batch in batches for job in batch]
    if available is None or not jobs:
        return
    need = system_need(system)
    longest = sorted((need.batch_bytes([job]) for job in jobs), reverse=True)[:workers]
    queue = int(LOAD_BYTES_PER_SAMPLE * queue_seconds * system.sample_rate)
    estimate = need.models + max(need.batch_bytes(batch) for batch in batches) + sum(longest) + queue
    if estimate > available:
        refuse(system, need, jobs, min(workers, len(jobs)), estimate, available,
               hint="or lower the device batches: --set batch_seconds=S")


def fit_in_memory(system: System, jobs: list[Job], batches: list[list[Job]], workers: int,
                  streaming_queue_seconds: float | None = None) -> list[list[Job]]:
    """The run's ``batches`` checked against the memory left now, before the first utterance: for the streaming
    executor (``streaming_queue_seconds`` its queue's cap) refused if they will not fit (:func:`check_streaming`);
    for the pool planned smaller or refused (:func:`fit_pool_batches`)."""
    room = available_memory()
    if streaming_queue_seconds is not None:
        check_streaming(system, batches, workers, streaming_queue_seconds, room)
        return batches
    return fit_pool_batches(system, jobs, batches, workers, room)


def evaluation_batches(items: list, samples: list[int], sample_rate: int, per_sample: float, batch_size: int,
                       source) -> list[list]:
    """``items`` (longest first; ``samples`` each one's length at ``sample_rate``) in batches of at most
    ``batch_size``, each cut before its samples times ``per_sample`` would pass the memory left now (with ample
    memory, the batches of ``batch_size`` alone); an item that does not fit alone is refused naming
    ``source(item)``, before any batch runs."""
    room = available_memory()
    batches: list[list] = []
    held = 0
    for item, count in zip(items, samples):
        need = int(per_sample * count)
        if room is not None and need > room:
            raise NotEnoughMemory(f"{source(item)} ({count / sample_rate:.0f} s): needs about {_gb(need)} to compute "
                                  f"({per_sample:.0f} bytes per sample), and {_gb(room)} is available "
                                  "(data_prep/memory.py: MemAvailable or the cgroup's limit); split the file or "
                                  "free memory")
        if batches and len(batches[-1]) < batch_size and (room is None or held + need <= room):
            batches[-1].append(item)
            held += need
        else:
            batches.append([item])
            held = need
    return batches


def refuse(system: System, need: MemoryNeed, jobs: list[Job], workers: int, estimate: int, available: int,
           hint: str = "") -> NoReturn:
    """The one-line refusal: the longest file, the estimate and the limit, and what would fit."""
    longest = max(jobs, key=need.samples)
    per_utterance = need.per_sample * need.samples(longest)
    room = available - need.models
    fitting_workers = 0
    lengths = sorted((need.samples(job) * need.per_sample for job in jobs), reverse=True)
    while fitting_workers < len(lengths) and sum(lengths[:fitting_workers + 1]) <= room:
        fitting_workers += 1
    # Whole seconds, rounded down: a file of the figure printed must fit.
    fitting_seconds = int(room // (workers * need.per_sample * need.sample_rate)) if room > 0 else 0
    remedies = []
    if 1 <= fitting_workers < workers:
        remedies.append(f"--workers {fitting_workers} fits")
    if fitting_seconds >= 1:
        remedies.append(f"files of at most {fitting_seconds} s fit: split longer ones, or --set "
                        f"max_seconds={fitting_seconds} fails them alone")
    if hint:
        remedies.append(hint)
    if not remedies:
        remedies.append("free memory or run on a machine with more")
    models = f" and {_gb(need.models)} of models" if need.models else ""
    raise NotEnoughMemory(f"{longest.source} ({need.samples(longest) / need.sample_rate:.0f} s): system "
                       f"{system.name!r} needs about {_gb(per_utterance)} for it ({need.per_sample:.0f} bytes per "
                       f"sample at {need.sample_rate} Hz), {_gb(estimate)} with {workers} worker(s) at once{models}, "
                       f"and {_gb(available)} is available (data_prep/memory.py: MemAvailable or the cgroup's limit); "
                       + "; ".join(remedies))
