"""One run at a time per output set: a second run fails at once naming the first; a dead run's lock is taken over."""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.run_lock import LOCK_NAME, RunLockedError, process_alive, process_start, run_lock
from voxanon.pipeline.cli import main
from voxanon.pipeline.runner import JOURNAL, anonymise_set
from voxanon.pipeline.systems.recipes import load_system_config

HOLDER = """
import sys, time
from voxanon.data_prep.run_lock import run_lock
with run_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(60)
"""


def _hold_lock(folder: Path) -> subprocess.Popen:
    """A separate process holding the run lock of ``folder`` (once this returns)."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "locked"
    return process


@pytest.fixture
def holder():
    processes = []

    def start(folder: Path) -> subprocess.Popen:
        processes.append(_hold_lock(folder))
        return processes[-1]

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_a_second_run_fails_at_once_naming_the_first(tmp_path, holder, capsys):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.3)
    out_dir = tmp_path / "out" / "toy_b2"
    first = holder(out_dir)
    host = socket.gethostname()

    started = time.monotonic()
    code = main(["anonymise", "--system", "b2", "--data", str(data.path), "--out", str(tmp_path / "out"),
                 "--workers", "1", "--quiet"])
    assert time.monotonic() - started < 30, "the second run must not wait for the first"
    err = capsys.readouterr().err
    assert code == 2
    assert f"PID {first.pid} on host {host}" in err and "is writing this output set" in err
    assert not (out_dir / JOURNAL).exists() and not list(out_dir.rglob("*.wav"))

    first.kill()
    first.wait()
    assert main(["anonymise", "--system", "b2", "--data", str(data.path), "--out", str(tmp_path / "out"),
                 "--workers", "1", "--quiet"]) == 0
    assert len((out_dir / JOURNAL).read_text().splitlines()) == 2


def test_the_stale_lock_of_a_killed_run_is_taken_over(tmp_path, holder, caplog):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.3)
    out_dir = tmp_path / "out" / "toy_b2"
    killed = holder(out_dir)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert json.loads((out_dir / LOCK_NAME).read_text())["pid"] == killed.pid   # its record is left behind

    with caplog.at_level(logging.WARNING):
        assert anonymise_set(data, load_system_config("b2"), out_dir, progress=False).ok
    assert f"taking over the stale lock of a run that is gone (PID {killed.pid}" in caplog.text
    assert (out_dir / LOCK_NAME).read_text() == ""   # released: the record is emptied, the file kept


def test_the_record_decides_where_file_locks_are_not_held(tmp_path, holder):
    """A record naming a live process of this host refuses even when no flock is held (file systems
    without working flock); a record naming a dead process is stale."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with run_lock(tmp_path / "probe"):
            record = json.loads((tmp_path / "probe" / LOCK_NAME).read_text())
        folder = tmp_path / "set"
        folder.mkdir()
        live = {**record, "pid": sleeper.pid, "process_start": process_start(sleeper.pid)}
        (folder / LOCK_NAME).write_text(json.dumps(live))
        with pytest.raises(RunLockedError, match=f"PID {sleeper.pid} on host {socket.gethostname()}"):
            with run_lock(folder):
                pass
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not process_alive(sleeper.pid, live["process_start"])
    with run_lock(folder):
        assert json.loads((folder / LOCK_NAME).read_text())["pid"] == os.getpid()


def test_a_reused_pid_is_not_taken_for_the_run(tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    parent = os.getppid()
    (folder / LOCK_NAME).write_text(json.dumps({"pid": parent, "host": socket.gethostname(),
                                                "process_start": "1", "started": "long ago"}))
    with run_lock(folder):
        pass
