"""The batch runner: resume after a kill, determinism, failures, manifest."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.corpus import read_data_dir
from voxanon.pipeline.cli import main
from voxanon.pipeline.runner import JOURNAL, anonymise_set
from voxanon.pipeline.systems.stage import Stage, derive_seed
from voxanon.pipeline.systems.recipes import build_system, load_system_config


def _outputs(out_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out_dir / "wav").glob("*.wav"))}


def _cli(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "voxanon.pipeline.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_resume_after_kill_gives_the_uninterrupted_result(tmp_path):
    data = make_corpus(tmp_path, n_speakers=4, n_utts=10, seconds=2.0)
    reference = anonymise_set(data, load_system_config("b2r"), tmp_path / "reference", progress=False)
    assert reference.ok
    killed_dir = tmp_path / "out" / "toy_b2r"
    process = _cli("anonymise", "--system", "b2r", "--data", str(data.path), "--out", str(tmp_path / "out"),
                   "--workers", "1", "--quiet")
    journal = killed_dir / JOURNAL
    deadline = time.time() + 120
    while time.time() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < 5):
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before = len(journal.read_text().splitlines())
    assert 5 <= done_before < 40, "the kill must land mid-run"
    assert not (killed_dir / "wav.scp").exists()

    assert main(["anonymise", "--system", "b2r", "--data", str(data.path), "--out", str(tmp_path / "out"),
                 "--workers", "1", "--quiet"]) == 0
    manifest = json.loads((killed_dir / "run.json").read_text())
    assert manifest["counts"]["resumed"] >= done_before - 1 and manifest["counts"]["failed"] == 0
    assert _outputs(killed_dir) == _outputs(tmp_path / "reference")
    assert not list(killed_dir.rglob("*.tmp"))
    assert read_data_dir(killed_dir).validate() == []


def test_reruns_and_worker_counts_are_bit_identical(tmp_path):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=3)
    config = load_system_config("b2r")
    anonymise_set(data, config, tmp_path / "one", workers=1, progress=False)
    anonymise_set(data, config, tmp_path / "two", workers=2, progress=False)
    anonymise_set(data, config, tmp_path / "again", workers=1, resume=False, progress=False)
    assert _outputs(tmp_path / "one") == _outputs(tmp_path / "two") == _outputs(tmp_path / "again")
    other_seed = load_system_config("b2r", ["seed=1"])
    anonymise_set(data, other_seed, tmp_path / "seed1", progress=False)
    assert _outputs(tmp_path / "seed1") != _outputs(tmp_path / "one")


def _alphas(out_dir: Path) -> dict[str, float]:
    lines = (out_dir / JOURNAL).read_text().splitlines()
    return {e["utt"]: e["record"]["mcadams_alpha"] for e in map(json.loads, lines)}


def test_alpha_draws_per_utterance_and_per_speaker(tmp_path):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=4)
    anonymise_set(data, load_system_config("b2r"), tmp_path / "utt", progress=False)
    per_utt = _alphas(tmp_path / "utt")
    assert len(set(per_utt.values())) == len(per_utt)
    assert all(0.7 <= a <= 0.9 for a in per_utt.values())
    config = load_system_config("b2r", ["mcadams.randomise=speaker", "mcadams.alpha_range=[0.5,0.9]"])
    anonymise_set(data, config, tmp_path / "spk", progress=False)
    per_spk = _alphas(tmp_path / "spk")
    for speaker, utts in data.spk2utt.items():
        assert len({per_spk[u] for u in utts}) == 1
    expected = np.random.default_rng(derive_seed(0, "b2r", "spk:spk0")).uniform(0.5, 0.9)
    assert per_spk["spk0-000"] == expected
    anonymise_set(data, load_system_config("b2"), tmp_path / "b2", progress=False)
    assert set(_alphas(tmp_path / "b2").values()) == {0.8}


def test_bad_utterances_are_reported_and_the_rest_processed(tmp_path, capsys):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=3)
    soundfile.write(data.wav["spk0-001"], np.zeros(4000), 16000)
    Path(data.wav["spk1-002"]).write_bytes(b"not audio at all")
    Path(data.wav["spk1-000"]).unlink()
    code = main(["anonymise", "--system", "b2", "--data", str(data.path), "--out", str(tmp_path / "out"),
                 "--workers", "1", "--quiet"])
    assert code == 1
    out_dir = tmp_path / "out" / "toy_b2"
    rows = [line.split("\t") for line in (out_dir / "failures.tsv").read_text().splitlines()[1:]]
    failures = {row[0]: (row[1], row[2]) for row in rows}
    assert set(failures) == {"spk0-001", "spk1-002", "spk1-000"}
    assert failures["spk0-001"][1].startswith("silent") and failures["spk1-000"][1] == "missing file"
    assert all(stage == "load" for stage, _ in failures.values())
    assert len(_outputs(out_dir)) == 3
    printed = capsys.readouterr()
    assert "3 FAILED" in printed.err
    # The line printed for each names its input file.
    assert f"FAILED spk1-000 ({data.wav['spk1-000']}) [load]: missing file" in printed.out + printed.err
    manifest = json.loads((out_dir / "run.json").read_text())
    assert manifest["status"] == "failures" and manifest["counts"] == {
        "total": 6, "processed": 3, "resumed": 0, "failed": 3}
    assert manifest["versions"]["numpy"] and manifest["config"]["mcadams"]["alpha"] == 0.8


def test_output_layout_and_lengths(tmp_path):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=2)
    assert main(["anonymise", "--system", "b2", "--data", str(data.path), "--quiet", "--workers", "1"]) == 0
    out_dir = tmp_path / "toy_b2"
    out = read_data_dir(out_dir)
    assert out.validate() == [] and out.trials == data.trials and out.text == data.text
    for utt in data.utterances:
        info = soundfile.info(out_dir / "wav" / f"{utt}.wav")
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert info.frames == soundfile.info(data.wav[utt]).frames
        assert out.utt2dur[utt] == pytest.approx(info.frames / 16000, abs=1e-3)


def test_changed_configuration_redoes_the_work(tmp_path):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    first = anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False)
    second = anonymise_set(data, load_system_config("b2", ["mcadams.alpha=0.7"]), tmp_path / "out", progress=False)
    third = anonymise_set(data, load_system_config("b2", ["mcadams.alpha=0.7"]), tmp_path / "out", progress=False)
    assert (first.processed, second.processed, third.processed, third.resumed) == (2, 2, 0, 2)


def test_tampered_output_is_redone(tmp_path):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False)
    original = _outputs(tmp_path / "out")
    (tmp_path / "out" / "wav" / "spk0-001.wav").write_bytes(b"truncated")
    again = anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False)
    assert (again.processed, again.resumed) == (1, 1) and _outputs(tmp_path / "out") == original


@pytest.mark.parametrize("other_thread", [False, True])
def test_workers_are_forked_only_from_a_process_without_other_threads(other_thread, tmp_path, monkeypatch):
    """A forked child inherits every lock as it was at the fork, held or not: with another thread alive the
    workers are spawned instead, and the output is the same. (The thread count is set here: other tests
    of the session may leave threads behind.)"""
    from multiprocessing import get_context

    from voxanon.pipeline.execution import pool

    data = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=0.5)
    methods = []
    monkeypatch.setattr(pool, "get_context", lambda method: methods.append(method) or get_context(method))
    monkeypatch.setattr(threading, "active_count", lambda: 2 if other_thread else 1)
    result = anonymise_set(data, load_system_config("b2"), tmp_path / "out", workers=2, progress=False)
    assert result.ok and methods == ["spawn" if other_thread else "fork"]
    reference = anonymise_set(data, load_system_config("b2"), tmp_path / "one", workers=1, progress=False)
    for utt in data.utterances:
        assert (result.out_dir / "wav" / f"{utt}.wav").read_bytes() == \
            (reference.out_dir / "wav" / f"{utt}.wav").read_bytes()


def test_parallel_runs_take_the_longest_utterances_first(tmp_path, monkeypatch):
    from voxanon.data_prep.corpus import DataDir
    from voxanon.pipeline import runner
    from voxanon.pipeline.execution import local

    lengths = {"a": 2.0, "b": 9.0, "c": 5.0, "d": 9.0}
    for utt, seconds in lengths.items():
        soundfile.write(tmp_path / f"{utt}.wav", np.zeros(int(seconds * 1000)), 1000)
    data = DataDir(name="set", wav={u: str(tmp_path / f"{u}.wav") for u in lengths} | {"p": "sox x.wav -t wav - |"},
                   utt2spk={u: "s" for u in [*lengths, "p"]})
    # From the files' headers (a pipe's length is unknown: last), ties in set order; then from utt2dur.
    assert [job.utt for job in runner._longest_first(runner._jobs(data, ["p", *lengths], tmp_path))] == [
        "b", "d", "c", "a", "p"]
    data.utt2dur = {"a": 7.0, "b": 1.0, "c": 3.0, "d": 2.0, "p": 4.0}
    assert [job.utt for job in runner._longest_first(runner._jobs(data, ["p", *lengths], tmp_path))] == [
        "a", "p", "c", "d", "b"]

    seen = []
    real_outcomes = local.LocalBackend.outcomes

    def record(self, system, batches, *args):
        seen.append([job.utt for batch in batches for job in batch])
        return real_outcomes(self, system, batches, *args)

    monkeypatch.setattr(local.LocalBackend, "outcomes", record)
    rng = np.random.default_rng(0)
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    seconds = {"u1": 0.5, "u2": 1.5, "u3": 1.0, "u4": 1.5}
    for utt, length in seconds.items():
        soundfile.write(corpus_dir / f"{utt}.wav", 0.1 * rng.standard_normal(int(16000 * length)), 16000)
    corpus = DataDir(name="set", wav={u: str(corpus_dir / f"{u}.wav") for u in seconds},
                     utt2spk={u: f"s{i % 2}" for i, u in enumerate(seconds)})
    config = load_system_config("b2")
    anonymise_set(corpus, config, tmp_path / "one", workers=1, progress=False)
    anonymise_set(corpus, config, tmp_path / "two", workers=2, progress=False)
    assert seen == [["u1", "u2", "u3", "u4"], ["u2", "u4", "u3", "u1"]]
    assert _outputs(tmp_path / "one") == _outputs(tmp_path / "two")


class _Marked(Stage):
    """Model-free: records the process it ran in."""
    name = "marked"
    model_free = True

    def process(self, utt):
        utt.record["marked_in"] = os.getpid()
        utt.audio = utt.audio * 0.5


class _SlowToLoad(Stage):
    """Loads for a second, as a neural stage's models do; records the process it ran in."""
    name = "slow_to_load"

    def load_models(self):
        time.sleep(1.0)

    def process(self, utt):
        utt.record["loaded_in"] = os.getpid()
        utt.audio = np.tanh(utt.audio * 3.0)


