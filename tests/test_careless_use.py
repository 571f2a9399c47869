"""Issue 29: what a careless or hostile user can do to a run, and what the run does about it: changed inputs
redone, output sets that never collide nor escape, bounded resources, one line and exit 2 for every fault."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.corpus import DataDirError, read_data_dir
from voxanon.pipeline import runner
from voxanon.pipeline.execution import pool, workers
from voxanon.pipeline.cli import main
from voxanon.pipeline.runner import JOURNAL, RUN_MANIFEST, anonymise_set
from voxanon.pipeline.systems.recipes import load_system_config


def _anonymise(data_path: Path, *options: str) -> int:
    return main(["anonymise", "--system", "b2", "--data", str(data_path), "--workers", "1", "--quiet", *options])


def _md5s(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "wav").glob("*.wav"))}


@pytest.mark.parametrize("digest", [False, True])
def test_a_changed_input_is_redone_on_resume(digest, tmp_path):
    """Item 1: a replaced input file is redone, not resumed from its old output."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    options = ["--out", str(tmp_path / "out")] + (["--input-digest"] if digest else [])
    assert _anonymise(data.path, *options) == 0
    out_dir = tmp_path / "out" / "toy_b2"
    before = _md5s(out_dir)
    # Another recording, of another length, in place of the first input.
    shutil.copyfile(data.wav["spk0-001"], data.wav["spk0-000"])
    assert _anonymise(data.path, *options) == 0
    after = _md5s(out_dir)
    assert after["spk0-000.wav"] != before["spk0-000.wav"] and after["spk0-001.wav"] == before["spk0-001.wav"]
    assert soundfile.info(out_dir / "wav" / "spk0-000.wav").frames == soundfile.info(data.wav["spk0-001"]).frames
    manifest = json.loads((out_dir / RUN_MANIFEST).read_text())
    assert manifest["counts"]["processed"] == 1 and manifest["counts"]["resumed"] == 1
    entry = json.loads((out_dir / JOURNAL).read_text().splitlines()[-1])
    assert entry["input"]["size"] == os.path.getsize(data.wav["spk0-000"])
    assert ("sha256" in entry["input"]) == digest


def test_the_input_digest_resumes_a_touched_input_whose_content_is_the_same(tmp_path):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    first = anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False, input_digest=True)
    os.utime(data.wav["spk0-000"], ns=(1, 1))
    again = anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False, input_digest=True)
    plain = anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False)
    assert (first.processed, again.processed, again.resumed) == (2, 0, 2)
    assert (plain.processed, plain.resumed) == (1, 1), "without the digest, the modification time is compared"


