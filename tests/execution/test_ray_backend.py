"""``--backend ray`` on a local three-node Ray cluster (a CPU-less head and two one-CPU worker nodes).

One cluster serves every test (start-up costs seconds); the node-loss test puts its node back.
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

from tests.helpers.corpora import make_corpus
from tests.helpers.model_homes import import_random_set
from tests.helpers.device_checks import ON_CPU
from voxanon.data_prep.corpus import read_data_dir, write_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.pipeline.cli import main
from voxanon.pipeline.execution.ray import RayBackend, RayOptions
from voxanon.pipeline.runner import FAILURES, JOURNAL, RUN_MANIFEST, anonymise_set
from voxanon.pipeline.systems.recipes import load_system_config

DEMO_SPEAKERS = ("slt", "us1", "kal", "rms")    # two f, two m: target and non-target trials of each sex
UTTS_PER_SPEAKER = 6                            # four enrolment utterances, two trial utterances
RUN_FILES = (JOURNAL, RUN_MANIFEST)     # differ by design (timing, completion order)


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as patch:
        # Ray's default nice 15 for workers would let other jobs on a shared machine starve the actors.
        patch.setenv("RAY_worker_niceness", "0")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, env_vars={"RAY_worker_niceness": "0"})
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="module")
def demo_subset(tmp_path_factory) -> Path:
    demo = read_data_dir(demo_corpus_dir())
    subset = demo.subset([u for spk in DEMO_SPEAKERS for u in demo.spk2utt[spk][:UTTS_PER_SPEAKER]])
    subset = replace(subset, wav=subset.absolute_wav(),
                     trials=[t for t in subset.trials if t.enrol_speaker in DEMO_SPEAKERS and t.test_utt in subset.wav],
                     enrolls=[u for u in subset.enrolls if u in subset.wav])
    target = tmp_path_factory.mktemp("demo") / "small"
    write_data_dir(subset, target)
    return target


def _files(out_dir: Path) -> dict[str, bytes]:
    """Every output file but the run's own records, by path relative to the set."""
    return {str(p.relative_to(out_dir)): p.read_bytes() for p in sorted(out_dir.rglob("*"))
            if p.is_file() and p.name not in RUN_FILES}


def _journal_utts(out_dir: Path) -> list[str]:
    return [json.loads(line)["utt"] for line in (out_dir / JOURNAL).read_text().splitlines()]


def _cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "voxanon.pipeline.cli", *args],
                            env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_journal(out_dir: Path, lines: int, timeout: float = 120) -> None:
    journal = out_dir / JOURNAL
    deadline = time.time() + timeout
    while time.time() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < lines):
        time.sleep(0.02)


def test_b2_under_ray_is_byte_identical_to_local(cluster, demo_subset, tmp_path):
    common = ["anonymise", "--system", "b2", "--data", str(demo_subset), "--quiet"]
    assert main(common + ["--out", str(tmp_path / "local"), "--workers", "1"]) == 0
    assert main(common + ["--out", str(tmp_path / "ray"), "--backend", "ray", "--ray-address", cluster.address,
                          "--workers", "2"]) == 0
    local, remote = _files(tmp_path / "local" / "small_b2"), _files(tmp_path / "ray" / "small_b2")
    assert {"wav.scp", "utt2dur", "utt2spk", "trials"} <= set(remote)
    assert len([name for name in remote if name.endswith(".wav")]) == len(DEMO_SPEAKERS) * UTTS_PER_SPEAKER
    assert remote == local
    manifest = json.loads((tmp_path / "ray" / "small_b2" / RUN_MANIFEST).read_text())
    assert manifest["backend"]["name"] == "ray" and manifest["backend"]["workers"] == 2
    assert manifest["backend"]["resources"]["CPU"] == 2 and manifest["backend"]["nodes"] == 3
    assert sorted(_journal_utts(tmp_path / "ray" / "small_b2")) == sorted(read_data_dir(demo_subset).wav)


@pytest.mark.slow
def test_b4_under_ray_is_byte_identical_to_local(cluster, tmp_path, monkeypatch):
    """B4's torch models and per-utterance draws under Ray's one-thread actors: the bytes of a local run, whose
    driver runs the set's one batch itself (they differed in the last bits while it used all its threads)."""
    home = import_random_set(tmp_path / "home", "nac")
    monkeypatch.setenv("VOXANON_HOME", str(home))
    data = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=1.0)
    common = ["anonymise", "--system", "b4", "--data", str(data.path), "--quiet"]
    assert main(common + ["--out", str(tmp_path / "local"), "--workers", "1"]) == 0
    assert main(common + ["--out", str(tmp_path / "ray"), "--backend", "ray", "--ray-address", cluster.address,
                          "--workers", "2"]) == 0
    local, remote = _files(tmp_path / "local" / "toy_b4"), _files(tmp_path / "ray" / "toy_b4")
    assert len([name for name in remote if name.endswith(".wav")]) == 4 and remote == local


