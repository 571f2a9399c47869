"""A fault of the whole run (no CUDA device, a broken model set, out of memory) stops it once, with one
message and exit code 2, and writes no per-utterance failure, whatever the set size, worker count or
executor; the random-weights warning is printed once per run. (Under Ray: tests/execution/test_ray_backend.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.corpora import make_corpus
from voxanon.pipeline.cli import main
from voxanon.pipeline.runner import FAILURES, JOURNAL, RUN_MANIFEST, anonymise_set
from voxanon.pipeline.systems.stage import RunFault, Stage
from voxanon.pipeline.systems.recipes import STAGES, load_system_config
from tests.helpers.device_checks import ON_CPU


@pytest.fixture
def broken_home(random_home, tmp_path, monkeypatch):
    """A copy of the random set with its content weights cut in half, as a partial copy leaves them."""
    home = tmp_path / "broken-home"
    subprocess.run(["cp", "-r", str(random_home), str(home)], check=True)
    content = home / "models" / "ssl-sas" / "content.safetensors"
    content.write_bytes(content.read_bytes()[:content.stat().st_size // 2])
    monkeypatch.setenv("VOXANON_HOME", str(home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return home


def _cli(*args: str, **environment: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "voxanon.pipeline.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **environment}, timeout=300)


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ": error: " in line or "FAILED" in line or "Traceback" in line]


def _check_stopped_cleanly(out: Path, stderr: str, *words: str) -> None:
    """Exit code 2 checked by the caller; here: one error line naming ``words``, no utterance failed or
    written, and run.json saying why the run stopped."""
    errors = _errors(stderr)
    assert len(errors) == 1 and all(word in errors[0] for word in words), stderr
    assert not list(out.rglob("*.wav")) and not (out / FAILURES).exists()
    assert not (out / JOURNAL).exists() or not (out / JOURNAL).read_text()
    manifest = json.loads((out / RUN_MANIFEST).read_text())
    assert manifest["status"] == "failed" and all(word in manifest["error"] for word in words)


@pytest.mark.parametrize("executor, workers", [
    ("pool", 1), pytest.param("auto", 2, marks=pytest.mark.slow), pytest.param("pool", 2, marks=pytest.mark.slow)])
def test_cuda_on_a_machine_without_it_stops_once(executor, workers, random_home, tmp_path):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=3, seconds=0.5)
    run = _cli("anonymise", "--system", "resynth", "--data", str(data.path), "--out", str(tmp_path / "out"),
               "--quiet", "--device", "cuda", "--executor", executor, "--workers", str(workers),
               VOXANON_HOME=str(random_home), CUDA_VISIBLE_DEVICES="")
    assert run.returncode == 2, run.stderr
    errors = _errors(run.stderr)
    assert len(errors) == 1 and "'cuda'" in errors[0] and "no CUDA device" in errors[0], run.stderr
    out = tmp_path / "out" / "toy_resynth"
    assert not list(out.rglob("*.wav")) and not (out / FAILURES).exists()
    if executor == "auto":   # the streaming executor: its device process found it, before any work
        _check_stopped_cleanly(out, run.stderr, "no CUDA device")


@pytest.mark.parametrize("utterances, workers, executor", [
    (1, 1, "pool"), (2, 1, "pool"), (2, 2, "pool"), (6, 1, "pool"), pytest.param(6, 2, "pool", marks=pytest.mark.slow),
    (2, 2, "streaming"), pytest.param(6, 1, "streaming", marks=pytest.mark.slow)])
def test_a_truncated_model_set_stops_once_whatever_the_set_size(utterances, workers, executor, broken_home,
                                                                 tmp_path, capsys):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=utterances, seconds=0.5)
    code = main(["anonymise", "--system", "resynth", "--data", str(data.path), "--out", str(tmp_path / "out"),
                 "--quiet", "--workers", str(workers), "--executor", executor,
                 *(ON_CPU if executor == "streaming" else [])])
    assert code == 2
    _check_stopped_cleanly(tmp_path / "out" / "toy_resynth", capsys.readouterr().err, "content.safetensors",
                           "stage 'content'")


class _OutOfMemory(Stage):
    """A device that runs out of memory at its first batch (torch's own error type)."""
    name = "out_of_memory"

    def process_batch(self, batch):
        import torch

        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


@pytest.mark.parametrize("workers", [1, 2])
def test_out_of_memory_at_the_first_batch_stops_once(workers, tmp_path, monkeypatch):
    monkeypatch.setitem(STAGES, "out_of_memory", _OutOfMemory)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    data = make_corpus(tmp_path, n_speakers=2, n_utts=4, seconds=0.3)
    config = {**load_system_config("b2"), "name": "oom", "stages": ["mcadams", "out_of_memory"]}
    with pytest.raises(RunFault, match=r"stage 'out_of_memory', on a batch of \d utterance.*OutOfMemoryError: "
                                       r"CUDA out of memory.*batch_seconds"):
        anonymise_set(data, config, tmp_path / "out", workers=workers, progress=False)
    assert not list((tmp_path / "out").rglob("*.wav")) and not (tmp_path / "out" / FAILURES).exists()
    assert json.loads((tmp_path / "out" / RUN_MANIFEST).read_text())["status"] == "failed"


@pytest.mark.parametrize("executor", [pytest.param("streaming", marks=pytest.mark.slow), "pool"])
def test_the_random_weights_warning_is_printed_once_per_run(executor, random_home, tmp_path):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=3, seconds=0.5)
    run = _cli("anonymise", "--system", "resynth", "--data", str(data.path), "--out", str(tmp_path / "out"),
               "--quiet", "--workers", "2", "--executor", executor, *(ON_CPU if executor == "streaming" else []),
               VOXANON_HOME=str(random_home))
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("HAS RANDOM WEIGHTS") == 1, run.stderr


def test_models_check_names_a_truncated_file_whose_checksum_was_recomputed(broken_home, capsys):
    """Issue 29 item 10: not a SafetensorError traceback, but the file, in the check's report."""
    from voxanon.data_prep.digest import sha256_file
    from voxanon.models.checkpoints.registry import MANIFEST

    folder = broken_home / "models" / "ssl-sas"
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"]["content.safetensors"] = sha256_file(folder / "content.safetensors")
    (folder / MANIFEST).write_text(json.dumps(manifest))
    code = main(["models", "check", "ssl-sas"])
    out = capsys.readouterr().out
    assert code == 1 and "content.safetensors: not a readable safetensors file" in out