def test_the_input_digest_redoes_lines_made_without_it(tmp_path):
    """Issue 37: a set first made without --input-digest has no digest in its journal; a run with it cannot tell
    a same-size rewrite that kept the modification time from the input the line was made of, so it redoes every
    such line (the unchanged one to the same bytes) and records the digests, which the next run then trusts."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    out_dir = tmp_path / "out"
    first = anonymise_set(data, load_system_config("b2"), out_dir, progress=False)
    before = _md5s(out_dir)
    source = data.wav["spk0-000"]
    status = os.stat(source)
    samples, rate = soundfile.read(source, dtype="int16")
    soundfile.write(source, -samples // 2, rate, subtype="PCM_16")
    os.utime(source, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert os.path.getsize(source) == status.st_size
    again = anonymise_set(data, load_system_config("b2"), out_dir, progress=False, input_digest=True)
    after = _md5s(out_dir)
    assert (first.processed, again.processed, again.resumed) == (2, 2, 0)
    assert after["spk0-000.wav"] != before["spk0-000.wav"], "the rewritten input was redone"
    assert after["spk0-001.wav"] == before["spk0-001.wav"], "the unchanged one, redone, gives the same bytes"
    lines = [json.loads(line) for line in (out_dir / JOURNAL).read_text().splitlines()]
    assert all("sha256" in line["input"] for line in lines[-2:])
    third = anonymise_set(data, load_system_config("b2"), out_dir, progress=False, input_digest=True)
    assert (third.processed, third.resumed) == (0, 2)


@pytest.mark.parametrize("recorded, unconfirmed", [
    ({"size": 10, "mtime_ns": 5}, True),                    # made without --input-digest
    (None, True),                                           # a journal older than input records
    ({"size": 10, "mtime_ns": 5, "sha256": "ab"}, False),   # its digest is compared
    ({"command": "sox a.flac -t wav - |"}, False),          # a pipe's command is what is compared
])
def test_which_journal_lines_a_content_check_cannot_confirm(recorded, unconfirmed):
    from voxanon.data_prep.digest import unconfirmed_content

    current = {"command": "sox a.flac -t wav - |"} if recorded and "command" in recorded else \
        {"size": 10, "mtime_ns": 5, "sha256": "ab"}
    assert unconfirmed_content(recorded, current) is unconfirmed
    assert not unconfirmed_content(recorded, {"size": 10, "mtime_ns": 5}), "without --input-digest, as before"


def test_two_input_sets_of_one_name_are_refused_before_anything_runs(tmp_path, capsys):
    """Item 2."""
    first = make_corpus(tmp_path / "s1", n_speakers=1, n_utts=1, name="x")
    second = make_corpus(tmp_path / "s2", n_speakers=1, n_utts=1, name="x")
    code = main(["anonymise", "--system", "b2", "--data", str(first.path), "--data", str(second.path),
                 "--out", str(tmp_path / "out"), "--quiet"])
    error = capsys.readouterr().err
    assert code == 2 and str(first.path) in error and str(second.path) in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("suffix", ["", "/..", "/../../escaped", "_a/b", "_\x07"])
def test_a_suffix_that_is_not_one_folder_name_is_refused(suffix, tmp_path, capsys):
    """Item 3: the suffix never rewrites the input set, the corpus root, or a folder outside."""
    data = make_corpus(tmp_path / "corpus", n_speakers=1, n_utts=1)
    scp = (data.path / "wav.scp").read_bytes()
    assert _anonymise(data.path, "--suffix", suffix) == 2
    assert "error" in capsys.readouterr().err
    assert (data.path / "wav.scp").read_bytes() == scp
    assert sorted(p.name for p in (tmp_path / "corpus").iterdir()) == ["toy", "toy_audio"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_an_empty_suffix_with_another_out_folder_is_fine(tmp_path):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=1)
    assert _anonymise(data.path, "--suffix", "", "--out", str(tmp_path / "out")) == 0
    assert (tmp_path / "out" / "toy" / "wav.scp").is_file()


def test_workers_are_capped_by_the_machine_and_the_set(tmp_path, monkeypatch, caplog):
    """Item 4: a pool never gets more processes than utterances, nor than usable CPUs."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    sizes = []
    real_pool = pool.ProcessPoolExecutor

    def recording_pool(workers, **kwargs):
        sizes.append(workers)
        assert workers <= len(os.sched_getaffinity(0)), f"a pool of {workers} processes"  # never start them
        return real_pool(workers, **kwargs)

    monkeypatch.setattr(pool, "ProcessPoolExecutor", recording_pool)
    caplog.set_level("INFO")
    assert main(["anonymise", "--system", "b2", "--data", str(data.path), "--workers", "100000", "--quiet"]) == 0
    manifest = json.loads((tmp_path / "toy_b2" / RUN_MANIFEST).read_text())
    assert manifest["workers"] <= len(os.sched_getaffinity(0))
    assert all(size <= 2 for size in sizes)
    assert "--workers 100000" in caplog.text
    sizes.clear()
    result = anonymise_set(data, load_system_config("b2"), tmp_path / "capped", workers=8, progress=False)
    assert result.ok and sizes and all(size <= 2 for size in sizes), "no more processes than utterances"


def test_demo_refuses_fewer_than_one_worker_as_the_other_commands_do(tmp_path, capsys):
    # It used to run with one worker, silently.
    assert main(["demo", "--workers", "0", "--out", str(tmp_path / "demo")]) == 2
    assert "--workers must be at least 1, not 0" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()


