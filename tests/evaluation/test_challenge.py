"""voxanon challenge and the semi-informed attacker (issue 17 items 2, 3, 7): evaluate --asv-model labels
attackers and models, warns about a model trained on another system's output, refuses a model folder
missing a file; the challenge command runs end to end on tiny synthetic data, and a rerun computes nothing.

A tiny ECAPA (16 channels, 0.5 s chunks, 2 epochs) keeps the attacker's training to a few seconds."""
from __future__ import annotations

import csv
import json
import logging
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from voxanon.data_prep.corpus import read_data_dir
from voxanon.eval.results import Result, from_json
from voxanon.models.checkpoints.safe import safe_load
from voxanon.pipeline.cli import main
from voxanon.pipeline.runner import anonymise_set
from voxanon.pipeline.systems.recipes import load_system_config

from tests.helpers.corpora import make_corpus

from tests.helpers.corpora import single_torch_thread
from tests.helpers.challenge_settings import TINY_SET



@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with single_torch_thread():
        yield


def challenge_args(root: Path, out: Path, *extra: str) -> list[str]:
    return ["challenge", "--system", "b2", "--train", str(root / "train"), "--data", str(root / "evalset"),
            "--out", str(out), "--asr", "none", "--cache", str(root / "cache"), "--workers", "1", *TINY_SET, *extra]


@pytest.fixture(scope="module")
def challenge(tmp_path_factory):
    """One challenge run on synthetic speakers (4 train speakers, 4 others evaluated), then a rerun."""
    root = tmp_path_factory.mktemp("challenge")
    make_corpus(root, n_speakers=4, n_utts=4, name="train")
    make_corpus(root, n_speakers=4, n_utts=3, name="evalset")
    out = root / "out"
    assert main(challenge_args(root, out)) == 0
    first = {"stages": json.loads((out / "challenge.json").read_text()),
             "results": (out / "results.json").read_text(),
             "mtimes": {p: p.stat().st_mtime_ns for p in (out / "attacker").rglob("*") if p.is_file()}
             | {p: p.stat().st_mtime_ns for p in (out / "anon").rglob("*.wav")}}
    plots = {p: p.stat().st_mtime_ns for p in (out / "plots").iterdir() if p.suffix in (".png", ".pdf")}
    assert plots
    assert main(challenge_args(root, out)) == 0
    return root, out, first, plots


def _model_dir(out: Path) -> Path:
    (model,) = [p for p in (out / "attacker").iterdir() if p.is_dir()]
    return model


def test_challenge_runs_every_stage_and_labels_attackers_and_models(challenge):
    root, out, first, _ = challenge
    stages = first["stages"]["stages"]
    assert stages["anonymise training sets"]["processed"] == 16
    assert stages["train attacker"]["trained"] is True
    assert stages["anonymise evaluation sets"]["processed"] == 12
    assert stages["evaluate"]["computed"] > 0
    results = from_json(first["results"])
    eers = {(r.condition, r.attacker): r for r in results if r.metric == "eer" and r.set == "evalset"}
    assert set(eers) == {("o-o", ""), ("o-a", "ignorant"), ("a-a", "lazy-informed"), ("a-a", "semi-informed")}
    assert eers[("o-o", "")].model == eers[("a-a", "lazy-informed")].model == "ge2e"
    model = _model_dir(out)
    assert eers[("a-a", "semi-informed")].model.startswith(model.name + " (ecapa-")
    # The semi-informed scores come from the trained model: they differ from the lazy-informed ones.
    lazy = {r.metric: r.value for r in results if r.attacker == "lazy-informed" and r.variant != "target"}
    semi = {r.metric: r.value for r in results if r.attacker == "semi-informed" and r.variant != "target"}
    assert set(lazy) == set(semi) and lazy["min_cllr"] != semi["min_cllr"]
    assert {r.model for r in results if r.attacker == "semi-informed"} == {eers[("a-a", "semi-informed")].model}
    header = next(csv.reader((out / "results.csv").open()))
    assert header[-3:] == ["attacker", "model", "note"]
    markdown = (out / "results.md").read_text()
    # a-a: one row per attacker, the metrics' columns once.
    assert re.search(r"\| b2 +\| lazy-informed +\| +[0-9.]+ +\|", markdown)
    assert re.search(r"\| b2 +\| semi-informed +\| +[0-9.]+ +\|", markdown)
    assert "a-a: anonymised enrolment, anonymised trials (lazy-informed and semi-informed attackers)" in markdown
    assert f"a-a semi-informed attacker: model {model.name}" in markdown
    html = (out / "report.html").read_text()
    assert "semi-informed" in html and str(model) in html
    training = json.loads((model / "training.json").read_text())
    assert training["status"] == "complete" and training["hparams"]["number_of_epochs"] == 2
    assert [entry["anonymisation"]["system"] for entry in training["data"]] == ["b2"]


