import json

import numpy as np
import pytest

from tests.helpers.attacks import synthetic_attack_inputs
from voxanon.data_prep.corpus import format_trials, write_mapping
from voxanon.data_prep.vectors import write_vectors
from voxanon.pipeline.cli import main
from tests.helpers.attacks import sexed_vectors


@pytest.fixture
def attack_files(tmp_path):
    inputs, spk2gender = synthetic_attack_inputs()
    write_vectors(tmp_path / "train_orig.ark", inputs.train_orig)
    write_vectors(tmp_path / "train_anon.scp", inputs.train_anon)
    write_vectors(tmp_path / "test_orig.npy", inputs.test_orig)
    write_vectors(tmp_path / "test_anon.ark", inputs.test_anon, text=True)
    # Utterance-level enrolment, averaged by speaker through --enroll-utt2spk.
    write_vectors(tmp_path / "enroll.ark", inputs.train_orig)
    write_mapping(tmp_path / "utt2spk", inputs.utt2spk)
    write_mapping(tmp_path / "spk2gender", spk2gender)
    (tmp_path / "trials").write_text(format_trials(inputs.trials))
    return tmp_path


def inversion_args(folder, method):
    return ["attack", method, "--train-orig", str(folder / "train_orig.ark"),
            "--train-anon", str(folder / "train_anon.scp"), "--test-orig", str(folder / "test_orig.npy"),
            "--test-anon", str(folder / "test_anon.ark"), "--enroll", str(folder / "enroll.ark"),
            "--enroll-utt2spk", str(folder / "utt2spk"), "--trials", str(folder / "trials"),
            "--utt2spk", str(folder / "utt2spk")]


def test_procrustes_json(attack_files, capsys):
    assert main([*inversion_args(attack_files, "procrustes"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert list(result)[:8] == ["train_top1_speaker", "train_top1_segment", "test_top1_speaker",
                                "test_top1_segment", "eer_rocch", "min_cllr", "cllr", "linkability"]
    assert result["test_top1_speaker"] > 95 and result["eer_rocch"] < 5


def test_wasserstein_procrustes_by_sex_with_pca(attack_files, capsys):
    args = [*inversion_args(attack_files, "wasserstein-procrustes"), "--by-sex", "--spk2gender",
            str(attack_files / "spk2gender"), "--pca", "10", "--iterations", "32"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "wasserstein-procrustes attack (by sex), PCA 10" in out
    assert "ROCCH-EER" in out and "PCA explained variance (f_clear)" in out


def test_user_errors_exit_2(attack_files, capsys):
    assert main([*inversion_args(attack_files, "procrustes"), "--by-sex"]) == 2
    assert "--by-sex needs --spk2gender" in capsys.readouterr().err
    (attack_files / "trials").write_text("f0 ghost-utt target\n")
    assert main(inversion_args(attack_files, "procrustes")) == 2
    assert "ghost-utt" in capsys.readouterr().err


def test_sex_attack_cli(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for name in ("train", "test"):
        vectors, utt2spk, spk2gender = sexed_vectors(rng, 10, 8, name)
        write_vectors(tmp_path / f"{name}.ark", vectors)
        write_mapping(tmp_path / f"{name}.utt2spk", utt2spk)
        write_mapping(tmp_path / f"{name}.spk2gender", spk2gender)
    args = ["attack", "sex", "--train", str(tmp_path / "train.ark"),
            "--train-spk2gender", str(tmp_path / "train.spk2gender"),
            "--train-utt2spk", str(tmp_path / "train.utt2spk"), "--test", str(tmp_path / "test.ark"),
            "--test-spk2gender", str(tmp_path / "test.spk2gender"), "--test-utt2spk", str(tmp_path / "test.utt2spk")]
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"logistic", "mlp"}
    assert result["logistic"]["eer"] < 20 and result["logistic"]["dece"] > 0.2
    assert main([*args, "--classifier", "logistic"]) == 0
    assert "logistic" in capsys.readouterr().out
    # Without utt2spk the utterance ids are taken for speaker ids, which spk2gender does not know.
    assert main(args[:6] + args[8:]) == 2
    assert "give the utt2spk option" in capsys.readouterr().err