def test_a_killed_runs_temporary_files_are_removed_by_the_next(tmp_path):
    """Item 6: kill -9 leaves atomic_path's temporaries behind; the next run into the set removes them."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    out_dir = tmp_path / "out"
    anonymise_set(data, load_system_config("b2"), out_dir, progress=False)
    stale = [out_dir / "wav" / ".awb-0001.wav.0123456789ab.wav.tmp", out_dir / ".run.json.a0b1c2d3e4f5.json.tmp"]
    for path in stale:
        path.write_bytes(b"partial")
    kept = out_dir / "wav" / "notes.tmp"    # not a name atomic_path gives: not ours to remove
    kept.write_bytes(b"user's")
    anonymise_set(data, load_system_config("b2"), out_dir, progress=False)
    assert not any(path.exists() for path in stale) and kept.exists()


@pytest.mark.parametrize("where", ["under_a_file", "read_only"])
def test_an_unwritable_out_folder_is_one_line_and_exit_2(where, tmp_path, capsys):
    """Item 7."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=1)
    if where == "under_a_file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "out"
    elif os.geteuid() == 0:   # root writes into read-only folders, not into /proc
        out = Path("/proc/voxanon-out")
    else:
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o555)
        out = tmp_path / "ro" / "out"
    assert _anonymise(data.path, "--out", str(out)) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1 and str(out.parent) in error


@pytest.mark.parametrize("data", ["missing", "a_file"])
def test_an_unusable_data_folder_is_one_line_naming_it(data, tmp_path, capsys):
    path = tmp_path / data
    if data == "a_file":
        path.write_text("x")
    assert _anonymise(path, "--out", str(tmp_path / "out")) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and f"{path}: not a folder" in error, error


@pytest.mark.parametrize("content, message", [(": : :", "not valid YAML"), ("- mcadams\n", "a recipe is a YAML mapping"),
                                              (None, "no such recipe file"), (b"\xff\xfe", "cannot read it")])
def test_a_bad_recipe_file_is_one_line_naming_it(content, message, tmp_path, capsys):
    recipe = tmp_path / "mine.yaml"
    if isinstance(content, str):
        recipe.write_text(content)
    elif content is not None:
        recipe.write_bytes(content)
    data = make_corpus(tmp_path, n_speakers=1, n_utts=1)
    assert main(["anonymise", "--system", str(recipe), "--data", str(data.path), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and f"{recipe}: {message}" in error and "--debug" not in error, error


@pytest.mark.parametrize("override", ["seed=abc", "max_seconds=abc", "mcadams=3", "mcadams.alpha=-0.5",
                                      "mcadams.alpha=abc", "mcadams.alpha=5", "mcadams.lp_order=0", "mcadams.win_ms=0",
                                      "seed=!!python/object/apply:os.getcwd []", "batch_size=0"])
def test_bad_option_values_are_refused_before_the_run(override, tmp_path, capsys):
    """Items 8 and 12: refused in one line with exit 2, before any utterance (no output set at all)."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=1)
    assert _anonymise(data.path, "--out", str(tmp_path / "out"), "--set", override) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1
    if override.startswith("mcadams."):  # a stage setting is named, whichever check refused its value
        assert override.split("=")[0].split(".")[1] in error, error
    assert not (tmp_path / "out").exists()


def test_an_unexpected_error_is_one_line_and_debug_shows_its_traceback(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    data = make_corpus(tmp_path, n_speakers=1, n_utts=1)
    monkeypatch.setattr(runner, "prepare_set", broken)
    assert _anonymise(data.path) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and "ZeroDivisionError: a bug" in error and "--debug" in error
    assert main(["--debug", "anonymise", "--system", "b2", "--data", str(data.path), "--quiet"]) == 2
    assert "Traceback" in capsys.readouterr().err
    assert _anonymise(data.path, "--debug") == 2
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("VOXANON_DEBUG", "1")
    assert _anonymise(data.path) == 2
    assert "Traceback" in capsys.readouterr().err


def test_the_output_set_of_a_run_with_failures_is_a_valid_input_set(tmp_path):
    """Item 14: a failed utterance leaves the metadata with its audio (it is in failures.tsv)."""
    data = make_corpus(tmp_path, n_speakers=2, n_utts=3)
    Path(data.wav["spk1-000"]).write_bytes(b"not audio")      # an enrolment utterance
    Path(data.wav["spk0-002"]).write_bytes(b"not audio")      # a trial
    assert _anonymise(data.path, "--out", str(tmp_path / "out")) == 1
    out = read_data_dir(tmp_path / "out" / "toy_b2")
    assert out.validate() == []
    assert "spk0-002" not in out.utt2spk and "spk1-000" not in out.enrolls
    assert all(trial.enrol_speaker != "spk1" and trial.test_utt != "spk0-002" for trial in out.trials)
    assert _anonymise(out.path, "--out", str(tmp_path / "again")) == 0


@pytest.mark.parametrize("fault, status", [(KeyboardInterrupt(), "interrupted"), (RuntimeError("boom"), "failed")])
def test_run_json_says_how_a_run_stopped(fault, status, tmp_path, monkeypatch):
    """Item 15."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)

    def stopped(*args, **kwargs):
        raise fault

    monkeypatch.setattr(runner, "_journal_outcomes", stopped)
    with pytest.raises(type(fault)):
        anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False)
    manifest = json.loads((tmp_path / "out" / RUN_MANIFEST).read_text())
    assert manifest["status"] == status and manifest["error"]
    assert "boom" in manifest["error"] or status == "interrupted"


def test_a_long_input_is_refused_from_its_header_before_it_is_decoded(tmp_path, monkeypatch):
    """Item 5: the file's length comes from its header; its samples are never read."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=1)
    soundfile.write(data.wav["spk0-000"], np.full(16000 * 3, 0.1, dtype=np.float32), 16000)
    reads = []
    real_read = soundfile.read
    monkeypatch.setattr(soundfile, "read", lambda *args, **kwargs: reads.append(args) or real_read(*args, **kwargs))
    result = anonymise_set(data, load_system_config("b2", ["max_seconds=2"]), tmp_path / "out", progress=False)
    assert [(f.failed_stage, f.error.split(":")[0]) for f in result.failures] == [("load", "too long")]
    assert reads == []


def test_a_one_sample_input_is_a_failure_not_a_silent_output(tmp_path):
    """Item 16."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    soundfile.write(data.wav["spk0-000"], np.array([0.5], dtype=np.float32), 16000)
    result = anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False)
    assert [(f.utt, f.error.split(":")[0]) for f in result.failures] == [("spk0-000", "too short")]
    assert not (tmp_path / "out" / "wav" / "spk0-000.wav").exists()