@pytest.mark.slow
def test_killed_driver_resumes_to_the_same_bytes(cluster, tmp_path):
    data = make_corpus(tmp_path, n_speakers=4, n_utts=10, seconds=2.0)
    reference = anonymise_set(data, load_system_config("b2"), tmp_path / "reference", progress=False)
    assert reference.ok
    out = tmp_path / "out" / "toy_b2"
    command = ["anonymise", "--system", "b2", "--data", str(data.path), "--out", str(tmp_path / "out"), "--quiet",
               "--backend", "ray", "--ray-address", cluster.address, "--workers", "1"]
    process = _cli(*command)
    _wait_for_journal(out, 3)
    process.send_signal(signal.SIGKILL)
    process.wait()
    done_before = len(_journal_utts(out))
    assert 3 <= done_before < 40, "the kill must land mid-run"
    assert not (out / "wav.scp").exists()

    assert main(command) == 0
    manifest = json.loads((out / RUN_MANIFEST).read_text())
    assert manifest["counts"]["resumed"] >= done_before and manifest["counts"]["failed"] == 0
    assert _files(out) == _files(tmp_path / "reference")
    assert not list(out.rglob("*.tmp"))


def _run_in_thread(data, out: Path, address: str, config: dict | None = None) -> dict:
    result = {}
    backend = RayBackend(RayOptions(address=address, workers=2))
    thread = threading.Thread(target=lambda: result.update(
        set=anonymise_set(data, config or load_system_config("b2"), out, progress=False, backend=backend)))
    thread.start()
    result["thread"] = thread
    return result


def _an_actor_process(cluster) -> int:
    """The pid of one of this cluster's actors: a child of a worker node's raylet."""
    for node in cluster.worker_nodes:
        raylet = node.all_processes["raylet"][0].process.pid
        found = subprocess.run(["pgrep", "-P", str(raylet), "-f", "ray::_Worker"], capture_output=True,
                               text=True).stdout.split()
        if found:
            return int(found[0])
    raise AssertionError("no actor process found")


def _kill_an_actor_mid_run(cluster, data, tmp_path: Path, name: str, after: int, expected: int, timeout: float,
                           config: dict | None = None) -> None:
    """Kill one actor's process once ``after`` utterances are journaled: the run still ends with every one of
    the ``expected`` utterances written once, as in ``tmp_path / "reference"``."""
    run = _run_in_thread(data, tmp_path / name, cluster.address, config)
    _wait_for_journal(tmp_path / name, after)
    os.kill(_an_actor_process(cluster), signal.SIGKILL)
    killed_at = len(_journal_utts(tmp_path / name))
    run["thread"].join(timeout)
    assert not run["thread"].is_alive()
    assert killed_at < expected, "the kill must land mid-run"
    assert run["set"].ok and run["set"].processed == expected
    _check_complete(tmp_path / name, tmp_path / "reference", expected)


def _check_complete(out: Path, reference: Path, expected: int) -> None:
    utts = _journal_utts(out)
    assert len(utts) == len(set(utts)) == expected, "every utterance journaled exactly once"
    assert read_data_dir(out).validate() == []
    assert _files(out) == _files(reference)


@pytest.mark.slow
def test_a_lost_node_or_worker_process_loses_and_repeats_nothing(cluster, tmp_path):
    data = make_corpus(tmp_path, n_speakers=4, n_utts=8, seconds=2.0)
    assert anonymise_set(data, load_system_config("b2"), tmp_path / "reference", progress=False).ok

    # A whole node goes: its actor's batch goes to the other node's actor.
    run = _run_in_thread(data, tmp_path / "node", cluster.address)
    _wait_for_journal(tmp_path / "node", 3)
    cluster.remove_node(next(iter(cluster.worker_nodes)), allow_graceful=False)
    removed_at = len(_journal_utts(tmp_path / "node"))
    try:
        run["thread"].join(120)
        assert not run["thread"].is_alive()
    finally:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
    assert removed_at < 32, "the node must go mid-run"
    assert run["set"].ok and run["set"].processed == 32
    _check_complete(tmp_path / "node", tmp_path / "reference", 32)

    # A worker process is killed: its actor restarts in place, the batch is redone elsewhere.
    _kill_an_actor_mid_run(cluster, data, tmp_path, "process", 3, 32, 120)


