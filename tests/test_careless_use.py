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


def test_metrics_say_when_a_figure_is_degenerate(tmp_path, capsys):
    """Item 13: equal scores read as perfect discrimination (min Cllr 0), and linkability under 20 targets is 0
    whatever the scores; each is said."""
    trials, scores = _metrics_inputs(tmp_path, [0.5] * 25, [0.5] * 25)
    assert main(["metrics", "--trials", str(trials), "--scores", str(scores)]) == 0
    report = capsys.readouterr().out
    assert "Cllr (min/act): 0.000" in report and "every score is the same" in report
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
