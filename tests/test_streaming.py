"""The streaming executor on the CPU: its "device" process runs the device code path on ``cpu:0``.

``cpu:0`` runs exactly what a GPU runs (padded device batches through ``encode_on_device`` and
``synthesise_padded``), whose outputs differ from one utterance at a time by float rounding, so these
tests see whether the device batches, and with them the bytes, depend on the worker count, the queue
timing or a resume. The models are the tiny random sets of ``tests/systems/ssl_sas/test_ssl_sas_systems.py``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.helpers.corpora import make_corpus
from tests.helpers.demo_sets import SMALL_POOL
from voxanon.pipeline.execution import batches, streaming, workers
from voxanon.pipeline.cli import main
from voxanon.pipeline.runner import FAILURES, JOURNAL, RUN_MANIFEST, anonymise_set
from voxanon.pipeline.execution.batches import Job
from voxanon.pipeline.systems.recipes import device_overrides, load_system_config

RUN_FILES = (JOURNAL, RUN_MANIFEST)


def _overrides(system: str, home: Path, device: str | None, batch_seconds: float = 7.0) -> list[str]:
    """The system on ``device`` (None: the recipe's CPU), with small-pool settings and a shared F0 cache."""
    overrides = [f"f0.cache_dir={home / 'f0-cache'}", f"batch_seconds={batch_seconds}"]
    if system == "b1":
        overrides += SMALL_POOL[1::2]
    config = load_system_config(system, overrides)
    return overrides + (device_overrides(config, device) if device else [])


def _files(out_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out_dir)): p.read_bytes() for p in sorted(out_dir.rglob("*"))
            if p.is_file() and p.name not in RUN_FILES}


def _jittered_loads(monkeypatch, seed: int) -> None:
    """Each load in the CPU lane (forked from here) sleeps 0-40 ms, differently for each run and worker."""
    load = batches.load_prepared

    def jittered(system, job, allow_pipes):
        time.sleep(hash((seed, os.getpid(), job.utt)) % 41 / 1000)
        return load(system, job, allow_pipes)

    monkeypatch.setattr(batches, "load_prepared", jittered)