def test_a_corrupt_file_is_a_failure_and_the_rest_finish(cluster, tmp_path):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=3)
    broken = sorted(data.wav)[1]
    Path(data.wav[broken]).write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really audio")
    code = main(["anonymise", "--system", "b2", "--data", str(data.path), "--out", str(tmp_path / "out"), "--quiet",
                 "--backend", "ray", "--ray-address", cluster.address, "--workers", "2"])
    assert code == 1
    out = tmp_path / "out" / "toy_b2"
    rows = [line.split("\t") for line in (out / FAILURES).read_text().splitlines()[1:]]
    assert [(row[0], row[1]) for row in rows] == [(broken, "load")]
    assert sorted(_journal_utts(out)) == sorted(set(data.wav) - {broken})
    assert json.loads((out / RUN_MANIFEST).read_text())["status"] == "failures"


@pytest.mark.slow
def test_evaluate_under_ray_gives_the_local_numbers(cluster, demo_subset, tmp_path):
    assert main(["anonymise", "--system", "b2", "--data", str(demo_subset), "--out", str(tmp_path / "anon"),
                 "--workers", "1", "--quiet"]) == 0
    common = ["evaluate", "--orig", str(demo_subset), "--anon", str(tmp_path / "anon" / "small_b2"),
              "--cache", "none", "--set", "asr=null"]
    assert main(common + ["--out", str(tmp_path / "local")]) == 0
    assert main(common + ["--out", str(tmp_path / "ray"), "--backend", "ray", "--ray-address", cluster.address,
                          "--workers", "1", "--batch-size", "16"]) == 0
    local = json.loads((tmp_path / "local" / "results.json").read_text())
    remote = json.loads((tmp_path / "ray" / "results.json").read_text())
    assert local and len(remote) == len(local)
    # Ray's actors compute the embeddings with their own thread count (one per reserved CPU), which changes the
    # order of torch's reductions: the embeddings, and every figure from them, agree to float rounding only.
    for ours, theirs in zip(local, remote):
        assert {k: v for k, v in theirs.items() if k != "value"} == {k: v for k, v in ours.items() if k != "value"}
        if isinstance(ours["value"], str):
            assert theirs["value"] == ours["value"]
        else:
            assert theirs["value"] == pytest.approx(ours["value"], rel=1e-4, abs=1e-5, nan_ok=True), ours


@pytest.mark.slow
def test_pool_build_under_ray_gives_the_local_vectors(cluster, tmp_path, monkeypatch):
    from voxanon.models.speakers.pseudo_speaker import load_pool

    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))    # actors get the driver's VOXANON_HOME
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    corpus = make_corpus(tmp_path, n_speakers=4, n_utts=2, seconds=0.5, name="poolsrc")
    common = ["pool", "build", "--data", str(corpus.path), "--cache", "none", "--batch-size", "2"]
    assert main(common + ["--out", str(tmp_path / "local")]) == 0
    assert main(common + ["--out", str(tmp_path / "ray"), "--backend", "ray", "--ray-address", cluster.address,
                          "--workers", "2"]) == 0
    local, remote = load_pool(tmp_path / "local"), load_pool(tmp_path / "ray")
    assert remote.utterances.ids == local.utterances.ids and len(local.utterances.ids) == 8
    assert np.array_equal(remote.utterances.matrix, local.utterances.matrix)
    assert np.array_equal(remote.global_vector, local.global_vector)


def test_an_unreachable_cluster_fails_at_once_claiming_nothing(tmp_path):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    started = time.time()
    process = _cli("anonymise", "--system", "b2", "--data", str(data.path), "--out", str(tmp_path / "out"),
                   "--backend", "ray", "--ray-address", "127.0.0.1:1")
    _, stderr = process.communicate(timeout=60)
    assert time.time() - started < 30
    assert process.returncode == 2
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "127.0.0.1:1" in lines[0] and "Ray cluster" in lines[0], stderr
    out = tmp_path / "out" / "toy_b2"
    assert not out.exists() or not list(out.rglob("*.wav")) and not (out / JOURNAL).exists()


