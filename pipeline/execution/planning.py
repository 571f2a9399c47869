"""Batch planning: how a set's jobs are cut into batches, and which of a system's stages run where, decided
before the run from the job list and the configuration alone.

Every executor takes its batches from here: the local pool and Ray's pool the batches of
:func:`pool_batches`, split for the workers by :func:`parallel_batches`; the streaming executor (local or Ray)
the device batches of :func:`plan_batches`, resumed by :func:`batches_to_run`, its CPU lane running the stages
:func:`cpu_stage_count` counts. Whether the output may depend on the batching at all is
:func:`batch_invariant`'s answer, which the runner's configuration hash also asks.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ...data_prep.errors import VoxanonError
from .batches import Job

if TYPE_CHECKING:
    from ..systems.recipes import System


DEFAULT_BATCH_SECONDS = 200.0
"""A device batch's padded audio at most (the system's ``batch_seconds`` setting overrides it)."""
MAX_PADDING = 0.25
"""A device batch's padding to its longest member at most."""


def batch_invariant(config: dict) -> bool:
    """Whether the system's output is the same however its utterances are batched: on the CPU every stage
    processes an utterance on its own; on another device the neural stages run padded batches, equal to
    one at a time only to float rounding."""
    return all(str((config.get(stage) or {}).get("device", "cpu")) == "cpu" for stage in config.get("stages", []))


def longest_first(jobs: list[Job]) -> list[Job]:
    """``jobs`` longest first (ties in set order), so that parallel workers finish together: in set order a
    long utterance met last runs alone while the other workers idle (20 utterances of 6-10 s on 2 workers:
    4.5 s of one idle core in a 50 s run). A job of unknown length (a pipe) goes last. The output never
    depends on the order."""
    return sorted(jobs, key=lambda job: -(job.seconds or 0.0))


def pool_batches(jobs: list[Job], batch_size: int, parallel: bool) -> list[list[Job]]:
    """``jobs`` in batches of the system's ``batch_size`` for a pool (or this process alone): in the set's
    order, or, ``parallel`` (more than one worker), :func:`longest_first`."""
    if parallel:
        jobs = longest_first(jobs)
    return [jobs[i:i + batch_size] for i in range(0, len(jobs), batch_size)]


def parallel_batches(batches: list[list[Job]], workers: int, config: dict) -> list[list[Job]]:
    """The batches split so that each worker gets at least eight: a small set's last batch must not run
    alone while the other workers idle (20 utterances in batches of 4 on 2 workers: 3 batches for one,
    2 for the other, which then idled a third of the run). Only where the output does not depend on the
    batching (:func:`batch_invariant`), so that it never depends on the worker count or the backend."""
    if not batch_invariant(config):
        return batches
    jobs = [job for batch in batches for job in batch]
    size = max(1, min(max(map(len, batches), default=1), len(jobs) // (8 * workers)))
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


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


def cpu_stage_count(system: System) -> int:
    """How many of the system's stages, from the first, the streaming executor's CPU lane runs: the leading
    model-free stages that stay on the CPU. The rest run in the device process."""
    return next((i for i, stage in enumerate(system.stages) if not (stage.model_free and stage.device == "cpu")),
                len(system.stages))