def test_rerun_computes_nothing_and_redraws_no_figure(challenge):
    root, out, first, first_plots = challenge
    stages = json.loads((out / "challenge.json").read_text())["stages"]
    assert stages["anonymise training sets"]["processed"] == 0 and stages["anonymise training sets"]["resumed"] == 16
    assert stages["train attacker"]["trained"] is False
    assert stages["anonymise evaluation sets"]["processed"] == 0
    assert stages["evaluate"]["computed"] == 0
    assert {p: p.stat().st_mtime_ns for p in first["mtimes"]} == first["mtimes"], "a cached stage rewrote its output"
    assert from_json((out / "results.json").read_text()) == from_json(first["results"])
    assert {p: p.stat().st_mtime_ns for p in first_plots} == first_plots, "a rerun drew an unchanged figure again"


def test_more_epochs_train_the_same_model_further(challenge, tmp_path):
    root, out, _, _ = challenge
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    drawn = {p: p.stat().st_mtime_ns for p in (copy / "plots").glob("*.p*")}
    (copy / "plots" / "evalset_det.pdf").unlink()
    assert main(challenge_args(root, copy, "--train-set", "number_of_epochs=3")) == 0
    stages = json.loads((copy / "challenge.json").read_text())["stages"]
    assert stages["train attacker"]["trained"] is True and stages["evaluate"]["computed"] > 0
    model = Path(stages["train attacker"]["model"])
    assert model.name == _model_dir(out).name
    assert json.loads((model / "training.json").read_text())["epochs_done"] == 3
    # The semi-informed scores changed, so both figures of their set were drawn again (a missing file too).
    assert all(p.stat().st_mtime_ns != mtime for p, mtime in drawn.items()), drawn


def test_challenge_with_iemocap_scores_ser_uar_beside_the_published_figures(challenge, tmp_path):
    import shutil as copier

    from tests.helpers.speechbrain_layouts import write_ser_dir
    from tests.helpers.ser_sets import UTTERANCES, write_set

    root, out, _, _ = challenge
    copy = tmp_path / "out"
    copier.copytree(out, copy)
    iemocap = write_set(tmp_path / "IEMOCAP_dev", UTTERANCES, 0.5)
    source = write_ser_dir(tmp_path / "ser_source" / "fold_1")   # beside its tiny wav2vec2 hub folder
    models = tmp_path / "ser"
    for fold in ("fold_1", "fold_2"):
        copier.copytree(source, models / fold, ignore=copier.ignore_patterns("collected"))
    args = challenge_args(root, copy, "--iemocap", str(iemocap), "--ser-models", str(models))
    assert main(args) == 0
    stages = json.loads((copy / "challenge.json").read_text())["stages"]
    assert stages["train attacker"]["trained"] is False
    assert stages["anonymise evaluation sets"]["processed"] == len(UTTERANCES)
    results = from_json((copy / "results.json").read_text())
    uar = {r.system: r for r in results if r.set == "IEMOCAP_dev" and r.metric == "uar" and r.variant == "all"}
    assert set(uar) == {"original", "b2"} and {r.model for r in uar.values()} == {"ser"}
    # The published figure is the mean over folds: it shares the column of the user's fold-mean UAR.
    published = [r for r in results if r.system == "published (VPC 2024) B2" and r.metric == "uar"
                 and r.set == "IEMOCAP_dev"]
    assert [r.variant for r in published] == ["fold-mean"]
    assert {r.system for r in results if r.set == "IEMOCAP_dev" and r.metric == "uar"
            and r.variant == "fold-mean"} >= {"original", "b2", "published (VPC 2024) B2"}
    assert main(args) == 0
    assert json.loads((copy / "challenge.json").read_text())["stages"]["evaluate"]["computed"] == 0


