"""`voxanon prepare trials`: enrolment/test splits and VoicePrivacy-layout trial sets."""
from __future__ import annotations

from pathlib import Path

import pytest

from voxanon.data_prep.corpus import DataDir, read_data_dir, write_data_dir
from voxanon.data_prep.errors import VoxanonError
from voxanon.data_prep.prepare.issues import PreparationIssues
from voxanon.data_prep.prepare.ordering import seeded_order
from voxanon.data_prep.prepare.trials import TrialDesign, build_trial_sets
from voxanon.pipeline.cli import main

UTTERANCES = {"F1": 6, "F2": 6, "F3": 2, "M1": 5, "M2": 4, "U1": 5}
SEXES = {"F1": "f", "F2": "f", "F3": "f", "M1": "m", "M2": "m"}


def corpus() -> DataDir:
    utt2spk = {f"{spk}-{i:02d}": spk for spk, n in UTTERANCES.items() for i in range(n)}
    text = {utt: f"WORDS OF {utt}" for utt in utt2spk if utt != "F1-00"}
    return DataDir(name="mini", wav={u: f"/audio/{u}.flac" for u in utt2spk}, utt2spk=utt2spk,
                   spk2gender=dict(SEXES), text=text, utt2dur={u: 1.5 for u in utt2spk})


def build(design: TrialDesign) -> tuple[dict[str, DataDir], PreparationIssues]:
    issues = PreparationIssues("test")
    return build_trial_sets(corpus(), design, issues), issues


def test_counts_disjointness_and_same_sex_pairs():
    sets, issues = build(TrialDesign(enroll_per_speaker=3, seed="7"))
    assert sorted(sets) == ["enrolls", "trials_f", "trials_m"]
    enrolls = sets["enrolls"]
    assert enrolls.speakers == ["F1", "F2", "M1", "M2"]  # F3 has 2 utterances, U1 no sex label
    assert len(enrolls.enrolls) == 12 and sorted(enrolls.enrolls) == sorted(enrolls.wav)
    female, male = sets["trials_f"], sets["trials_m"]
    assert sorted(female.wav) == sorted({u for u, s in corpus().utt2spk.items() if s.startswith("F")}
                                        - set(enrolls.enrolls))
    assert len(female.wav) == 3 + 3 + 2 and len(male.wav) == 2 + 1
    assert len(female.trials) == 2 * 8 and sum(t.target for t in female.trials) == 6
    assert len(male.trials) == 2 * 3 and sum(t.target for t in male.trials) == 3
    for trial_set, sex in ((female, "f"), (male, "m")):
        assert not set(trial_set.wav) & set(enrolls.enrolls)
        for trial in trial_set.trials:
            assert SEXES[trial.enrol_speaker] == sex == trial_set.spk2gender[trial_set.utt2spk[trial.test_utt]]
            assert trial.target == (trial_set.utt2spk[trial.test_utt] == trial.enrol_speaker)
        assert trial_set.trials == sorted(trial_set.trials, key=lambda t: (t.enrol_speaker, t.test_utt))
        assert trial_set.validate(check_files=False, need_gender=True) == []
    assert enrolls.validate(check_files=False) == []
    assert issues.items("speaker with too few utterances to enrol (test speaker only)") == ["F3 (2 utterances)"]
    assert issues.items("speaker without an f/m sex label (left out; --mixed would keep it)") == ["U1"]


def test_enrolment_follows_the_seed_and_only_the_seed():
    first, _ = build(TrialDesign(enroll_per_speaker=2, seed="1"))
    again, _ = build(TrialDesign(enroll_per_speaker=2, seed="1"))
    other, _ = build(TrialDesign(enroll_per_speaker=2, seed="2"))
    assert first["enrolls"].enrolls == again["enrolls"].enrolls
    assert first["trials_f"].trials == again["trials_f"].trials
    assert first["enrolls"].enrolls != other["enrolls"].enrolls
    expected = sorted(seeded_order([f"F1-{i:02d}" for i in range(6)], "1", "F1")[:2])
    assert [u for u in first["enrolls"].enrolls if u.startswith("F1")] == expected