@pytest.fixture
def home(installed_home, monkeypatch):  # noqa: F811  (the imported fixture)
    home, data = installed_home
    monkeypatch.setenv("VOXANON_HOME", str(home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # The CPU lane is forked (so that it sees the jitter) however many threads earlier tests left.
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    return home, data


def test_device_batches_are_planned_from_the_job_list_alone():
    seconds = {"a": 4.0, "b": 3.9, "c": 3.0, "d": 2.9, "e": 2.9, "f": 1.0, "g": 4.0}
    jobs = [Job(utt, "s", None, f"{utt}.wav", f"out/{utt}.wav", length) for utt, length in seconds.items()]
    jobs.append(Job("pipe", "s", None, "sox x.wav -t wav - |", "out/pipe.wav"))
    plan = streaming.plan_batches(jobs, batch_seconds=9.0)
    assert [[job.utt for job in batch] for batch in plan] == [["a", "g"], ["b", "c"], ["d", "e"], ["f"], ["pipe"]]
    for batch in plan:   # within the budget (padded) and 25 % of padding, or alone
        assert len(batch) == 1 or (len(batch) * batch[0].seconds <= 9.0
                                   and batch[-1].seconds >= 0.75 * batch[0].seconds)
    shuffled = [jobs[i] for i in np.random.default_rng(0).permutation(len(jobs) - 1)] + [jobs[-1]]
    assert streaming.plan_batches(shuffled, 9.0) == plan
    # A resumed run keeps a partly finished batch whole, its finished members as companions, where batching
    # changes the output; elsewhere it drops them. A finished batch is not run again.
    again = streaming.batches_to_run(plan, {"a", "g", "c"}, with_companions=True)
    assert [[(job.utt, job.companion) for job in batch] for batch in again] == [
        [("b", False), ("c", True)], [("d", False), ("e", False)], [("f", False)], [("pipe", False)]]
    assert [[job.utt for job in batch] for batch in streaming.batches_to_run(plan, {"c"}, False)][1] == ["b"]


def test_batches_travel_with_their_arrays_in_shared_memory(tmp_path):
    import pickle

    from voxanon.pipeline.execution import shared_arrays
    from voxanon.pipeline.execution.batches import Batch, Outcome, Prepared
    from voxanon.pipeline.systems.stage import Utterance

    rng = np.random.default_rng(0)
    utterances = [Utterance(f"u{i}", "s", None, rng.standard_normal(16000 * (i + 1)).astype(np.float32), 16000,
                            seeds={}, features={"f0": rng.random(50 * (i + 1)), "note": "kept", "empty": np.zeros(0)},
                            vectors={"speaker": rng.random(192).astype(np.float32)}) for i in range(3)]
    originals = [(u.audio.copy(), u.features["f0"].copy(), u.vectors["speaker"].copy()) for u in utterances]
    batch = Batch([], [Prepared(u, 2, 1.0, []) for u in utterances], {u.utt_id: Outcome(u.utt_id) for u in utterances})
    packed = pickle.dumps(shared_arrays.pack(batch, owner=os.getpid()))
    assert len(packed) < 4000  # references, not 96,000 samples of float32 audio
    files = list(shared_arrays.shared_folder().glob(f"{shared_arrays.PREFIX}-{os.getpid()}-*"))
    assert len(files) == 1
    back = shared_arrays.unpack(pickle.loads(packed))
    assert not files[0].exists()
    for item, (audio, f0, vector) in zip(back.ready, originals):
        utt = item.utterance
        assert utt.audio.dtype == np.float32 and utt.features["note"] == "kept" and utt.features["empty"].size == 0
        np.testing.assert_array_equal(utt.audio, audio)
        np.testing.assert_array_equal(utt.features["f0"], f0)
        np.testing.assert_array_equal(utt.vectors["speaker"], vector)
        utt.audio *= 2  # writable, as a stage expects
    # A batch taken down with its process leaves a file; its driver's lanes remove it, and so does the next run
    # for a driver that is gone.
    shared_arrays.pack(Batch([], [Prepared(utterances[0], 2, 1.0, [])], {}), owner=os.getpid())
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    shared_arrays.pack(Batch([], [Prepared(utterances[1], 2, 1.0, [])], {}), owner=int(gone.stdout))
    shared_arrays.remove_leftovers(os.getpid())
    assert not list(shared_arrays.shared_folder().glob(f"{shared_arrays.PREFIX}-{os.getpid()}-*"))
    assert not list(shared_arrays.shared_folder().glob(f"{shared_arrays.PREFIX}-{gone.stdout.strip()}-*"))


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
    plan = streaming.plan_batches(jobs, streaming.DEFAULT_BATCH_SECONDS)
    assert sorted(job.utt for batch in plan for job in batch) == sorted(job.utt for job in jobs)
    rows = sum(padded_rows(len(batch)) for batch in plan)
    assert (rows - len(jobs)) / rows <= 0.05
    for batch in plan:
        assert len(batch) * batch[0].seconds <= streaming.DEFAULT_BATCH_SECONDS or len(batch) == 1
        assert batch[-1].seconds >= 0.75 * batch[0].seconds
    # Eleven 1 s jobs within a 12 s budget: 8 and 3 rows, not 11 padded to 12.
    ones = [Job(f"u{i:02d}", "s", None, "a.wav", f"out/{i}.wav", 1.0) for i in range(11)]
    assert [len(batch) for batch in streaming.plan_batches(ones, 12.0)] == [8, 3]


@pytest.mark.parametrize("system, worker_counts", [
    ("resynth", (1, 2, 3)),
    pytest.param("b1", (1, 2, 3), marks=pytest.mark.slow), pytest.param("zllr", (1, 2, 3), marks=pytest.mark.slow)])
def test_the_same_bytes_whatever_the_workers_and_the_queue_timing(system, worker_counts, home, tmp_path, monkeypatch):
    home, data = home
    config = load_system_config(system, _overrides(system, home, "cpu:0"))
    runs = {}
    for count in worker_counts:
        _jittered_loads(monkeypatch, count)
        # A cap of one device batch for two workers: the CPU lane waits for the device at every batch.
        result = anonymise_set(data, config, tmp_path / f"workers{count}", workers=count, progress=False,
                               queue_seconds=7.0 if count == 2 else None)
        assert result.ok and result.processed == len(data.utterances)
        executor = json.loads((result.out_dir / RUN_MANIFEST).read_text())["executor"]
        assert executor["kind"] == "streaming" and executor["cpu_workers"] == count
        assert 1 < executor["device_batches"] < len(data.utterances), "several device batches, some of several"
        runs[count] = _files(result.out_dir)
    assert all(files == runs[1] for files in runs.values())

    # Against today's CPU path, one utterance at a time: float rounding only.
    reference = anonymise_set(data, load_system_config(system, _overrides(system, home, None)), tmp_path / "cpu",
                              workers=1, progress=False)
    assert reference.ok
    for name, content in _files(reference.out_dir).items():
        if not name.endswith(".wav"):
            assert runs[1][name] == content, name   # metadata, B1's pseudo-speaker vectors
            continue
        ours, theirs = (soundfile.read(path)[0] for path in (tmp_path / "workers1" / name, reference.out_dir / name))
        assert len(ours) == len(theirs)
        snr = 10 * np.log10(np.sum(theirs ** 2) / max(np.sum((ours - theirs) ** 2), 1e-20))
        assert snr >= 60, (name, snr)


def test_a_resumed_batch_is_recomputed_with_its_finished_members(home, tmp_path):
    """A batch half written when a run stopped is run whole again: the redone utterance gets the bytes of the
    batch it was planned in, not those of a batch of its own."""
    home, data = home
    config = load_system_config("resynth", _overrides("resynth", home, "cpu:0", batch_seconds=100.0))
    first = anonymise_set(data, config, tmp_path / "out", workers=2, progress=False)
    original = _files(first.out_dir)
    journal = [json.loads(line) for line in (first.out_dir / JOURNAL).read_text().splitlines()]
    redo = journal[len(journal) // 2]["utt"]
    (first.out_dir / "wav" / f"{redo}.wav").unlink()
    again = anonymise_set(data, config, tmp_path / "out", workers=2, progress=False)
    assert (again.processed, again.resumed) == (1, len(data.utterances) - 1)
    assert _files(again.out_dir) == original
    lines = (first.out_dir / JOURNAL).read_text().splitlines()
    assert len(lines) == len(journal) + 1, "only the redone utterance is journaled again"


def test_kill_and_resume_give_the_uninterrupted_bytes(home, tmp_path):
    _, _ = home
    data = make_corpus(tmp_path, n_speakers=4, n_utts=4, seconds=0.8)
    command = ["anonymise", "--system", "resynth", "--data", str(data.path), "--workers", "1", "--quiet",
               "--set", "content.device=cpu:0", "--set", "speaker.device=cpu:0", "--set", "vocoder.device=cpu:0",
               "--set", "batch_seconds=3"]
    assert main(command + ["--out", str(tmp_path / "reference")]) == 0
    out = tmp_path / "out" / "toy_resynth"
    process = subprocess.Popen([sys.executable, "-m", "voxanon.pipeline.cli", *command, "--out", str(tmp_path / "out")],
                               env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and (not (out / JOURNAL).exists() or len((out / JOURNAL).read_text().splitlines()) < 3):
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before = len((out / JOURNAL).read_text().splitlines())
    assert 3 <= done_before < 16, "the kill must land mid-run"
    assert not (out / "wav.scp").exists()

    assert main(command + ["--out", str(tmp_path / "out")]) == 0   # the lock is free: no process outlived the run
    manifest = json.loads((out / RUN_MANIFEST).read_text())
    assert manifest["counts"]["resumed"] >= done_before - 1 and manifest["counts"]["failed"] == 0
    assert _files(out) == _files(tmp_path / "reference" / "toy_resynth")
    assert not list(out.rglob("*.tmp"))


def test_a_corrupt_file_is_a_failure_and_the_others_finish(home, tmp_path):
    home, data = home
    broken = sorted(data.utterances)[2]
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really audio")
    data = replace(data, wav={**data.wav, broken: str(corrupt)}, path=None)
    result = anonymise_set(data, load_system_config("resynth", _overrides("resynth", home, "cpu:0")),
                           tmp_path / "out", workers=2, progress=False)
    assert [(f.utt, f.failed_stage) for f in result.failures] == [(broken, "load")]
    rows = [line.split("\t")[:2] for line in (result.out_dir / FAILURES).read_text().splitlines()[1:]]
    assert rows == [[broken, "load"]]
    assert sorted(p.stem for p in (result.out_dir / "wav").glob("*.wav")) == sorted(set(data.utterances) - {broken})


def test_a_run_stopped_with_ctrl_c_keeps_its_executors_statistics(home, tmp_path, monkeypatch):
    """benchmarks/gpu_pipeline.py stops a run at its time limit with Ctrl-C: run.json then still says what the
    executor did until then (its first device batch, busy share, queue waits)."""
    from voxanon.pipeline import runner

    home, data = home

    def stopped_after_one_batch(outcomes, *args, **kwargs):
        next(iter(outcomes))
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_journal_outcomes", stopped_after_one_batch)
    config = load_system_config("resynth", _overrides("resynth", home, "cpu:0"))
    with pytest.raises(KeyboardInterrupt):
        anonymise_set(data, config, tmp_path / "out", workers=2, progress=False)
    manifest = json.loads(next((tmp_path / "out").rglob(RUN_MANIFEST)).read_text())
    executor = manifest["executor"]
    assert manifest["status"] == "interrupted" and executor["kind"] == "streaming"
    assert executor["first_device_batch_seconds"] > 0 and executor["device_busy_share"] is not None


def _slow_device_process(*args):
    """The device process's initializer, with its batches slowed down: the CPU lane gets ahead of it."""
    streaming._init_device_process(*args)
    run_stages = batches.run_stages

    def slow(system, batch, start=0, stop=None):
        if start == streaming.cpu_stage_count(system) > 0:  # once per device batch
            time.sleep(0.25)
        return run_stages(system, batch, start, stop)

    batches.run_stages = slow


def test_the_queue_holds_at_most_its_cap(home, tmp_path, monkeypatch):
    """The audio loaded by the CPU lane and not yet written never passes ``queue_seconds``, however far ahead
    the CPU lane could run: measured from the CPU lane's own log of loads and writes."""
    home, _ = home
    data = make_corpus(tmp_path, n_speakers=4, n_utts=4, seconds=0.5)
    log = tmp_path / "events.log"

    def logged(name, function, event):
        def wrapper(*args):
            result = function(*args)
            with open(log, "a") as handle:
                handle.write("".join(f"{event} {utt}\n" for utt in name(args, result)))
            return result
        return wrapper

    monkeypatch.setattr(batches, "load_prepared", logged(lambda args, _: [args[1].utt], batches.load_prepared, "L"))
    monkeypatch.setattr(batches, "write_batch", logged(lambda args, result: [o.utt for o in result],
                                                      batches.write_batch, "W"))
    monkeypatch.setattr(streaming, "_init_device_process", _slow_device_process)
    cap = 2.0
    config = load_system_config("resynth", _overrides("resynth", home, "cpu:0", batch_seconds=1.2))
    result = anonymise_set(data, config, tmp_path / "out", workers=3, progress=False, queue_seconds=cap)
    assert result.ok
    held, most = set(), 0.0
    for event, utt in (line.split() for line in log.read_text().splitlines()):
        (held.add if event == "L" else held.discard)(utt)
        most = max(most, sum(data.utt2dur[u] for u in held))
    assert 1.0 < most <= cap, most   # the cap was reached, and held
    executor = json.loads((result.out_dir / RUN_MANIFEST).read_text())["executor"]
    assert executor["queue_seconds"] == cap and executor["max_queued_seconds"] <= cap
    assert executor["held_back_share"] > 0 and executor["device_busy_share"] > 0.5
    assert executor["first_device_batch_seconds"] > 0 and set(executor["queue_wait_share"]) == {"device", "write"}


def _device_process_saying_its_pid(*args):
    """The device process's initializer, writing its process id first."""
    Path(os.environ["VOXANON_TEST_ORDER"], "device").write_text(str(os.getpid()))
    streaming._init_device_process(*args)


def test_the_device_process_starts_before_the_cpu_lane(home, tmp_path, monkeypatch):
    """The device process loads torch and its models while the CPU lane starts: it has been started when each
    CPU worker is forked (each worker reports the device processes its parent had started by then, a list it
    inherits at the fork)."""
    home, _ = home
    monkeypatch.setenv("VOXANON_TEST_ORDER", str(tmp_path))
    monkeypatch.setattr(streaming, "_init_device_process", _device_process_saying_its_pid)
    started: list[int] = []

    class RecordedDeviceProcess(streaming.DeviceProcess):
        def __init__(self, *args):
            super().__init__(*args)
            started.append(self.pid)

    monkeypatch.setattr(streaming, "DeviceProcess", RecordedDeviceProcess)
    init = workers.init_forked_worker

    def cpu_worker_reporting_the_started_devices(*args):
        (tmp_path / f"cpu-{os.getpid()}").write_text(" ".join(map(str, started)))
        return init(*args)

    monkeypatch.setattr(workers, "init_forked_worker", cpu_worker_reporting_the_started_devices)
    config = load_system_config("resynth", _overrides("resynth", home, "cpu:0"))
    data = make_corpus(tmp_path / "in", n_speakers=2, n_utts=1, seconds=0.5)  # the order needs no more
    result = anonymise_set(data, config, tmp_path / "out", workers=2, progress=False)
    assert result.ok
    device = (tmp_path / "device").read_text()
    seen = [path.read_text().split() for path in tmp_path.glob("cpu-*")]
    assert len(seen) == 2 and all(started_before == [device] for started_before in seen), (device, seen)


@pytest.mark.slow
def test_one_device_process_per_gpu_sharing_the_batches(home, tmp_path, monkeypatch):
    """Issue 23: one device process per GPU, batches to whichever has fewest in hand; the bytes are those of
    one device process (two on cpu:0 here stand for two GPUs)."""
    home, data = home
    config = load_system_config("resynth", _overrides("resynth", home, "cpu:0"))
    runs = {}
    for processes in (1, 2):
        result = anonymise_set(data, config, tmp_path / f"devices{processes}", workers=2, progress=False,
                               device_processes=processes)
        assert result.ok
        executor = json.loads((result.out_dir / RUN_MANIFEST).read_text())["executor"]
        assert executor["device_workers"] == processes and executor["device_batches"] > 2
        runs[processes] = _files(result.out_dir)
    assert runs[2] == runs[1]


def test_the_gpus_a_run_sees_are_counted_without_starting_cuda(tmp_path, monkeypatch):
    from voxanon.pipeline.model_service import visible_gpus
    from voxanon.pipeline.execution.streaming import device_process_count
    from voxanon.pipeline.systems.recipes import build_system

    listing = tmp_path / "gpus"
    for address in ("0000:17:00.0", "0000:65:00.0", "0000:ca:00.0"):
        (listing / address).mkdir(parents=True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpus(str(listing)) == ["0", "1", "2"]
    assert visible_gpus(str(tmp_path / "no-driver")) == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 5")
    assert visible_gpus(str(listing)) == ["2", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus(str(listing)) == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,7")
    on = {device: build_system(load_system_config("resynth", [f"{s}.device={device}" for s in
                                                              ("content", "speaker", "vocoder")]))
          for device in ("cuda", "cuda:1", "cpu:0")}
    assert [device_process_count(on[device]) for device in ("cuda", "cuda:1", "cpu:0")] == [2, 1, 1]
    assert "torch" not in sys.modules or not sys.modules["torch"].cuda.is_initialized()
