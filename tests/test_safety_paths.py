"""Ids are file names: readers refuse ids that could leave a folder, and every writer checks its paths itself."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.corpus import DataDir, DataDirError, read_data_dir, read_mapping, scan_audio_folder
from voxanon.data_prep.errors import VoxanonError
from voxanon.data_prep.paths import contained_path, id_problem
from voxanon.data_prep.scores import ScoreFileError, read_scores
from voxanon.data_prep.vectors import Vectors, VectorFileError, read_vectors, write_vectors
from voxanon.pipeline.cli import main
from voxanon.pipeline.runner import anonymise_set
from voxanon.pipeline.execution.batches import Job, process_jobs
from voxanon.pipeline.systems.stage import Stage
from voxanon.pipeline.systems.recipes import build_system, load_system_config

TRAVERSAL = "s2-../../../../../../../../tmp/x"


def _files_outside(root: Path, inside: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and inside not in p.parents]


@pytest.mark.parametrize("value, refused", [
    ("spk1-0001", False), ("a..b", False), ("...", False), ("utt_é", False),
    (TRAVERSAL, True), ("a\\b", True), ("a\x00b", True), ("a\x1bb", True), ("\u2028", True),
    (".", True), ("..", True),
])
def test_id_rules(value, refused):
    assert (id_problem(value) is not None) == refused


def test_contained_path_refuses_escapes(tmp_path):
    assert contained_path(tmp_path, "wav", "a.wav") == tmp_path / "wav" / "a.wav"
    assert contained_path(tmp_path, "a..b.wav") == tmp_path / "a..b.wav"
    for parts in [("wav", "../../x.wav"), ("/etc/passwd",), ("..",), (".",), ("",), ("a\x00.wav",)]:
        with pytest.raises(VoxanonError, match="unsafe path"):
            contained_path(tmp_path, *parts)


def test_validate_refuses_a_traversal_id_naming_the_line(tmp_path, capsys):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.3)
    wav_scp = data.path / "wav.scp"
    lines = wav_scp.read_text().splitlines()
    first_utt, audio = lines[0].split()
    lines[0] = f"{TRAVERSAL} {audio}"
    wav_scp.write_text("\n".join(lines) + "\n")
    utt2spk = data.path / "utt2spk"
    utt2spk.write_text(utt2spk.read_text().replace(f"{first_utt} ", f"{TRAVERSAL} "))
    (data.path / "spk2utt").unlink()

    assert main(["validate", str(data.path)]) == 2
    err = capsys.readouterr().err
    assert f"wav.scp:1: utterance id {TRAVERSAL!r} contains '/'" in err
    assert f"utt2spk:1: utterance id {TRAVERSAL!r}" in err
    assert main(["anonymise", "--system", "b2", "--data", str(data.path), "--out", str(tmp_path / "out"),
                 "--quiet"]) == 2
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.wav"))


@pytest.mark.parametrize("file, line, message", [
    ("utt2spk", "toy-a spk/1", "utt2spk:1: speaker id 'spk/1' contains '/'"),
    ("spk2gender", ".. f", "spk2gender:1: speaker id '..' is '..'"),
    ("text", "a\x01b HELLO", "text:1: utterance id 'a\\x01b' contains a control character (U+0001)"),
    ("enrolls", "x\\y", "enrolls:1: utterance id 'x\\\\y' contains '\\\\'"),
    ("trials", "../spk0 toy-a target", "trials:1: enrolment speaker id '../spk0' contains '/'"),
    ("spk2utt", "spk0 ok ../x", "spk2utt:1: utterance id '../x' contains '/'"),
])
def test_every_kaldi_file_refuses_bad_ids_naming_file_and_line(tmp_path, file, line, message):
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "wav.scp").write_text("toy-a a.wav\n")
    (folder / "utt2spk").write_text("toy-a spk0\n")
    (folder / file).write_text(line + "\n")
    with pytest.raises(DataDirError) as raised:
        read_data_dir(folder)
    assert message in str(raised.value)


def test_audio_folder_and_tables_refuse_bad_ids(tmp_path):
    speaker = tmp_path / "audio" / "spk1"
    speaker.mkdir(parents=True)
    soundfile.write(speaker / "..wav", np.full(160, 0.1, dtype=np.float32), 16000, format="WAV")
    with pytest.raises(DataDirError, match=r"spk1/\.\.wav: utterance id '\.' is '\.'"):
        scan_audio_folder(tmp_path / "audio")
    table = tmp_path / "utt2spk"
    table.write_text("good spk\nbad\x00id spk\n")
    with pytest.raises(DataDirError, match=r"utt2spk:2: the id 'bad\\x00id'"):
        read_mapping(table)


def test_vector_and_score_readers_refuse_bad_ids(tmp_path):
    path = tmp_path / "vectors.npy"
    write_vectors(path, Vectors(("a", "b"), np.eye(2)))
    path.with_suffix(".ids").write_text("a\n../../b\n")
    with pytest.raises(VectorFileError, match=r"vectors.ids:2: vector id '../../b' contains '/'"):
        read_vectors(path)
    scp = tmp_path / "vectors.scp"
    write_vectors(scp, Vectors(("a", "b"), np.eye(2)))
    scp.write_text(scp.read_text().replace("b ", "b/.. ", 1))
    with pytest.raises(VectorFileError, match=r"vectors.scp:2: vector id 'b/\.\.'"):
        read_vectors(scp)
    scores = tmp_path / "scores"
    scores.write_text("spk1 utt1 0.5\nspk1 .. 0.25\nspk\x07 utt2 1.0\n")
    with pytest.raises(ScoreFileError) as raised:
        read_scores(scores)
    assert "line 2: the id '..' is '..'" in str(raised.value)
    assert "line 3: the id 'spk\\x07' contains a control character (U+0007)" in str(raised.value)


def test_anonymise_set_refuses_a_hostile_id_built_in_code(tmp_path):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.3)
    hostile = _with_utterance_renamed(data, "../../../escaped")
    out_dir = tmp_path / "runs" / "deep" / "toy_b2"
    with pytest.raises(DataDirError, match="utterance id '../../../escaped' contains '/'"):
        anonymise_set(hostile, load_system_config("b2"), out_dir, progress=False)
    assert _files_outside(tmp_path / "runs", out_dir) == []


def test_paths_are_checked_even_when_validation_is_bypassed(tmp_path, monkeypatch):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.3)
    hostile = _with_utterance_renamed(data, "../../../escaped")
    monkeypatch.setattr(DataDir, "validate", lambda self, **options: [])   # a reader that let it through
    out_dir = tmp_path / "runs" / "deep" / "toy_b2"
    with pytest.raises(VoxanonError, match="unsafe path .* lies outside its folder"):
        anonymise_set(hostile, load_system_config("b2"), out_dir, progress=False)
    assert _files_outside(tmp_path / "runs", out_dir) == []


class _KeepVector(Stage):
    name = "kept"

    def process(self, utt) -> None:
        utt.vectors["kept"] = np.ones(4, dtype=np.float32)


def test_kept_vectors_cannot_leave_the_output_folder(tmp_path):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=1, seconds=0.3)
    system = build_system(load_system_config("b2"))
    system.stages.append(_KeepVector())
    out_dir = tmp_path / "runs" / "deep" / "toy_b2"
    utt = data.utterances[0]
    job = Job("../../../escaped", "spk0", "f", data.wav[utt], str(out_dir / "wav" / "safe.wav"))
    [outcome] = process_jobs(system, [job], allow_pipes=False)
    assert outcome.failed_stage == "write" and "lies outside its folder" in outcome.error
    assert _files_outside(tmp_path / "runs", out_dir) == []


def test_check_audio_names_a_missing_file_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "wav.scp").write_text("u1 bad/a/missing.wav\n")
    (folder / "utt2spk").write_text("u1 s1\n")
    assert main(["validate", "bad", "--check-audio"]) == 1
    out = capsys.readouterr().out
    assert "bad/bad" not in out
    assert out.count("missing.wav") == 1 and "missing file bad/a/missing.wav" in out


def _with_utterance_renamed(data: DataDir, new_id: str) -> DataDir:
    old = data.utterances[0]
    rename = {old: new_id}
    return DataDir(name=data.name, wav={rename.get(u, u): p for u, p in data.wav.items()},
                   utt2spk={rename.get(u, u): s for u, s in data.utt2spk.items()},
                   spk2gender=dict(data.spk2gender), path=data.path)
