"""``voxanon.Corpus`` and lhotse manifests: the mapping is lhotse's own (its ``load_kaldi_data_dir`` of the same
data directory gives the same manifests), round trips keep every table, and what does not map is refused."""
from __future__ import annotations

import dataclasses
import gzip
import json

import pytest
from lhotse import AudioSource, Recording, RecordingSet, SupervisionSegment, SupervisionSet
from lhotse.kaldi import load_kaldi_data_dir

from voxanon import Corpus
from voxanon.data_prep.corpus import DataDirError, write_data_dir


@pytest.fixture
def plain_set(toy_corpus, tmp_path):
    """The toy set without trials and enrolls (which lhotse has no place for), as a Kaldi directory."""
    data = dataclasses.replace(toy_corpus, trials=None, enrolls=None, path=tmp_path / "plain")
    write_data_dir(data, data.path)
    return Corpus.read(data.path)


def test_manifests_are_those_lhotse_makes_of_the_data_directory(plain_set):
    recordings, supervisions = plain_set.to_lhotse()
    theirs, their_supervisions, _ = load_kaldi_data_dir(plain_set.path, sampling_rate=16000)
    assert list(recordings.to_dicts()) == list(theirs.to_dicts())
    assert list(supervisions.to_dicts()) == list(their_supervisions.to_dicts())
    # and lhotse's manifests of a data directory read back as that directory
    again = Corpus.from_lhotse(theirs, their_supervisions, name=plain_set.name)
    assert (again.wav, again.utt2spk, again.spk2gender, again.text) == \
           (plain_set.wav, plain_set.utt2spk, plain_set.spk2gender, plain_set.text)
    assert again.utt2dur == pytest.approx(plain_set.utt2dur, abs=1e-3)


def test_manifest_files_round_trip_atomically(plain_set, tmp_path):
    plain_set.write_lhotse(tmp_path / "recordings.jsonl.gz", tmp_path / "dev_supervisions.jsonl")
    assert sorted(path.name for path in tmp_path.iterdir() if path.is_file()) == \
        ["dev_supervisions.jsonl", "recordings.jsonl.gz"]  # no temporary left
    lines = gzip.decompress((tmp_path / "recordings.jsonl.gz").read_bytes()).decode().splitlines()
    assert json.loads(lines[0])["id"] == plain_set.utterances[0]
    assert list(RecordingSet.from_file(tmp_path / "recordings.jsonl.gz").ids) == list(plain_set.to_lhotse()[0].ids)
    again = Corpus.from_lhotse(tmp_path / "recordings.jsonl.gz", tmp_path / "dev_supervisions.jsonl")
    assert again.name == "dev_supervisions" and again.wav == plain_set.wav and again.utt2spk == plain_set.utt2spk
    again.write(tmp_path / "kaldi")
    assert Corpus.read(tmp_path / "kaldi").check().text == plain_set.text


def test_language_travels_as_utt2lang(plain_set):
    recordings, supervisions = plain_set.to_lhotse()
    supervisions = SupervisionSet.from_segments(dataclasses.replace(s, language="English") for s in supervisions)
    corpus = Corpus.from_lhotse(recordings, supervisions)
    assert corpus.passthrough["utt2lang"].splitlines()[0] == f"{corpus.utterances[0]} English"
    assert {s.language for s in corpus.to_lhotse()[1]} == {"English"}


def _recording(recording_id="r1", source_type="file", **changes):
    recording = Recording(id=recording_id, sources=[AudioSource(type=source_type, channels=[0], source="a.wav")],
                          sampling_rate=16000, num_samples=16000, duration=1.0)
    return dataclasses.replace(recording, **changes)


def _supervision(supervision_id="u1", recording_id="r1", **changes):
    return SupervisionSegment(**{"id": supervision_id, "recording_id": recording_id, "start": 0.0, "duration": 1.0,
                                 "speaker": "s1", **changes})


@pytest.mark.parametrize("recordings, supervisions, message", [
    ([_recording()], [_supervision(start=0.5, duration=0.5)], "covers 0.5-1 s .* cut the segments into files"),
    ([_recording()], [_supervision(), _supervision("u2")], "2 supervisions"),
    ([_recording()], [], "no supervision"),
    ([_recording(source_type="url")], [_supervision()], "a 'url' source"),
    ([_recording(transforms=[{"name": "Speed", "kwargs": {"factor": 1.1}}])], [_supervision()], "transforms \\(Speed\\)"),
    ([_recording()], [_supervision(speaker=None)], "no speaker"),
    ([_recording()], [_supervision(custom={"emotion": "sad"})], "custom \\['emotion'\\]"),
    ([_recording()], [_supervision(recording_id="r9")], "recording 'r9' is not in the recordings manifest"),
])
def test_what_does_not_map_is_refused_naming_it(recordings, supervisions, message):
    with pytest.raises(DataDirError, match=message):
        Corpus.from_lhotse(RecordingSet.from_recordings(recordings), SupervisionSet.from_segments(supervisions))


def test_command_sources_map_to_pipes_and_back_are_refused(plain_set):
    corpus = Corpus.from_lhotse([_recording(source_type="command")], [_supervision()])
    assert corpus.wav == {"u1": "a.wav |"}
    with pytest.raises(DataDirError, match="is a command"):
        corpus.to_lhotse()


def test_trials_are_refused_not_dropped(toy_corpus):
    with pytest.raises(DataDirError, match="trials or enrolls"):
        Corpus.from_data_dir(toy_corpus).to_lhotse()


def test_missing_and_broken_manifests_are_one_error_naming_the_file(tmp_path, plain_set):
    recordings = tmp_path / "recordings.jsonl"
    plain_set.write_lhotse(recordings, tmp_path / "supervisions.jsonl")
    with pytest.raises(Exception, match="no such supervisions manifest"):
        Corpus.from_lhotse(recordings, tmp_path / "nothing.jsonl")
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(Exception, match="broken.jsonl: not a lhotse SupervisionSet"):
        Corpus.from_lhotse(recordings, tmp_path / "broken.jsonl")