def _evaluate_args(root: Path, anon: Path, model: Path, out: Path) -> list[str]:
    return ["evaluate", "--protocol", "vpc2024", "--orig", str(root / "evalset"), "--anon", str(anon), "--system", "b2",
            "--asv-model", str(model), "--set", "asr=null", "--cache", str(root / "cache"), "--out", str(out)]


def test_evaluate_asv_model_scores_semi_informed_a_a(challenge, tmp_path, caplog):
    root, out, _, _ = challenge
    model = _model_dir(out)
    with caplog.at_level(logging.WARNING):
        assert main(_evaluate_args(root, out / "anon" / "evalset_b2", model, tmp_path / "ev")) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "trained" in r.getMessage()]
    results = from_json((tmp_path / "ev" / "results.json").read_text())
    challenge_results = from_json((out / "results.json").read_text())
    semi = [r for r in results if r.attacker == "semi-informed"]
    assert semi and all(r.condition == "a-a" for r in semi)
    assert {r for r in semi} == {r for r in challenge_results if r.attacker == "semi-informed"}
    assert {(r.condition, r.attacker) for r in results if r.metric == "eer"} == {
        ("o-o", ""), ("o-a", "ignorant"), ("a-a", "lazy-informed"), ("a-a", "semi-informed")}
    assert "semi-informed attacker" in (tmp_path / "ev" / "results.md").read_text()


def test_model_trained_on_another_system_warns(challenge, tmp_path, caplog):
    root, out, _, _ = challenge
    evalset = read_data_dir(root / "evalset")
    anonymise_set(evalset, load_system_config("b2r"), tmp_path / "evalset_b2r", progress=False)
    with caplog.at_level(logging.WARNING):
        assert main(_evaluate_args(root, tmp_path / "evalset_b2r", _model_dir(out), tmp_path / "ev")) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("another system than the one evaluated" in w and "trained on b2 (train_b2)" in w
               and "evaluating b2r output" in w for w in warnings), warnings
    assert "another system than the one evaluated" in (tmp_path / "ev" / "results.md").read_text()


@pytest.mark.parametrize("missing", ["embedding_model.ckpt", "hyperparams.yaml"])
def test_model_dir_missing_a_file_is_refused_before_writing(challenge, tmp_path, capsys, missing):
    root, out, _, _ = challenge
    broken = tmp_path / "model"
    shutil.copytree(_model_dir(out), broken)
    (broken / missing).unlink()
    assert main(_evaluate_args(root, out / "anon" / "evalset_b2", broken, tmp_path / "ev")) == 2
    assert str(broken / missing) in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()


def test_unfinished_model_is_refused(challenge, tmp_path, capsys):
    root, out, _, _ = challenge
    unfinished = tmp_path / "model"
    shutil.copytree(_model_dir(out), unfinished)
    training = json.loads((unfinished / "training.json").read_text())
    (unfinished / "training.json").write_text(json.dumps(training | {"status": "training"}))
    assert main(_evaluate_args(root, out / "anon" / "evalset_b2", unfinished, tmp_path / "ev")) == 2
    assert "not 'complete'" in capsys.readouterr().err and not (tmp_path / "ev").exists()