def test_the_head_start_prepares_utterances_while_the_models_load(tmp_path, monkeypatch):
    """With two workers, a process forked before the models load runs the leading model-free stages on the
    last utterances of the queue; their workers start after those stages, with the same outputs."""
    from voxanon.pipeline.systems.recipes import STAGES

    monkeypatch.setitem(STAGES, "marked", _Marked)
    monkeypatch.setitem(STAGES, "slow_to_load", _SlowToLoad)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    data = make_corpus(tmp_path, n_speakers=2, n_utts=6, seconds=0.5)
    (tmp_path / "corrupt.wav").write_bytes(b"RIFF, but nothing else")
    data.wav["spk0-bad"] = str(tmp_path / "corrupt.wav")
    data.utt2spk["spk0-bad"] = "spk0"
    config = {**load_system_config("b2"), "name": "headstart", "stages": ["marked", "slow_to_load"]}
    two = anonymise_set(data, config, tmp_path / "two", workers=2, progress=False)
    one = anonymise_set(data, config, tmp_path / "one", workers=1, progress=False)
    records = {e["utt"]: e["record"] for e in map(json.loads, (tmp_path / "two" / JOURNAL).read_text().splitlines())}
    assert sorted(records) == sorted(u for u in data.utterances if u != "spk0-bad")
    prepared = [utt for utt, record in records.items() if record["marked_in"] != record["loaded_in"]]
    assert prepared, "the head start prepared nothing"
    assert len({records[utt]["marked_in"] for utt in prepared}) == 1
    assert [(f.utt, f.failed_stage) for f in two.failures] == [(f.utt, f.failed_stage) for f in one.failures] \
        == [("spk0-bad", "load")]
    assert _outputs(tmp_path / "two") == _outputs(tmp_path / "one")


