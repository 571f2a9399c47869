"""Kaldi data directories and audio folders: round trips and every validation error."""
from __future__ import annotations

from pathlib import Path

import pytest

from voxanon.data_prep.corpus import (DataDirError, load_corpus, read_data_dir, scan_audio_folder, write_anonymised_dir,
                                      write_data_dir)

KALDI_FILES = ("wav.scp", "utt2spk", "spk2utt", "spk2gender", "text", "utt2dur", "enrolls", "trials")


def test_round_trip_is_byte_identical(toy_corpus, tmp_path):
    first = read_data_dir(toy_corpus.path)
    write_data_dir(first, tmp_path / "copy")
    second = read_data_dir(tmp_path / "copy")
    assert second.wav == first.wav and second.utt2spk == first.utt2spk
    assert second.spk2gender == first.spk2gender and second.text == first.text
    assert second.enrolls == first.enrolls and second.trials == first.trials
    for name in KALDI_FILES:
        assert (tmp_path / "copy" / name).read_bytes() == (toy_corpus.path / name).read_bytes(), name
    assert first.validate() == []


def test_files_are_sorted_and_spk2utt_derived(toy_corpus):
    lines = (toy_corpus.path / "utt2spk").read_text().splitlines()
    assert lines == sorted(lines)
    spk2utt = dict(line.split(maxsplit=1) for line in (toy_corpus.path / "spk2utt").read_text().splitlines())
    assert spk2utt["spk0"].split() == ["spk0-000", "spk0-001", "spk0-002"]


def _edit(path: Path, name: str, text: str) -> None:
    (path / name).write_text(text)


def test_duplicate_ids_and_malformed_lines_name_the_file_and_line(toy_corpus):
    wav = (toy_corpus.path / "wav.scp").read_text()
    first_line = wav.splitlines()[0]
    _edit(toy_corpus.path, "wav.scp", wav + first_line + "\nlonely\n")
    with pytest.raises(DataDirError) as caught:
        read_data_dir(toy_corpus.path)
    message = str(caught.value)
    assert "duplicate id 'spk0-000'" in message and "wav.scp:13" in message
    assert "wav.scp:14" in message and "expected '<id> <value>'" in message


def test_missing_file_and_utterance_without_speaker(toy_corpus):
    utt2spk = (toy_corpus.path / "utt2spk").read_text().splitlines()
    _edit(toy_corpus.path, "utt2spk", "\n".join(utt2spk[1:]) + "\n")
    (toy_corpus.path / "spk2utt").unlink()
    Path(toy_corpus.wav["spk1-002"]).unlink()
    problems = read_data_dir(toy_corpus.path).validate()
    assert any("'spk0-000'" in p and "has no speaker" in p for p in problems)
    assert any("spk1-002" in p and "missing file" in p for p in problems)


def test_speaker_without_sex_label_only_when_needed(toy_corpus):
    _edit(toy_corpus.path, "spk2gender", "spk0 f\nspk1 m\nspk2 x\n")
    data = read_data_dir(toy_corpus.path)
    assert any("'spk2' has label 'x'" in p for p in data.validate())
    assert not any("spk3" in p for p in data.validate())
    assert any("'spk3' has no sex label" in p for p in data.validate(need_gender=True))


def test_trials_and_enrolls_naming_unknown_ids(toy_corpus):
    _edit(toy_corpus.path, "trials", "spk0 nosuch-utt target\nghost spk0-001 nontarget\n")
    _edit(toy_corpus.path, "enrolls", "spk0-000\nspk0-000\nmissing-utt\n")
    problems = read_data_dir(toy_corpus.path).validate()
    assert any("unknown test utterance 'nosuch-utt'" in p for p in problems)
    assert any("'ghost' has no enrolls utterance" in p for p in problems)
    assert any("enrolls: unknown utterance 'missing-utt'" in p for p in problems)
    assert any("'spk0-000' listed more than once" in p for p in problems)


def test_bad_trial_label_and_spk2utt_disagreement(toy_corpus):
    _edit(toy_corpus.path, "trials", "spk0 spk0-001 maybe\n")
    _edit(toy_corpus.path, "spk2utt", "spk0 spk0-000\n")
    with pytest.raises(DataDirError) as caught:
        read_data_dir(toy_corpus.path)
    assert "trials:1" in str(caught.value) and "spk2utt: disagrees" in str(caught.value)