def test_bad_challenge_input_fails_before_writing(challenge, tmp_path, capsys):
    root, _, _, _ = challenge
    one_speaker = read_data_dir(root / "train")
    make_corpus(tmp_path, n_speakers=1, n_utts=3, name="solo")
    make_corpus(tmp_path / "elsewhere", n_speakers=2, n_utts=3, name="evalset")
    cases = [
        (["--train", str(tmp_path / "elsewhere" / "evalset")], "both named 'evalset'"),
        (["--train", str(tmp_path / "solo")], "a speaker classifier needs at least 2"),
        (["--train-set", "sentence_len=3.0"], "no utterance of at least one 3 s chunk"),
        (["--iemocap", str(root / "evalset"), "--ser-models", str(tmp_path)], "no utt2emo"),
        (["--iemocap", str(root / "evalset")], "no utt2emo"),
        (["--set", "bogus=1"], "unknown setting"),
    ]
    for extra, message in cases:
        out = tmp_path / "out"
        args = challenge_args(root, out, *extra)
        if extra[0] == "--train":
            index = args.index("--train")
            del args[index:index + 2]
        assert main(args) == 2, extra
        assert message in capsys.readouterr().err, extra
        assert not out.exists(), extra
    assert one_speaker.speakers  # the shared training set itself was left alone


def test_old_results_json_reads_with_empty_attacker_and_model():
    old = '[{"set": "s", "system": "b2", "condition": "a-a", "metric": "eer", "variant": "rocch", ' \
          '"value": 3.1, "unit": "%"}]'
    (result,) = from_json(old)
    assert result == Result("s", "b2", "a-a", "eer", "rocch", 3.1, "%") and result.attacker == result.model == ""


@pytest.mark.slow
def test_challenge_under_ray_gives_the_local_outputs(challenge, tmp_path):
    """The Ray backend (a local two-node cluster) anonymises and embeds for the challenge: same bytes, same numbers."""
    import ray
    from ray.cluster_utils import Cluster

    root, out, first, _ = challenge
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        args = challenge_args(root, tmp_path / "ray", "--backend", "ray", "--ray-address", cluster.address)
        args[args.index("--cache") + 1] = str(tmp_path / "cache")
        assert main(args) == 0
    finally:
        ray.shutdown()
        cluster.shutdown()
    stages = json.loads((tmp_path / "ray" / "challenge.json").read_text())["stages"]
    assert stages["anonymise evaluation sets"]["processed"] == 12 and stages["evaluate"]["computed"] > 0
    for wav in sorted((out / "anon").rglob("*.wav")):
        assert (tmp_path / "ray" / wav.relative_to(out)).read_bytes() == wav.read_bytes(), wav
    manifest = json.loads((tmp_path / "ray" / "anon" / "evalset_b2" / "run.json").read_text())
    assert manifest["backend"]["name"] == "ray"
    # The same weights (torch.save names its archive after the temporary file, so the checkpoints' bytes, and the
    # model labels' sha256, differ).
    ray_model = Path(stages["train attacker"]["model"])
    local_state, ray_state = (safe_load(d / "embedding_model.ckpt") for d in (_model_dir(out), ray_model))
    assert local_state.keys() == ray_state.keys()
    assert all(torch.equal(local_state[k], ray_state[k]) for k in local_state)
    without_model = [replace(r, model="") if r.attacker == "semi-informed" else r
                     for r in from_json((tmp_path / "ray" / "results.json").read_text())]
    assert without_model == [replace(r, model="") if r.attacker == "semi-informed" else r
                             for r in from_json(first["results"])]


def test_demo_split_keeps_attacker_speakers_out_of_the_trials(tmp_path):
    from voxanon.data_prep.demo_corpus import demo_corpus_dir
    from voxanon.pipeline.commands.demo import demo_split

    demo = read_data_dir(demo_corpus_dir())
    train_dir, eval_dir, note = demo_split(demo, tmp_path)
    train, evaluation = read_data_dir(train_dir), read_data_dir(eval_dir)
    assert not set(train.speakers) & set(evaluation.speakers)
    assert set(train.speakers) | set(evaluation.speakers) == set(demo.speakers)
    assert train.trials is None and train.enrolls is None and len(train.wav) == 14 * len(train.speakers)
    assert {t.enrol_speaker for t in evaluation.trials} == set(evaluation.speakers)
    assert {evaluation.utt2spk[t.test_utt] for t in evaluation.trials} == set(evaluation.speakers)
    assert sorted(evaluation.spk2gender.values()) == ["f"] * 3 + ["m"] * 3
    assert all(Path(path).is_absolute() and Path(path).is_file() for path in evaluation.wav.values())
    assert note.startswith("speaker-disjoint") and "60 target and 120 non-target" in note