def _long_wav(path: Path, minutes: float, last_sample: int) -> Path:
    """``minutes`` of zeros at 16 kHz whose last sample is ``last_sample``, written in blocks."""
    with soundfile.SoundFile(path, "w", 16000, 1, subtype="PCM_16") as out:
        for _ in range(int(minutes * 60)):
            out.write(np.zeros(16000, dtype=np.int16))
        out.write(np.array([last_sample], dtype=np.int16))
    return path


def test_check_audio_decodes_a_long_file_in_blocks(tmp_path):
    """Issue 37: ``validate --check-audio`` decoded each file whole (a 10-hour one took 2.9 GB); it reads blocks of
    CHECK_BLOCK_FRAMES, so memory stays that of a block, and still finds the one audible sample at the very end."""
    import tracemalloc

    from voxanon.data_prep.audio import CHECK_BLOCK_FRAMES, AudioError, check_audio

    ten_minutes = _long_wav(tmp_path / "long.wav", 10, last_sample=1000)
    tracemalloc.start()
    try:
        check_audio(ten_minutes, 16000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 4 * CHECK_BLOCK_FRAMES < 4 * 16000 * 600 / 10, f"{peak / 1e6:.1f} MB for a 38 MB decode"
    with pytest.raises(AudioError, match="silent"):
        check_audio(_long_wav(tmp_path / "silent.wav", 1, last_sample=0), 16000)


def test_validate_flags_what_anonymise_would_fail(tmp_path, capsys):
    """Issue 37: a file under 25 ms (one analysis frame) and, with --system, one longer than its max_seconds (from
    the header) are flagged, each naming its utterance and file; one at another rate is measured at the system's."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=4)
    soundfile.write(data.wav["spk0-000"], np.full(160, 0.1, dtype=np.float32), 16000)       # 10 ms
    soundfile.write(data.wav["spk0-001"], np.full(1103, 0.1, dtype=np.float32), 44100)      # 25.01 ms: 400 at 16 kHz
    soundfile.write(data.wav["spk0-002"], np.full(16000 * 3, 0.1, dtype=np.float32), 16000)
    assert main(["validate", str(data.path), "--check-audio", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "'spk0-000'" in out and data.wav["spk0-000"] in out and "too short: 160 samples at 16000 Hz" in out
    assert "spk0-001" not in out and "1 problem(s)" in out
    assert main(["validate", str(data.path), "--check-audio", "--quiet", "--system",
                 str(_recipe_with_max_seconds(tmp_path, 2))]) == 1
    out = capsys.readouterr().out
    assert "'spk0-002'" in out and "too long: 3.0 s, the maximum is 2 s" in out and "2 problem(s)" in out
    result = anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False)
    assert [f.utt for f in result.failures] == ["spk0-000"], "validate flags what anonymise fails, no more"


def _recipe_with_max_seconds(folder: Path, seconds: float) -> Path:
    recipe = folder / "short_b2.yaml"
    text = (Path(runner.__file__).parent.parent / "recipes" / "systems" / "b2.yaml").read_text()
    recipe.write_text(text.replace("max_seconds: 120", f"max_seconds: {seconds}"))
    return recipe


def test_resampled_length_is_the_resamplers():
    import soxr

    from voxanon.data_prep.audio import resampled_length

    for source_rate, rate in [(44100, 16000), (16000, 24000), (8000, 16000), (48000, 16000), (22050, 24000)]:
        for frames in [1, 2, 3, 15, 43, 1102, 1103, 4410, 100_001]:
            got = len(soxr.resample(np.ones(frames, dtype=np.float32), source_rate, rate, quality="HQ"))
            assert resampled_length(frames, source_rate, rate) == got, (source_rate, rate, frames)


def test_a_line_separator_in_an_id_is_refused_not_read_as_a_space(tmp_path):
    """Item 16: U+2028 is white space to str.split(), not to Kaldi."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=1)
    scp = data.path / "wav.scp"
    scp.write_text(scp.read_text().replace("spk0-000 ", "spk0\u2028x ", 1), encoding="utf-8")
    with pytest.raises(DataDirError, match="U\\+2028"):
        read_data_dir(data.path)


def test_a_folder_in_wav_scp_is_named_as_a_folder(tmp_path):
    """Item 16."""
    data = make_corpus(tmp_path, n_speakers=1, n_utts=1)
    Path(data.wav["spk0-000"]).unlink()
    Path(data.wav["spk0-000"]).mkdir()
    assert any("is a folder" in problem for problem in read_data_dir(data.path).validate())
    result = anonymise_set(data, load_system_config("b2"), tmp_path / "out", progress=False)
    assert "is a folder" in result.failures[0].error


def _ctrl_c_ignored() -> bool:
    import signal

    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_worker_processes_leave_ctrl_c_to_the_run(method):
    """Item 11: the terminal's SIGINT reaches every process of the run; only the parent acts on it (a streaming
    run's forked workers each printed a KeyboardInterrupt traceback before "interrupted")."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    initializer, initargs = ((workers.die_with_parent, ()) if method == "fork"
                             else (workers.init_spawned_worker, (load_system_config("b2"), False)))
    with ProcessPoolExecutor(1, mp_context=get_context(method), initializer=initializer, initargs=initargs) as pool:
        assert pool.submit(_ctrl_c_ignored).result()


def test_evaluate_names_an_unknown_enrolment_speaker(tmp_path, capsys, monkeypatch):
    """Item 16: a trial whose enrolment speaker has no enrolment utterance is named, not left out silently."""
    data = make_corpus(tmp_path / "vpc", n_speakers=2, n_utts=2, name="dev_enrolls")
    trials_dir = make_corpus(tmp_path / "vpc", n_speakers=2, n_utts=2, name="dev_trials_f").path
    with (trials_dir / "trials").open("a") as handle:
        handle.write("ghost spk0-001 nontarget\n")
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    code = main(["evaluate", "--orig", str(data.path.parent), "--anon", str(tmp_path / "vpc"), "--suffix", "_b2",
                 "--out", str(tmp_path / "eval"), "--quiet"])
    error = capsys.readouterr().err
    assert code == 2 and "'ghost'" in error and str(data.path / "enrolls") in error


_DRIVER = """
import subprocess, sys, time
from voxanon.pipeline.execution.orphan_reaper import start_reaper
# As a local Ray instance: a server the driver starts, which starts an agent of its own, and dies with the driver.
server = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                           "agent = subprocess.Popen(['sleep', '300']); print(agent.pid, flush=True); time.sleep(300)"],
                          stdout=subprocess.PIPE, text=True)