def test_pipes_need_explicit_permission(toy_corpus):
    _edit(toy_corpus.path, "wav.scp", (toy_corpus.path / "wav.scp").read_text()
          + "spk0-009 sox foo.wav -t wav - |\n")
    with pytest.raises(DataDirError, match="only with --allow-pipes"):
        read_data_dir(toy_corpus.path)
    data = read_data_dir(toy_corpus.path, allow_pipes=True)
    assert data.is_pipe("spk0-009")


def test_missing_wav_scp_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataDirError, match="wav.scp: missing"):
        read_data_dir(tmp_path / "empty")


def test_audio_folder_speaker_from_level_and_regex(tmp_path, toy_corpus):
    root = tmp_path / "folder"
    for utt, source in toy_corpus.wav.items():
        target = root / "corpus" / toy_corpus.utt2spk[utt] / "session1" / f"{utt}.wav"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(Path(source).read_bytes())
    by_level = scan_audio_folder(root, speaker_level=2)
    assert by_level.utt2spk == toy_corpus.utt2spk
    by_regex = scan_audio_folder(root, speaker_regex=r"(?P<spk>spk\d)-\d+\.wav$")
    assert by_regex.utt2spk == toy_corpus.utt2spk
    assert load_corpus(root, speaker_level=2).validate() == []
    with pytest.raises(DataDirError, match="no folder 5 level"):
        scan_audio_folder(root, speaker_level=5)


def test_audio_folder_duplicate_ids_name_both_files(tmp_path, toy_corpus):
    source = Path(toy_corpus.wav["spk0-000"]).read_bytes()
    for speaker in ("a", "b"):
        (tmp_path / "dup" / speaker).mkdir(parents=True)
        (tmp_path / "dup" / speaker / "same.wav").write_bytes(source)
    with pytest.raises(DataDirError, match=r"duplicate utterance id 'same'.*a/same.wav.*b/same.wav"):
        scan_audio_folder(tmp_path / "dup")


def test_anonymised_dir_keeps_metadata_and_rebuilds_wav_scp(toy_corpus, tmp_path):
    produced = {utt: 1.0 for utt in toy_corpus.utterances if utt != "spk1-001"}
    out = write_anonymised_dir(toy_corpus, tmp_path / "toy_b2", produced)
    reread = read_data_dir(tmp_path / "toy_b2")
    assert reread.wav["spk0-000"] == "wav/spk0-000.wav"
    assert "spk1-001" not in reread.wav and out.utt2dur["spk0-000"] == 1.0
    # A failed utterance (failures.tsv lists it) leaves the metadata with its audio: the output is a valid set.
    assert reread.text == {u: t for u, t in toy_corpus.text.items() if u != "spk1-001"}
    assert reread.trials == [t for t in toy_corpus.trials if t.test_utt != "spk1-001"]
    assert "spk1-001" not in reread.utt2spk and reread.validate(check_files=False) == []
    everything = write_anonymised_dir(toy_corpus, tmp_path / "all_b2", {utt: 1.0 for utt in toy_corpus.utterances})
    assert everything.text == toy_corpus.text and everything.trials == toy_corpus.trials


def test_rewriting_removes_files_the_new_version_lacks(toy_corpus, tmp_path):
    data = read_data_dir(toy_corpus.path)
    data.utt2dur = {}
    data.trials = None
    write_data_dir(data, toy_corpus.path)
    assert not (toy_corpus.path / "utt2dur").exists() and not (toy_corpus.path / "trials").exists()
    assert (toy_corpus.path / "enrolls").exists()


def test_absolute_wav_keeps_commands(toy_corpus, tmp_path, monkeypatch):
    relative = write_anonymised_dir(toy_corpus, tmp_path / "rel", {u: 1.0 for u in toy_corpus.utterances})
    monkeypatch.chdir(tmp_path)
    absolute = relative.absolute_wav()
    assert absolute["spk0-000"] == str(tmp_path / "rel" / "wav" / "spk0-000.wav")
    relative.wav["spk0-000"] = "sox x.flac -t wav - |"
    assert relative.absolute_wav()["spk0-000"] == "sox x.flac -t wav - |"
