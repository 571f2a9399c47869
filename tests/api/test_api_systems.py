"""``voxanon.load_system``: one waveform anonymised in Python equals, bit for bit, the WAV ``voxanon anonymise`` writes
for it (B2, B2r's per-utterance draws, the neural resynthesis on random weights); ``voxanon.anonymise`` is the run the
command makes."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import soundfile

import voxanon
from voxanon.data_prep.corpus import write_data_dir
from voxanon.pipeline.cli import main


def _batch_files(system: str, data, out, *extra: str) -> dict[str, np.ndarray]:
    assert main(["anonymise", "--system", system, "--data", str(data.path), "--out", str(out), "--workers", "2",
                 "--quiet", *extra]) == 0
    return {utt: soundfile.read(out / f"{data.path.name}_{system}" / "wav" / f"{utt}.wav", dtype="float32")[0]
            for utt in data.utterances}


def _inputs(data) -> dict[str, tuple[np.ndarray, int]]:
    return {utt: soundfile.read(data.audio_path(utt), dtype="float32") for utt in data.utterances}


@pytest.mark.parametrize("name", ["b2", "b2r"])
def test_one_waveform_equals_the_batch_file(name, toy_corpus, tmp_path):
    files = _batch_files(name, toy_corpus, tmp_path)
    system = voxanon.load_system(name)
    for utt, (audio, rate) in _inputs(toy_corpus).items():
        out, out_rate = system(audio, rate, utt_id=utt, speaker=toy_corpus.utt2spk[utt])
        assert out_rate == 16000 and out.dtype == np.float32
        np.testing.assert_array_equal(out, files[utt], err_msg=utt)


def test_a_list_and_int16_input_give_the_same_and_the_seed_matters(toy_corpus, tmp_path):
    files = _batch_files("b2r", toy_corpus, tmp_path)
    inputs = _inputs(toy_corpus)
    utts = toy_corpus.utterances[:3]
    system = voxanon.load_system("b2r")
    outputs = system([np.round(inputs[u][0] * 32768).astype(np.int16) for u in utts], np.int64(16000), utt_id=utts,
                     speaker=[toy_corpus.utt2spk[u] for u in utts])
    for utt, (out, _) in zip(utts, outputs):
        np.testing.assert_array_equal(out, files[utt])
    with pytest.raises(voxanon.VoxanonError, match="an id of its own"):
        system([inputs[utts[0]][0]] * 2, np.int64(16000), utt_id=[utts[0]] * 2, speaker=toy_corpus.utt2spk[utts[0]])
    other = voxanon.load_system("b2r", seed=1)(*inputs[utts[0]], utt_id=utts[0], speaker=toy_corpus.utt2spk[utts[0]])
    assert not np.array_equal(other[0], files[utts[0]])


def test_the_neural_resynthesis_equals_its_batch_file(random_home, toy_corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("VOXANON_HOME", str(random_home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data = dataclasses.replace(toy_corpus.subset(toy_corpus.utterances[:2]), trials=None, enrolls=None,
                               path=tmp_path / "two")
    write_data_dir(data, data.path)
    files = _batch_files("resynth", data, tmp_path)
    system = voxanon.load_system("resynth")
    for utt, (audio, rate) in _inputs(data).items():
        np.testing.assert_array_equal(system(audio, rate, utt_id=utt, speaker=data.utt2spk[utt])[0], files[utt])


def test_a_failure_names_the_utterance_and_the_stage():
    system = voxanon.load_system("b2")
    with pytest.raises(voxanon.UtteranceFailed, match="utterance 'u1', stage 'load': too short"):
        system(np.ones(10, dtype=np.float32), 16000, utt_id="u1", speaker="s1")


class LoudestSpeakerGain(voxanon.Stage):
    """A stage that prepares from its set: every utterance scaled by one gain drawn from the set's size."""
    name = "set_gain"

    def __init__(self, gain: float | None = None):
        self.gain = gain

    def prepare_set(self, data, work_dir, progress=True):
        return {"gain": 1.0 / len(data.utterances)}

    def process(self, utt):
        utt.audio = utt.audio * self.gain


def test_a_stage_that_prepares_from_its_set_asks_for_the_set(toy_corpus, tmp_path):
    system = voxanon.load_system({"name": "gain", "stages": [LoudestSpeakerGain]})
    audio, rate = soundfile.read(toy_corpus.audio_path("spk0-000"), dtype="float32")
    with pytest.raises(voxanon.VoxanonError, match="set_gain prepare from the whole set; call system.prepare"):
        system(audio, rate, utt_id="spk0-000", speaker="spk0")
    voxanon.anonymise(toy_corpus.path, system, tmp_path / "out", workers=1)
    out, _ = system.prepare(toy_corpus)(audio, rate, utt_id="spk0-000", speaker="spk0")
    np.testing.assert_array_equal(out, soundfile.read(tmp_path / "out" / "wav" / "spk0-000.wav", dtype="float32")[0])
    np.testing.assert_allclose(out, audio / 12, atol=1 / 32768)


def test_anonymise_returns_the_run(toy_corpus, tmp_path):
    result = voxanon.anonymise(toy_corpus.path, "b2r", tmp_path / "out", workers=2, seed=4)
    assert result.ok and (result.total, result.processed, result.resumed) == (12, 12, 0)
    assert result.manifest["config"]["seed"] == 4
    assert json.loads((tmp_path / "out" / "run.json").read_text())["status"] == "complete"
    assert sorted(result.paths) == toy_corpus.utterances and all(path.is_file() for path in result.paths.values())
    again = voxanon.anonymise(voxanon.Corpus.read(toy_corpus.path), "b2r", tmp_path / "out", workers=1, seed=4)
    assert (again.processed, again.resumed) == (0, 12)
