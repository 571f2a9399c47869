"""Stage plugins: the worked example of docs/api.md (examples/) runs under the worker pool, the streaming executor's
device process (``cpu:0``) and Ray with the same bytes, resumes after a kill, equals ``load_system`` on one waveform;
an entry-point stage is listed and runs; a plugin that cannot be imported, is not a stage or fails to load its models
stops the command in one line, exit 2, before any utterance."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

import voxanon
from voxanon.data_prep.corpus import read_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.pipeline.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
RECIPE = EXAMPLES / "pitch.yaml"
RUN_RECORDS = {"run.json", ".journal.jsonl", ".lock"}


def _files(out_dir: Path) -> dict[str, bytes]:
    """Every output file but the run's own records, by path relative to the set."""
    return {str(p.relative_to(out_dir)): p.read_bytes() for p in sorted(out_dir.rglob("*"))
            if p.is_file() and p.name not in RUN_RECORDS}


def _cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "voxanon.pipeline.cli", *args], env=env or dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / "docs" / "api.md").read_text(encoding="utf-8"), re.S)


def test_the_docs_show_the_example_as_it_is_in_examples():
    assert (EXAMPLES / "pitch_shift.py").read_text() in _code_blocks("python")
    assert (EXAMPLES / "pitch.yaml").read_text() in _code_blocks("yaml")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    """The example over the whole demo corpus (182 utterances) with two workers, uninterrupted."""
    out = tmp_path_factory.mktemp("pool")
    assert main(["anonymise", "--system", str(RECIPE), "--data", str(demo_corpus_dir()), "--out", str(out),
                 "--workers", "2", "--quiet"]) == 0
    return out / "corpus_pitch"


@pytest.mark.slow  # the executors' own tests hold this guarantee for every stage
def test_the_plugin_runs_alike_in_the_streaming_executor(toy_corpus, tmp_path):
    common = ["anonymise", "--system", str(RECIPE), "--data", str(toy_corpus.path), "--workers", "2", "--quiet"]
    assert main(common + ["--out", str(tmp_path / "pool")]) == 0
    assert main(common + ["--out", str(tmp_path / "streaming"), "--device", "cpu:0"]) == 0
    runs = {name: json.loads((tmp_path / name / "toy_pitch" / "run.json").read_text()) for name in ("pool", "streaming")}
    assert {name: run["executor"]["kind"] for name, run in runs.items()} == {"pool": "pool", "streaming": "streaming"}
    expected = _files(tmp_path / "pool" / "toy_pitch")
    assert len(expected) > 12 and _files(tmp_path / "streaming" / "toy_pitch") == expected
    record = json.loads((tmp_path / "pool" / "toy_pitch" / ".journal.jsonl").read_text().splitlines()[0])["record"]
    assert set(record) == {"semitones"} and abs(record["semitones"]) <= 4


@pytest.mark.slow  # the executors' own tests hold this guarantee for every stage
def test_the_plugin_resumes_after_a_kill(demo_run, tmp_path, capsys):
    common = ["anonymise", "--system", str(RECIPE), "--data", str(demo_corpus_dir()), "--workers", "2", "--quiet",
              "--out", str(tmp_path)]
    killed = _cli(*common)
    journal = tmp_path / "corpus_pitch" / ".journal.jsonl"
    while killed.poll() is None and not (journal.is_file() and journal.stat().st_size):
        pass
    killed.kill()
    killed.communicate()
    assert killed.returncode == -9, "the run ended before the kill"
    done = len(journal.read_text().splitlines())
    assert main(common) == 0
    assert re.search(r"182 utterances \((\d+) processed, (\d+) resumed\)", capsys.readouterr().err).group(2) == str(done)
    assert _files(tmp_path / "corpus_pitch") == _files(demo_run)


