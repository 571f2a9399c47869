"""Batch planning (:mod:`voxanon.pipeline.execution.planning`): the batches every executor runs, decided from the
job list and the configuration alone."""
from __future__ import annotations

import numpy as np

from voxanon.pipeline.execution import planning
from voxanon.pipeline.execution.batches import Job
from voxanon.pipeline.execution.planning import parallel_batches
from voxanon.pipeline.systems.recipes import device_overrides, load_system_config


def test_device_batches_are_planned_from_the_job_list_alone():
    seconds = {"a": 4.0, "b": 3.9, "c": 3.0, "d": 2.9, "e": 2.9, "f": 1.0, "g": 4.0}
    jobs = [Job(utt, "s", None, f"{utt}.wav", f"out/{utt}.wav", length) for utt, length in seconds.items()]
    jobs.append(Job("pipe", "s", None, "sox x.wav -t wav - |", "out/pipe.wav"))
    plan = planning.plan_batches(jobs, batch_seconds=9.0)
    assert [[job.utt for job in batch] for batch in plan] == [["a", "g"], ["b", "c"], ["d", "e"], ["f"], ["pipe"]]
    for batch in plan:   # within the budget (padded) and 25 % of padding, or alone
        assert len(batch) == 1 or (len(batch) * batch[0].seconds <= 9.0
                                   and batch[-1].seconds >= 0.75 * batch[0].seconds)
    shuffled = [jobs[i] for i in np.random.default_rng(0).permutation(len(jobs) - 1)] + [jobs[-1]]
    assert planning.plan_batches(shuffled, 9.0) == plan
    # A resumed run keeps a partly finished batch whole, its finished members as companions, where batching
    # changes the output; elsewhere it drops them. A finished batch is not run again.
    again = planning.batches_to_run(plan, {"a", "g", "c"}, with_companions=True)
    assert [[(job.utt, job.companion) for job in batch] for batch in again] == [
        [("b", False), ("c", True)], [("d", False), ("e", False)], [("f", False)], [("pipe", False)]]
    assert [[job.utt for job in batch] for batch in planning.batches_to_run(plan, {"c"}, False)][1] == ["b"]


def test_device_batches_hold_a_row_count_of_the_models_grid():
    """Padding rows are GPU work for nothing: on the 10 h benchmark set (``benchmarks/gpu_pipeline.py``: the demo
    corpus replicated 78 times) the planner cut 200 s batches that the models padded by 21 % of their rows."""
    from voxanon.data_prep.corpus import read_data_dir
    from voxanon.data_prep.demo_corpus import demo_corpus_dir
    from voxanon.models.nets.precision import padded_rows

    demo = read_data_dir(demo_corpus_dir())
    copies = int(-(-36000 // sum(demo.utt2dur.values())))
    jobs = [Job(f"{utt}-x{copy:03d}", "s", None, f"{utt}.wav", f"out/{utt}-{copy}.wav", demo.utt2dur[utt])
            for copy in range(copies) for utt in demo.utterances]
    plan = planning.plan_batches(jobs, planning.DEFAULT_BATCH_SECONDS)
    assert sorted(job.utt for batch in plan for job in batch) == sorted(job.utt for job in jobs)
    rows = sum(padded_rows(len(batch)) for batch in plan)
    assert (rows - len(jobs)) / rows <= 0.05
    for batch in plan:
        assert len(batch) * batch[0].seconds <= planning.DEFAULT_BATCH_SECONDS or len(batch) == 1
        assert batch[-1].seconds >= 0.75 * batch[0].seconds
    # Eleven 1 s jobs within a 12 s budget: 8 and 3 rows, not 11 padded to 12.
    ones = [Job(f"u{i:02d}", "s", None, "a.wav", f"out/{i}.wav", 1.0) for i in range(11)]
    assert [len(batch) for batch in planning.plan_batches(ones, 12.0)] == [8, 3]


def test_parallel_batches_give_every_worker_several_and_keep_every_job():
    cpu = load_system_config("resynth")
    jobs = [Job(f"u{i}", "s", None, f"{i}.wav", f"o{i}.wav") for i in range(20)]
    batches = [jobs[i:i + 4] for i in range(0, 20, 4)]
    assert parallel_batches(batches, 2, cpu) == [[job] for job in jobs]
    many = [Job(f"u{i}", "s", None, f"{i}.wav", f"o{i}.wav") for i in range(200)]
    split = parallel_batches([many[i:i + 4] for i in range(0, 200, 4)], 2, cpu)
    assert [len(b) for b in split] == [4] * 50 and [j for b in split for j in b] == many
    # Padded device batches equal one at a time only to float rounding: the user's batches stay as they are,
    # so the output does not depend on the worker count or the backend.
    on_gpu = load_system_config("resynth", device_overrides(cpu, "cuda"))
    assert parallel_batches(batches, 2, on_gpu) == batches
    assert parallel_batches(batches, 2, load_system_config("resynth", device_overrides(cpu, "auto"))) == batches


def test_pool_batches_keep_the_set_order_for_one_worker_and_go_longest_first_for_several():
    seconds = {"a": 1.0, "b": 5.0, "pipe": None, "c": 3.0, "d": 5.0}
    jobs = [Job(utt, "s", None, f"{utt}.wav", f"out/{utt}.wav", length) for utt, length in seconds.items()]
    assert [[job.utt for job in batch] for batch in planning.pool_batches(jobs, 2, parallel=False)] == [
        ["a", "b"], ["pipe", "c"], ["d"]]
    # Ties keep the set's order; a job of unknown length (a pipe) goes last.
    assert [[job.utt for job in batch] for batch in planning.pool_batches(jobs, 2, parallel=True)] == [
        ["b", "d"], ["c", "a"], ["pipe"]]