agent = server.stdout.readline().strip()
start_reaper()
time.sleep(1.5)   # the reaper has seen the tree
print(server.pid, agent, flush=True)
time.sleep(300)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_drivers_local_processes_end_within_seconds(tmp_path):
    """Item 6: kill -9 of a command that started a local Ray instance leaves its agents and workers running (the
    raylet dies with it, they wait minutes for it); the reaper started beside it ends them."""
    import signal
    import subprocess
    import sys
    import time

    driver = subprocess.Popen([sys.executable, "-c", _DRIVER], stdout=subprocess.PIPE, text=True)
    server, agent = map(int, driver.stdout.readline().split())
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(map(_running, (server, agent))):
        time.sleep(0.2)
    alive = [pid for pid in (server, agent) if _running(pid)]
    for pid in alive:   # not to leave them if the test fails
        os.kill(pid, signal.SIGKILL)
    assert alive == []


def _metrics_inputs(tmp_path: Path, tar: list[float], non: list[float]) -> tuple[Path, Path]:
    trials, scores = tmp_path / "trials", tmp_path / "scores"
    rows = [(f"t{k}", "target", s) for k, s in enumerate(tar)] + [(f"n{k}", "nontarget", s) for k, s in enumerate(non)]
    trials.write_text("".join(f"spk {utt} {kind}\n" for utt, kind, _ in rows))
    scores.write_text("".join(f"spk {utt} {float(score)!r}\n" for utt, _, score in rows))
    return trials, scores