@pytest.mark.slow
def test_demo_semi_informed_prints_both_attackers_for_b2_and_b2r(tmp_path, capsys):
    assert main(["demo", "--semi-informed", "--out", str(tmp_path), "--attacker-epochs", "2", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "speaker-disjoint" in printed
    lines = [line for line in printed.splitlines() if line.startswith("| demo_eval")]
    assert [line.split("|")[2].strip() for line in lines] == ["b2", "b2r"]
    header = next(line for line in printed.splitlines() if line.startswith("| set"))
    assert "lazy-informed a-a EER (%)" in header and "semi-informed a-a EER (%)" in header


def test_small_set_run_says_each_thing_once_naming_the_challenges_options(challenge, tmp_path, capsys, caplog):
    """Issue 30 on a small set: a speaker without a long enough utterance is refused naming --train-set (not the
    system's --set); with drop_short_speakers each data warning is given once (the check ahead of the
    anonymisation kept quiet); the challenge's step size warns once before training that the schedule hardly
    starts, and the summary, training.json and the report record the learning rate reached and the accuracy;
    evaluation sets without transcripts say once, and in results.md under the tables, that WER was not computed."""
    cache = challenge[0] / "cache"   # the evaluation set's embeddings are the fixture's
    train = make_corpus(tmp_path, n_speakers=5, n_utts=3, name="train")
    for utt in [u for u in train.wav if u.startswith("spk4-")]:   # shorter than a 0.5 s chunk
        soundfile.write(train.wav[utt], np.full(4000, 0.1, dtype=np.float32), 16000, subtype="PCM_16")
    make_corpus(tmp_path, n_speakers=4, n_utts=3, name="evalset")
    (tmp_path / "evalset" / "text").unlink()
    args = [arg for arg in challenge_args(tmp_path, tmp_path / "out", "--train-set", "step_size=65000")
            if arg not in ("--asr", "none")]
    args[args.index("--cache") + 1] = str(cache)
    assert main(args) == 2
    error = capsys.readouterr().err
    assert "--train-set drop_short_speakers=true" in error and "--train-set sentence_len=" in error
    assert "--set " not in error and not (tmp_path / "out").exists()

    with caplog.at_level(logging.WARNING):
        assert main([*args, "--train-set", "drop_short_speakers=true"]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    for text in ("speaker(s) are not trained on", "shorter than one 0.5 s chunk are not used",
                 "schedule hardly starts", "hardly trained", "WER not computed"):
        assert len([w for w in warnings if text in w]) == 1, (text, warnings)
    (before,) = [w for w in warnings if "schedule hardly starts" in w]
    assert "--train-set step_size=" in before and "--train-set number_of_epochs=" in before
    out = capsys.readouterr().out
    assert re.search(r"train attacker: trained .*; 4 step\(s\) against step_size 65000: lr reached 6.25e-07 .*"
                     r"last epoch train accuracy [0-9.]+; HARDLY TRAINED", out), out
    model = _model_dir(tmp_path / "out")
    schedule = json.loads((model / "training.json").read_text())["schedule"]
    assert schedule["undertrained"] and schedule["steps"] == 4
    markdown = (tmp_path / "out" / "results.md").read_text()
    assert "**semi-informed attacker training**: 4 step(s) against step_size 65000: lr reached 6.25e-07" in markdown
    assert "hardly trained" in markdown
    tables, rest = markdown.split("## All metrics")
    assert "WER not computed for 1 set(s)" in tables.split("## Results by condition")[1]
    assert "WER not computed" not in rest and "WER not computed" in (tmp_path / "out" / "report.html").read_text()
    stages = json.loads((tmp_path / "out" / "challenge.json").read_text())["stages"]
    assert stages["train attacker"]["training"]["undertrained"]
