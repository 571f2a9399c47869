"""The bundled demo corpus (data_prep/demo/corpus): complete, consistent and as documented."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import parselmouth
import pytest
import soundfile

from voxanon.data_prep.corpus import read_data_dir

CORPUS = Path(__file__).resolve().parents[2] / "data_prep" / "demo" / "corpus"
# As documented in data_prep/demo/README.md.
FEMALE = {"slt", "us1", "de1", "de3", "de5"}
MALE = {"kal", "awb", "rms", "ked", "us2", "us3", "en1", "joe"}
UTTERANCES_PER_SPEAKER = 14
ENROLLS_PER_SPEAKER = 4
MAX_BYTES = 15 * 1024 * 1024


@pytest.fixture(scope="module")
def demo():
    return read_data_dir(CORPUS)


def test_reads_and_validates_without_problems(demo):
    assert demo.validate(need_gender=True) == []


def test_speakers_and_sexes_are_as_documented(demo):
    assert demo.spk2gender == {**{s: "f" for s in FEMALE}, **{s: "m" for s in MALE}}
    assert set(demo.speakers) == FEMALE | MALE


def test_every_speaker_has_the_documented_utterances(demo):
    assert Counter(demo.utt2spk.values()) == {s: UTTERANCES_PER_SPEAKER for s in FEMALE | MALE}
    for utt, speaker in demo.utt2spk.items():
        assert utt.startswith(f"{speaker}-"), utt


def test_every_sentence_is_read_once_in_vpc_style(demo):
    assert set(demo.text) == set(demo.wav)
    assert len(set(demo.text.values())) == len(demo.text)
    for utt, words in demo.text.items():
        assert words == words.upper() and not set(words) & set(",.!?;:\"-"), utt


def test_wav_scp_paths_are_relative_flac_files(demo):
    for utt, entry in demo.wav.items():
        assert entry == f"audio/{utt}.flac"


def test_enrolment_covers_every_speaker_and_is_disjoint_from_tests(demo):
    assert Counter(demo.utt2spk[u] for u in demo.enrolls) == {s: ENROLLS_PER_SPEAKER for s in FEMALE | MALE}
    tested = {trial.test_utt for trial in demo.trials}
    assert tested.isdisjoint(demo.enrolls)
    assert tested | set(demo.enrolls) == set(demo.wav)


def test_trials_are_all_same_sex_pairs_with_correct_labels(demo):
    pairs = {(t.enrol_speaker, t.test_utt): t.target for t in demo.trials}
    assert len(pairs) == len(demo.trials)
    enrolled = {demo.utt2spk[u] for u in demo.enrolls}
    expected = {(spk, utt) for spk in enrolled for utt in demo.wav
                if utt not in demo.enrolls and demo.spk2gender[spk] == demo.spk2gender[demo.utt2spk[utt]]}
    assert set(pairs) == expected
    for (speaker, utt), target in pairs.items():
        assert target == (demo.utt2spk[utt] == speaker)


def test_audio_decodes_at_16k_mono_with_listed_duration_and_is_clean(demo):
    for utt in demo.utterances:
        samples, rate = soundfile.read(demo.audio_path(utt), dtype="int16")
        info = soundfile.info(demo.audio_path(utt))
        assert (info.format, info.subtype, info.channels, rate) == ("FLAC", "PCM_16", 1, 16000), utt
        assert len(samples) / rate == pytest.approx(demo.utt2dur[utt], abs=1e-3), utt
        assert 2.0 <= demo.utt2dur[utt] <= 5.0, utt
        peak = np.abs(samples.astype(np.int32)).max()
        assert 0.5 * 32768 < peak < 32767, f"{utt}: peak {peak} (silent or clipped)"


def test_median_f0_of_each_speaker_matches_its_sex_label(demo):
    for speaker, utts in demo.spk2utt.items():
        f0 = []
        for utt in utts[:3]:
            samples, rate = soundfile.read(demo.audio_path(utt))
            pitch = parselmouth.Sound(samples, sampling_frequency=rate).to_pitch(
                time_step=0.01, pitch_floor=60.0, pitch_ceiling=400.0).selected_array["frequency"]
            f0.append(pitch[pitch > 0])
        median = np.median(np.concatenate(f0))
        if demo.spk2gender[speaker] == "f":
            assert 150 < median < 260, f"{speaker}: {median:.0f} Hz"
        else:
            assert 70 < median < 150, f"{speaker}: {median:.0f} Hz"


def test_whole_corpus_is_under_15_mb():
    assert sum(f.stat().st_size for f in CORPUS.rglob("*") if f.is_file()) < MAX_BYTES