class _MisreportingBackend:
    """A backend that gives the first utterance's outcome back twice, or leaves the last one out."""
    name = "misreporting"

    def __init__(self, fault: str):
        self.fault = fault

    def describe(self) -> dict:
        return {"name": self.name, "workers": 1}

    def check_devices(self, system, streaming) -> None:
        pass

    def outcomes(self, system, batches, allow_pipes, output_dir, streaming=None):
        from voxanon.pipeline.execution.batches import process_jobs

        outcomes = [o for batch in batches for o in process_jobs(system, batch, allow_pipes)]
        reported = outcomes + outcomes[:1] if self.fault == "twice" else outcomes[:-1]
        return contextlib.closing(batch for batch in [reported])


@pytest.mark.parametrize("fault, message", [("twice", "has returned before"), ("never", "returned no outcome")])
def test_a_backend_that_reports_an_utterance_twice_or_never_is_caught(fault, message, tmp_path):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=3, seconds=0.3)
    with pytest.raises(RuntimeError, match=message):
        anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False,
                      backend=_MisreportingBackend(fault))
    # What was reported before the fault is journaled: a rerun resumes it.
    assert len((tmp_path / "out" / JOURNAL).read_text().splitlines()) in (2, 3)


def test_a_crash_before_the_outcomes_are_read_leaves_no_worker(tmp_path, monkeypatch):
    """The pool starts before the progress bar (which starts a thread); a failure between the two ends the
    pool's workers at once instead of leaving them until the process exits."""
    import multiprocessing

    from voxanon.pipeline import runner

    before = set(multiprocessing.active_children())
    data = make_corpus(tmp_path, n_speakers=2, n_utts=4, seconds=0.3)
    monkeypatch.setattr(threading, "active_count", lambda: 1)

    def no_terminal(*args, **kwargs):
        raise OSError("no terminal")

    monkeypatch.setattr(runner, "tqdm", no_terminal)
    with pytest.raises(OSError, match="no terminal"):
        anonymise_set(data, load_system_config("b2"), tmp_path / "out", workers=2, progress=False)
    assert set(multiprocessing.active_children()) <= before


