"""The ``voxanon metrics`` command."""
import json

import numpy as np
import pytest

from voxanon.eval.cllr import cllr, min_cllr
from voxanon.eval.eer import kaldi_eer, rocch_eer, speechbrain_eer, sweep_eer
from voxanon.eval.linkability import linkability
from voxanon.eval.zebra import zebra
from voxanon.pipeline.cli import main
from voxanon.eval.summary import JSON_KEYS


@pytest.fixture()
def trial_files(tmp_path):
    rng = np.random.default_rng(0)
    trials, scores, tar, non = [], [], [], []
    for u in range(60):
        for spk in ("a", "b", "c", "d", "e"):
            target = spk == "abcde"[u % 5]
            score = rng.normal(2.5 if target else 0.0, 1.0)
            (tar if target else non).append(score)
            trials.append(f"{spk} utt{u} {'target' if target else 'nontarget'}\n")
            scores.append(f"{spk} utt{u} {score!r}\n")
    (tmp_path / "trials").write_text("".join(trials))
    (tmp_path / "scores").write_text("".join(reversed(scores)))
    return tmp_path, np.array(tar), np.array(non), scores


def test_json_has_exactly_the_documented_keys_and_values(trial_files, capsys):
    folder, tar, non, _ = trial_files
    assert main(["metrics", "--trials", str(folder / "trials"), "--scores", str(folder / "scores"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert tuple(result) == JSON_KEYS
    assert (result["n_target"], result["n_nontarget"]) == (60, 240)
    assert result["eer_rocch"] == pytest.approx(100 * rocch_eer(tar, non), abs=1e-12)
    assert result["eer_kaldi"] == pytest.approx(100 * kaldi_eer(tar, non), abs=1e-12)
    assert result["eer_speechbrain"] == pytest.approx(100 * speechbrain_eer(tar, non), abs=1e-12)
    assert result["eer_sweep"] == pytest.approx(100 * sweep_eer(tar, non), abs=1e-12)
    assert result["cllr"] == pytest.approx(cllr(tar, non), abs=1e-12)
    assert result["min_cllr"] == pytest.approx(min_cllr(tar, non), abs=1e-12)
    assert result["linkability"] == pytest.approx(linkability(tar, non), abs=1e-12)
    expected = zebra(tar, non)
    assert result["zebra_dece"] == pytest.approx(expected.dece_bits, abs=1e-12)
    assert result["zebra_worst_case"] == pytest.approx(expected.worst_case_log10, abs=1e-12)
    assert result["zebra_tag"] == expected.tag


def test_plain_report(trial_files, capsys):
    folder, tar, non, _ = trial_files
    assert main(["metrics", "--trials", str(folder / "trials"), "--scores", str(folder / "scores")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "trials: 60 target, 240 nontarget"
    assert f"ROCCH-EER: {100 * rocch_eer(tar, non):.3f}%" in lines
    assert f"Cllr (min/act): {min_cllr(tar, non):.3f}/{cllr(tar, non):.3f}" in lines
    assert any(line.startswith("EER (kaldi): ") for line in lines)
    assert lines[-1] == f"Individual: {zebra(tar, non).worst_case_log10:.3f} ({zebra(tar, non).tag})"


def test_missing_scores_fail_unless_allowed(trial_files, capsys):
    folder, _, _, scores = trial_files
    (folder / "partial").write_text("".join(scores[3:]) + "zz nowhere 1.0\n")
    arguments = ["metrics", "--trials", str(folder / "trials"), "--scores", str(folder / "partial")]
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert "3 trial(s) have no score" in error and "1 score(s) match no trial" in error
    assert "Traceback" not in error
    assert main(arguments + ["--allow-missing", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n_target"] + json.loads(captured.out)["n_nontarget"] == 297


@pytest.mark.parametrize("trials, scores, message", [
    ("a u1 target\nb u1 target\n", "a u1 1\nb u1 2\n", "0 non-target"),
    ("a u1 target\nb u1 nontarget\n", "a u1 1\nb u1 nan\n", "not a finite number"),
    ("a u1 target\nb u1 maybe\n", "a u1 1\nb u1 2\n", "target|nontarget"),
])
def test_unusable_inputs_exit_2_with_a_message(tmp_path, capsys, trials, scores, message):
    (tmp_path / "trials").write_text(trials)
    (tmp_path / "scores").write_text(scores)
    assert main(["metrics", "--trials", str(tmp_path / "trials"), "--scores", str(tmp_path / "scores")]) == 2
    assert message in capsys.readouterr().err


def test_missing_trials_file(tmp_path, capsys):
    (tmp_path / "scores").write_text("a u1 1\n")
    assert main(["metrics", "--trials", str(tmp_path / "nope"), "--scores", str(tmp_path / "scores")]) == 2
    assert "trials file not found" in capsys.readouterr().err


def test_plot_directory(trial_files, capsys):
    folder, _, _, _ = trial_files
    assert main(["metrics", "--trials", str(folder / "trials"), "--scores", str(folder / "scores"),
                 "--plot", str(folder / "plots")]) == 0
    written = sorted(p.name for p in (folder / "plots").iterdir())
    assert written == [f"{name}.{ext}" for name in ("calibration", "det", "ece_profile") for ext in ("pdf", "png")]