def test_load_system_on_the_plugin_equals_the_batch_files(demo_run, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from pitch_shift import PitchShift

    data = read_data_dir(demo_corpus_dir())
    by_file = voxanon.load_system(RECIPE)
    by_class = voxanon.load_system({"name": "pitch", "stochastic": True, "stages": [PitchShift]})
    for utt in data.utterances[::30]:
        audio, rate = soundfile.read(data.audio_path(utt), dtype="float32")
        expected = soundfile.read(demo_run / "wav" / f"{utt}.wav", dtype="float32")[0]
        for system in (by_file, by_class):
            np.testing.assert_array_equal(system(audio, rate, utt_id=utt, speaker=data.utt2spk[utt])[0], expected)


@pytest.mark.slow
def test_the_plugin_under_ray_gives_the_pool_bytes(demo_run, tmp_path):
    assert main(["anonymise", "--system", str(RECIPE), "--data", str(demo_corpus_dir()), "--out", str(tmp_path),
                 "--backend", "ray", "--workers", "2", "--quiet"]) == 0
    assert json.loads((tmp_path / "corpus_pitch" / "run.json").read_text())["backend"]["name"] == "ray"
    assert _files(tmp_path / "corpus_pitch") == _files(demo_run)


BROKEN_STAGE = '''
import voxanon


class Broken(voxanon.Stage):
    name = "broken"

    def load_models(self):
        raise RuntimeError("weights.pt is not there")

    def process(self, utt):
        pass
'''


@pytest.mark.parametrize("stage, parts", [
    ("no_such_module:Stage", ["system 'bad', stage 'no_such_module:Stage': cannot import module 'no_such_module' "
                              "(ModuleNotFoundError: No module named 'no_such_module')"]),
    ("broken_stage:Missing", ["system 'bad', stage 'broken_stage:Missing': module 'broken_stage' has no 'Missing'"]),
    ("os.path:join", ["system 'bad', stage 'os.path:join': <function join", "is not a stage"]),
    ("voxanon:Utterance", ["system 'bad', stage 'voxanon:Utterance': <class", "is not a stage"]),
    ("broken_stage:Broken", ["system 'bad', stage 'broken': cannot load its models: RuntimeError: weights.pt is not "
                             "there"]),
])
def test_a_bad_plugin_is_one_line_and_exit_2(stage, parts, toy_corpus, tmp_path, capsys):
    (tmp_path / "broken_stage.py").write_text(BROKEN_STAGE)
    (tmp_path / "bad.yaml").write_text(f"stages: [{stage}]\n")
    code = main(["anonymise", "--system", str(tmp_path / "bad.yaml"), "--data", str(toy_corpus.path), "--out",
                 str(tmp_path / "out"), "--workers", "2", "--quiet"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"voxanon anonymise: error: {parts[0]}"), lines[0]
    assert all(part in lines[0] for part in parts), lines[0]
    assert not list((tmp_path / "out").rglob("*.wav"))


def test_a_stage_without_process_or_name_is_not_a_stage(tmp_path, toy_corpus, capsys):
    (tmp_path / "half.py").write_text("import voxanon\n\nclass NoProcess(voxanon.Stage):\n    name = 'half'\n\n"
                                      "class NoName(voxanon.Stage):\n    def process(self, utt):\n        pass\n")
    for stage, message in (("half:NoProcess", "NoProcess is not a stage: it defines neither process(utt) nor "
                                              "process_batch(batch)"),
                           ("half:NoName", "NoName has no stage name")):
        (tmp_path / "half.yaml").write_text(f"stages: [{stage}]\n")
        assert main(["anonymise", "--system", str(tmp_path / "half.yaml"), "--data", str(toy_corpus.path),
                     "--out", str(tmp_path / "out"), "--quiet"]) == 2
        assert message in capsys.readouterr().err


def test_an_entry_point_stage_is_listed_and_runs(toy_corpus, tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    info = site / "voxplug-1.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: voxplug\nVersion: 1.2\n")
    (info / "entry_points.txt").write_text("[voxanon.stages]\nshift = pitch_shift:PitchShift\n")
    shutil.copy(EXAMPLES / "pitch_shift.py", site / "pitch_shift.py")
    monkeypatch.syspath_prepend(str(site))   # an installed distribution, as importlib.metadata finds them
    assert main(["systems"]) == 0
    assert "    shift: pitch_shift:PitchShift (from voxplug 1.2)" in capsys.readouterr().out.splitlines()
    (tmp_path / "recipe.yaml").write_text("stages: [shift]\npitch_shift: {max_semitones: 2}\n")
    assert main(["anonymise", "--system", str(tmp_path / "recipe.yaml"), "--data", str(toy_corpus.path), "--out",
                 str(tmp_path / "out"), "--quiet"]) == 0
    config = json.loads((tmp_path / "out" / "toy_recipe" / "run.json").read_text())["config"]
    assert config["stages"] == ["pitch_shift"] and config["plugins"] == {"pitch_shift": "pitch_shift:PitchShift"}


@pytest.mark.slow
def test_the_docs_example_runs_as_written(tmp_path):
    """The shell block of docs/api.md, as it is, in a folder holding examples/: anonymise, kill, resume, evaluate."""
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    script = "set -e\n" + _code_blocks("bash")[0]
    completed = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert re.search(r"182 utterances \(\d+ processed, [1-9]\d* resumed\)", completed.stderr), completed.stderr
    assert (tmp_path / "evaluation" / "report.html").is_file()


@pytest.mark.slow
def test_the_walkthrough_script_runs(tmp_path):
    completed = subprocess.run([sys.executable, str(EXAMPLES / "walkthrough.py"), str(tmp_path / "work")],
                               capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "resumed from the killed run" in completed.stdout and "EER o-a (ROCCH):" in completed.stdout