@pytest.mark.slow
def test_spawned_workers_set_their_library_variables_in_their_own_process(monkeypatch):
    """torch reads the thread variables at import and THP_MEM_ALLOC_ENABLE at its first large allocation:
    a spawned worker sets them itself, before anything loads, and the parent's environment is untouched."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from voxanon.pipeline.execution import workers

    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=workers.init_spawned_worker,
                             initargs=(load_system_config("b2"), False)) as pool:
        seen = pool.submit(_library_settings).result()
        assert pool.submit(_thread_pools).result() == {"torch": 1, "blas": 1}
    assert seen == {"THP_MEM_ALLOC_ENABLE": "1", "OMP_NUM_THREADS": "1", "torch_threads": 1}
    assert "THP_MEM_ALLOC_ENABLE" not in os.environ and os.environ["OMP_NUM_THREADS"] == "7"


def test_forked_workers_and_the_driver_running_a_batch_compute_on_one_thread(monkeypatch, tmp_path):
    """A forked worker inherits its parent's thread pools (torch's, BLAS's) and sets each to one; the driver does
    while it runs a batch itself, and gets its own back afterwards. On more threads, sums split differently and a
    run's bytes would follow the machine's core count."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    import torch

    from voxanon.pipeline.execution import pool, workers

    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        workers.set_worker(build_system(load_system_config("b2")), False)
        with ProcessPoolExecutor(1, mp_context=get_context("fork"), initializer=workers.init_forked_worker,
                                 initargs=(False,)) as executor:
            assert executor.submit(_thread_pools).result() == {"torch": 1, "blas": 1}
        seen = []
        real = pool.process_jobs
        monkeypatch.setattr(pool, "process_jobs", lambda *args: seen.append(_thread_pools()) or real(*args))
        data = make_corpus(tmp_path, n_speakers=1, n_utts=2, seconds=0.3)
        assert anonymise_set(data, load_system_config("b2"), tmp_path / "out", workers=1, progress=False).ok
        assert seen == [{"torch": 1, "blas": 1}] * 2
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(threads)


def _thread_pools() -> dict:
    import torch
    from threadpoolctl import threadpool_info

    return {"torch": torch.get_num_threads(),
            "blas": max(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")}


def _library_settings() -> dict:
    import torch

    return {"THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "torch_threads": torch.get_num_threads()}


def test_the_local_and_ray_backends_are_executors():
    """The runner talks to a backend through :class:`~voxanon.pipeline.execution.Executor` only."""
    from voxanon.pipeline.execution import Executor
    from voxanon.pipeline.execution.local import LocalBackend
    from voxanon.pipeline.execution.ray import RayBackend, RayOptions

    assert isinstance(LocalBackend(1), Executor)
    assert isinstance(RayBackend(RayOptions()), Executor)
    assert not isinstance(object(), Executor)
def test_run_json_clock_starts_with_the_command(tmp_path):
    """The command's start-up (interpreter, imports) and the set's preparation are part of what run.json
    times: here a process that spends 3 s before calling the command line."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2, seconds=0.5)
    out = tmp_path / "out"
    script = ("import sys, time; time.sleep(3); from voxanon.pipeline.cli import main; "
              f"sys.argv = ['voxanon', 'anonymise', '--system', 'b2', '--data', {str(data.path)!r}, '--out', "
              f"{str(out)!r}, '--workers', '1', '--quiet']; sys.exit(main())")
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    manifest = json.loads((out / "toy_b2" / "run.json").read_text())
    assert manifest["wall_seconds"] >= 3.0, manifest["wall_seconds"]
    # Called from Python, the clock starts with the call: the time this process lived before is not counted.
    called = time.monotonic()
    assert main(["anonymise", "--system", "b2", "--data", str(data.path), "--out", str(tmp_path / "again"),
                 "--workers", "1", "--quiet"]) == 0
    returned = time.monotonic()
    assert json.loads((tmp_path / "again" / "toy_b2" / "run.json").read_text())["wall_seconds"] <= round(returned - called, 3) + 0.001