def test_metrics_of_an_empty_score_file_is_one_line(tmp_path, capsys):
    """Item 9."""
    trials, scores = _metrics_inputs(tmp_path, [1.0], [0.0])
    scores.write_text("")
    assert main(["metrics", "--trials", str(trials), "--scores", str(scores)]) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and "have no score" in error


def test_metrics_of_scores_near_the_float64_limit(tmp_path, capsys):
    """Item 9: ±1e308 overflowed the linkability histogram's range."""
    trials, scores = _metrics_inputs(tmp_path, [1e308] * 30, [-1e308] * 30)
    assert main(["metrics", "--trials", str(trials), "--scores", str(scores), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    from voxanon.eval.linkability import linkability

    # D_sys does not depend on the scores' scale: as for ±1 (on 3 bins: the trapezoid gives the top one half).
    assert metrics["linkability"] == pytest.approx(linkability(np.ones(30), -np.ones(30))) and metrics["eer_rocch"] == 0.0


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("extreme", [1e308, 1e-320])
def test_metrics_of_extreme_scores_warn_nothing_and_are_right(tmp_path, capsys, extreme):
    """Issue 37: ±1e308 leaked 'eval/eer.py:74: RuntimeWarning: overflow encountered in cast' (and the Cllr's
    sum overflowed to inf), ±1e-320 the histogram's 'overflow encountered in divide'. Now: no warning, the
    figures of any other scale (EERs, min Cllr, linkability and ZEBRA do not depend on it), Kaldi's float32 ties
    noted, and Cllr from the scores as LLRs."""
    rng = np.random.default_rng(0)
    # Hundredths: the ±1e-320 scores keep them apart (subnormals are spaced 5e-324); |score| < 1.8e308.
    tar, non = rng.integers(-50, 170, 40) / 100, rng.integers(-170, 50, 60) / 100
    trials, scores = _metrics_inputs(tmp_path, list(tar * extreme), list(non * extreme))
    assert main(["metrics", "--trials", str(trials), "--scores", str(scores), "--json"]) == 0
    captured = capsys.readouterr()
    assert "Warning" not in captured.err
    metrics = json.loads(captured.out)
    from voxanon.eval.summary import compute_metrics

    unit = compute_metrics(tar, non)
    for key in ("eer_rocch", "eer_speechbrain", "eer_sweep", "min_cllr", "zebra_dece", "zebra_worst_case"):
        assert metrics[key] == pytest.approx(unit[key], abs=1e-12), key
    # The same histogram, but for scores that the scaling's rounding moves across a bin edge.
    assert metrics["linkability"] == pytest.approx(unit["linkability"], abs=0.05) and metrics["linkability"] > 0.2
    assert "float32" in metrics["notes"]["eer_kaldi"]  # ±inf or 0 in Kaldi's comparisons
    # As LLRs: ±1e-320 is no evidence (ln 2 nats a trial, 1 bit); at ±1e308 a trial costs its wrong-signed LLR.
    expected_cllr = 1.0 if extreme < 1 else extreme * (np.maximum(-tar, 0).mean() + np.maximum(non, 0).mean()) / (
        2 * np.log(2))
    assert metrics["cllr"] == pytest.approx(expected_cllr, rel=1e-9)


def test_metrics_of_llrs_whose_cllr_exceeds_float64_are_one_line(tmp_path, capsys):
    """Every target at -1.7e308 and every non-target at +1.7e308: as natural-log LLRs their Cllr (2.5e308 bits)
    is beyond the largest float64; refused naming the file, not printed as inf (nor JSON's 'Infinity')."""
    trials, scores = _metrics_inputs(tmp_path, [-1.7e308] * 3, [1.7e308] * 3)
    assert main(["metrics", "--trials", str(trials), "--scores", str(scores), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and str(scores) in captured.err and "Cllr" in captured.err


def test_metrics_say_when_a_figure_is_degenerate(tmp_path, capsys):
    """Item 13: equal scores read as perfect discrimination (min Cllr 0), and linkability under 20 targets is 0
    whatever the scores; each is said."""
    trials, scores = _metrics_inputs(tmp_path, [0.5] * 25, [0.5] * 25)
    assert main(["metrics", "--trials", str(trials), "--scores", str(scores)]) == 0
    report = capsys.readouterr().out
    assert "Cllr (min/act): 1.000" in report and "every score is the same" in report
    trials, scores = _metrics_inputs(tmp_path, [5.0, 6.0, 7.0], [-5.0, -6.0, -7.0])
    assert main(["metrics", "--trials", str(trials), "--scores", str(scores), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["linkability"] == 0.0 and "fewer than 20" in metrics["notes"]["linkability"]
    trials, scores = _metrics_inputs(tmp_path, list(np.linspace(1, 2, 30)), list(np.linspace(-2, -1, 30)))
    assert main(["metrics", "--trials", str(trials), "--scores", str(scores), "--json"]) == 0
    assert "notes" not in json.loads(capsys.readouterr().out), "no note where nothing is degenerate"


def test_metrics_plot_into_an_unwritable_folder_fails_before_computing(tmp_path, capsys, monkeypatch):
    """Item 7."""
    from voxanon.eval import summary

    trials, scores = _metrics_inputs(tmp_path, [1.0, 2.0], [0.0, -1.0])
    monkeypatch.setattr(summary, "compute_metrics", lambda *a, **k: pytest.fail("computed before the check"))
    assert main(["metrics", "--trials", str(trials), "--scores", str(scores), "--plot", str(trials / "plots")]) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and "--plot" in error and str(trials) in error


def test_evaluate_checks_its_out_folder_before_any_work(tmp_path, capsys):
    """Item 7: evaluate wrote its outputs only after computing everything, and failed there with a traceback."""
    (tmp_path / "file").write_text("x")
    code = main(["evaluate", "--orig", str(tmp_path / "nowhere"), "--anon", str(tmp_path / "nowhere"),
                 "--out", str(tmp_path / "file" / "evaluation"), "--quiet"])
    error = capsys.readouterr().err
    assert code == 2 and "--out" in error and "Traceback" not in error and "nowhere" not in error