def test_the_command_line_starts_without_ray():
    code = ("import sys; from voxanon.pipeline.cli import build_parser; build_parser(); "
            "sys.exit(1 if 'ray' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def _counting_worker(label: str):
    """A work function that says which actor process ran it and how often that process built one (counted
    in its environment: this function travels by value, without module state of its own)."""
    os.environ["VOXANON_TEST_BUILT"] = str(int(os.environ.get("VOXANON_TEST_BUILT", "0")) + 1)
    return lambda batch: [(os.getpid(), label, int(os.environ["VOXANON_TEST_BUILT"])) for _ in batch]


def test_one_actor_pool_serves_every_call_of_a_command(cluster, monkeypatch):
    """evaluate and benchmark call map_batches per set and side: the actors, and what they built, stay."""
    from functools import partial

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])   # the actors cannot import this test module
    backend = RayBackend(RayOptions(address=cluster.address, workers=2))
    batches = [[i] for i in range(6)]

    def run(label: str) -> list:
        return [r for _, results, error in backend.map_batches(partial(_counting_worker, label), batches)
                for r in results]
    try:
        first, again, other = run("asv"), run("asv"), run("asr")
    finally:
        backend.close()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    runs = first + again + other
    assert len({pid for pid, _, _ in runs}) <= 2, "no actor started for a later call"
    for pid in {pid for pid, _, _ in runs}:   # each work function built once per actor, for all its calls
        built = {label: {b for p, lab, b in runs if p == pid and lab == label} for label in ("asv", "asr")}
        assert all(len(values) <= 1 for values in built.values()), built


ON_CPU_DEVICE = [*ON_CPU, "--set", "batch_seconds=3"]


@pytest.mark.slow
def test_streaming_under_ray_gives_the_local_bytes(cluster, random_home, tmp_path, monkeypatch):
    """CPU actors load, prepare and write; a device actor runs the model stages, on the same planned batches."""
    monkeypatch.setenv("VOXANON_HOME", str(random_home))
    data = make_corpus(tmp_path, n_speakers=2, n_utts=4, seconds=0.6)
    common = ["anonymise", "--system", "resynth", "--data", str(data.path), "--quiet", *ON_CPU_DEVICE]
    assert main(common + ["--out", str(tmp_path / "local"), "--workers", "2"]) == 0
    assert main(common + ["--out", str(tmp_path / "ray"), "--backend", "ray", "--ray-address", cluster.address,
                          "--workers", "2"]) == 0
    assert _files(tmp_path / "ray" / "toy_resynth") == _files(tmp_path / "local" / "toy_resynth")
    executor = json.loads((tmp_path / "ray" / "toy_resynth" / RUN_MANIFEST).read_text())["executor"]
    assert executor["kind"] == "streaming" and executor["device_workers"] == 1 and executor["cpu_workers"] == 2
    assert executor["device_batches"] > 1


@pytest.mark.parametrize("case", [pytest.param("truncated", marks=pytest.mark.slow), pytest.param("truncated-streaming", marks=pytest.mark.slow),
                                  "cuda"])
def test_a_model_fault_under_ray_stops_once(case, cluster, random_home, tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    subprocess.run(["cp", "-r", str(random_home), str(home)], check=True)
    content = home / "models" / "ssl-sas" / "content.safetensors"
    if case.startswith("truncated"):
        content.write_bytes(content.read_bytes()[:content.stat().st_size // 2])
    monkeypatch.setenv("VOXANON_HOME", str(home))
    data = make_corpus(tmp_path, n_speakers=2, n_utts=3, seconds=0.5)
    extra = {"truncated": [], "truncated-streaming": ON_CPU_DEVICE, "cuda": ["--device", "cuda"]}[case]
    code = main(["anonymise", "--system", "resynth", "--data", str(data.path), "--out", str(tmp_path / "out"),
                 "--quiet", "--backend", "ray", "--ray-address", cluster.address, "--workers", "2", *extra])
    assert code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line or "FAILED" in line]
    words = ["has no GPU"] if case == "cuda" else ["content.safetensors", "stage 'content'"]
    assert len(errors) == 1 and all(word in errors[0] for word in words), errors
    out = tmp_path / "out" / "toy_resynth"
    assert not list(out.rglob("*.wav")) and not (out / FAILURES).exists()


@pytest.mark.slow
def test_a_lost_actor_under_streaming_loses_and_repeats_nothing(cluster, random_home, tmp_path, monkeypatch):
    """A killed actor (CPU or device) loses its task: the batch is tried again from its start, on the same
    planned members, so the bytes are those of the local streaming executor."""
    monkeypatch.setenv("VOXANON_HOME", str(random_home))
    data = make_corpus(tmp_path, n_speakers=4, n_utts=6, seconds=0.6)
    config = load_system_config("resynth", [item for item in ON_CPU_DEVICE if item != "--set"])
    assert anonymise_set(data, config, tmp_path / "reference", workers=2, progress=False).ok
    _kill_an_actor_mid_run(cluster, data, tmp_path, "ray", 2, 24, 180, config)