def test_seeded_order_is_stable_and_independent_of_other_items():
    items = [f"u{i}" for i in range(50)]
    order = seeded_order(items, 3, "spk")
    assert order == seeded_order(list(reversed(items)), 3, "spk")
    assert [i for i in seeded_order(items[:-1], 3, "spk")] == [i for i in order if i != "u49"]
    assert order != seeded_order(items, 3, "other-spk")
    # Pinned: the order must not change between Python versions or platforms.
    assert "".join(seeded_order(list("abcdefgh"), 0, "x")) == "dhcgbfae"


def test_mixed_list_asr_set_and_speaker_limit():
    sets, issues = build(TrialDesign(enroll_per_speaker=3, seed="7", mixed=True, asr=True))
    mixed = sets["trials_mixed"]
    enrolled = sets["enrolls"].speakers
    assert enrolled == ["F1", "F2", "M1", "M2", "U1"]
    assert len(mixed.wav) == 8 + 3 + 2
    assert len(mixed.trials) == 5 * 13 and sum(t.target for t in mixed.trials) == 3 + 3 + 2 + 1 + 2
    assert any(SEXES.get(t.enrol_speaker) == "f" and SEXES.get(mixed.utt2spk[t.test_utt]) == "m"
               for t in mixed.trials)
    assert "U1" not in sets["trials_f"].speakers + sets["trials_m"].speakers
    asr = sets["asr"]
    tested = set(mixed.wav)
    assert set(asr.wav) == tested - {"F1-00"}
    assert asr.text and set(asr.text) == set(asr.wav)
    assert issues.items("test utterance without transcript (left out of the ASR set)") == (
        ["F1-00"] if "F1-00" in tested else [])
    limited, _ = build(TrialDesign(enroll_per_speaker=3, seed="7", enrolled_speakers_per_sex=1))
    assert [SEXES[s] for s in limited["enrolls"].speakers] == ["f", "m"]
    assert len(limited["trials_f"].wav) == 3 + 6 + 2  # the enrolled one keeps 3 test utterances
    assert len(limited["trials_f"].trials) == len(limited["trials_f"].wav)


def test_nobody_enrollable_is_an_error():
    with pytest.raises(VoxanonError, match="more than 6 utterances"):
        build(TrialDesign(enroll_per_speaker=6))


def test_cli_writes_vpc_layout(tmp_path):
    data_dir = tmp_path / "data" / "mini"
    source = corpus()
    source.wav = {u: f"audio/{u}.flac" for u in source.wav}  # relative to the data dir
    write_data_dir(source, data_dir)
    assert main(["prepare", "trials", "--data", str(data_dir), "--enroll-per-spk", "3",
                 "--seed", "7", "--name", "libri_mini", "--asr", "--strict"]) == 2  # U1 has no sex label
    assert main(["prepare", "trials", "--data", str(data_dir), "--enroll-per-spk", "3",
                 "--seed", "7", "--name", "libri_mini", "--asr"]) == 0
    names = sorted(p.name for p in (tmp_path / "data").iterdir())
    assert names == ["libri_mini_asr", "libri_mini_enrolls", "libri_mini_trials_f", "libri_mini_trials_m", "mini"]
    enrolls = read_data_dir(tmp_path / "data" / "libri_mini_enrolls")
    female = read_data_dir(tmp_path / "data" / "libri_mini_trials_f")
    built, _ = build(TrialDesign(enroll_per_speaker=3, seed="7", asr=True))
    assert enrolls.enrolls == built["enrolls"].enrolls
    assert female.trials == built["trials_f"].trials
    first = female.trials[0]
    assert (tmp_path / "data" / "libri_mini_trials_f" / "trials").read_text().splitlines()[0] == \
        f"{first.enrol_speaker} {first.test_utt} {'target' if first.target else 'nontarget'}"
    assert female.wav["F3-00"] == str((data_dir / "audio" / "F3-00.flac").resolve())
    assert not (tmp_path / "data" / "libri_mini_trials_f" / "enrolls").exists()
    assert (Path(tmp_path / "data" / "libri_mini_asr" / "text").read_text().count("\n")
            == len(read_data_dir(tmp_path / "data" / "libri_mini_asr").wav))
