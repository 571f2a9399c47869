"""`voxanon prepare vpc`: validating and indexing VoicePrivacy-distributed data sets."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import soundfile

from voxanon.data_prep.corpus import DataDir, Trial, read_data_dir, write_data_dir
from voxanon.data_prep.prepare.vpc import decoded_file, index_vpc
from voxanon.pipeline.cli import main

SPEAKERS = {"1272": "m", "1462": "f", "2035": "f", "2412": "m"}


def flac(path: Path, rate: int = 16000) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, 0.1 * np.sin(np.arange(rate // 4) / 5.0), rate)


def vpc_tree(root: Path) -> Path:
    """libri_dev sets with flac-pipe wav.scp entries relative to the VPC folder, as distributed."""
    utts = {spk: [f"{spk}-128104-{i:04d}" for i in range(3)] for spk in SPEAKERS}
    for spk, names in utts.items():
        for utt in names:
            flac(root / "corpora" / "dev-clean" / spk / f"{utt}.flac")

    def data(name: str, chosen: list[str]) -> DataDir:
        utt2spk = {u: u.split("-")[0] for u in chosen}
        return DataDir(
            name=name, wav={u: f"flac -c -d -s corpora/dev-clean/{utt2spk[u]}/{u}.flac |" for u in chosen},
            utt2spk=utt2spk, spk2gender={s: SPEAKERS[s] for s in set(utt2spk.values())},
            text={u: "SOME WORDS" for u in chosen})

    enrolled = {"1272": utts["1272"][:1], "1462": utts["1462"][:1]}
    enrolls = data("libri_dev_enrolls", [u for names in enrolled.values() for u in names])
    enrolls.enrolls = sorted(enrolls.wav)
    write_data_dir(enrolls, root / "data" / "libri_dev_enrolls")
    for sex in ("f", "m"):
        tests = [u for spk, names in utts.items() if SPEAKERS[spk] == sex
                 for u in names if u not in enrolls.wav]
        trial_set = data(f"libri_dev_trials_{sex}", tests)
        trial_set.trials = [Trial(spk, u, spk == u.split("-")[0])
                            for spk in sorted(enrolled) if SPEAKERS[spk] == sex for u in sorted(tests)]
        write_data_dir(trial_set, root / "data" / f"libri_dev_trials_{sex}")
    shutil.copytree(root / "data" / "libri_dev_enrolls", root / "data" / "libri_test_enrolls")
    for sex in ("f", "m"):
        shutil.copytree(root / "data" / f"libri_dev_trials_{sex}", root / "data" / f"libri_test_trials_{sex}")
    return root


def test_complete_sets_are_indexed_without_problems(tmp_path):
    root = vpc_tree(tmp_path / "vpc")
    index, loaded = index_vpc(root, ("libri",))
    assert index.missing == [] and index.problems == []
    by_name = {s.name: s for s in index.sets}
    assert sorted(by_name) == sorted(f"libri_{s}_{p}" for s in ("dev", "test")
                                     for p in ("enrolls", "trials_f", "trials_m"))
    female = by_name["libri_dev_trials_f"]
    assert (female.utterances, female.speakers, female.targets, female.nontargets) == (5, {"f": 2}, 2, 3)
    assert by_name["libri_dev_enrolls"].enrolls == 2
    assert female.command_entries == 5
    assert loaded["libri_dev_trials_f"].wav["1462-128104-0001"] == str(
        (root / "corpora" / "dev-clean" / "1462" / "1462-128104-0001.flac").resolve())


def test_cli_writes_index_and_native_copies(tmp_path, capsys):
    root = vpc_tree(tmp_path / "vpc")
    out = tmp_path / "native"
    assert main(["prepare", "vpc", "--root", str(root), "--corpus", "libri", "--out", str(out),
                 "--strict"]) == 0
    printed = capsys.readouterr().out
    assert "libri_dev_trials_m" in printed and "MISSING" not in printed
    index = json.loads((root.resolve() / "vpc_index.json").read_text())
    assert index["missing"] == [] and index["sets"]["libri_test_trials_m"]["targets"] == 2
    copy = read_data_dir(out / "libri_dev_trials_f")  # no --allow-pipes needed any more
    assert not any(copy.is_pipe(u) for u in copy.wav)
    assert copy.validate(need_gender=True) == []
    assert copy.trials == read_data_dir(root / "data" / "libri_dev_trials_f", allow_pipes=True).trials


def test_every_problem_is_named(tmp_path, capsys):
    root = vpc_tree(tmp_path / "vpc")
    shutil.rmtree(root / "data" / "libri_test_trials_m")
    (root / "data" / "libri_test_enrolls" / "enrolls").unlink()
    (root / "corpora" / "dev-clean" / "2035" / "2035-128104-0002.flac").unlink()
    flac(root / "corpora" / "dev-clean" / "2035" / "2035-128104-0001.flac", rate=22050)
    trials = root / "data" / "libri_dev_trials_f" / "trials"
    trials.write_text(trials.read_text() + "1272 2035-128104-0000 nontarget\n1462 2035-128104-0000 target\n")
    assert main(["prepare", "vpc", "--root", str(root), "--corpus", "libri"]) == 0
    assert "libri_test_trials_m          MISSING" in capsys.readouterr().out
    index, _ = index_vpc(root, ("libri",))
    problems = "\n".join(index.problems)
    assert "libri_test_trials_m: set missing" in problems
    assert "libri_test_enrolls: enrolls: missing file" in problems
    assert "libri_dev_trials_f: audio files missing: 1 (e.g. 2035-128104-0002" in problems
    assert "libri_dev_trials_f: audio at 22050 Hz, not 16000 Hz: 1 (e.g. 2035-128104-0001)" in problems
    assert "libri_dev_trials_f: trials: enrolment speakers not of sex f: 1 (e.g. 1272)" in problems
    assert "libri_dev_trials_f: trials: target label disagrees with the speakers: 1 (e.g. 1462 2035-128104-0000)" \
        in problems
    assert "libri_test_trials_f: trials: enrolment speakers without enrolment utterances" in problems
    assert main(["prepare", "vpc", "--root", str(root), "--corpus", "libri", "--strict",
                 "--out", str(tmp_path / "native")]) == 2
    assert not (tmp_path / "native").exists()
    assert json.loads((root.resolve() / "vpc_index.json").read_text())["missing"] == ["libri_test_trials_m"]


def test_a_root_without_any_set_is_a_user_fault_that_writes_nothing(tmp_path, capsys):
    assert main(["prepare", "vpc", "--root", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1 and "no VoicePrivacy set found" in error and str(tmp_path) in error
    assert not list(tmp_path.iterdir())


def test_default_corpora_expect_vctk_common_sets(tmp_path):
    root = vpc_tree(tmp_path / "vpc")
    index, _ = index_vpc(root)
    assert "vctk_test_trials_m_common" in index.missing and len(index.missing) == 10


def test_only_plain_decoders_are_resolved():
    assert decoded_file("flac -c -d -s corpora/a.flac |") == "corpora/a.flac"
    assert decoded_file("sox /x/a.wav -t wav - |") == "/x/a.wav"
    assert decoded_file("sox /x/a.wav -r 8000 -t wav - |") is None  # changes the audio
    assert decoded_file("sph2pipe -f wav a.sph |") is None
    assert decoded_file("cat a.flac b.flac |") is None


def test_sets_made_by_prepare_trials_pass_the_vpc_checks(tmp_path):
    utt2spk = {f"{spk}-1-{i:04d}": spk for spk in SPEAKERS for i in range(4)}
    for utt, spk in utt2spk.items():
        flac(tmp_path / "audio" / f"{utt}.flac")
    source = DataDir(name="corpus", wav={u: str(tmp_path / "audio" / f"{u}.flac") for u in utt2spk},
                     utt2spk=utt2spk, spk2gender=dict(SPEAKERS), text={u: "A B" for u in utt2spk})
    write_data_dir(source, tmp_path / "corpus")
    for split, seed in (("dev", "1"), ("test", "2")):
        assert main(["prepare", "trials", "--data", str(tmp_path / "corpus"), "--out", str(tmp_path / "vpc"),
                     "--name", f"libri_{split}", "--enroll-per-spk", "2", "--seed", seed, "--mixed",
                     "--strict"]) == 0
    index, _ = index_vpc(tmp_path / "vpc", ("libri",))
    assert index.missing == [] and index.problems == []
    mixed = {s.name: s for s in index.sets}["libri_dev_trials_mixed"]
    assert (mixed.targets, mixed.nontargets) == (4 * 2, 4 * 8 - 4 * 2)
