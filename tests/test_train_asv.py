"""voxanon train asv: the VoicePrivacy 2024 ECAPA attacker trained on B2-anonymised demo speakers.

A tiny ECAPA (the challenge's architecture with narrow channels, 1.5 s chunks) keeps the
module's training within a few seconds; the challenge's full-size shapes are checked key by
key without training.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from voxanon.data_prep.corpus import DataDir, read_data_dir, write_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.data_prep.errors import VoxanonError
from voxanon.eval.eer import rocch_eer
from voxanon.models.checkpoints.safe import safe_load
from voxanon.pipeline.training.asv import train_asv
from voxanon.pipeline.training.asv_data import select_utterances
from voxanon.pipeline.training.asv_export import CLASSIFIER_FILE, export_model
from voxanon.pipeline.training.asv_loader import epoch_batches
from voxanon.pipeline.training.asv_settings import TRAINING_FILE, default_hparams, resolve_hparams
from voxanon.pipeline.training.asv_trainer import batches_per_epoch, reference_schedule, schedule_advice, schedule_reach
from voxanon.pipeline.cli import main
from voxanon.pipeline.evaluation.computations import speaker_encoder_factory
from voxanon.pipeline.evaluation.scoring import cosine_trial_scores, speaker_enrolment
from voxanon.pipeline.runner import anonymise_set
from voxanon.pipeline.systems.recipes import load_system_config

from tests.helpers.corpora import make_corpus

from tests.helpers.corpora import single_torch_thread

TINY = {"channels": [32, 32, 32, 32, 96], "lin_neurons": 32, "attention_channels": 16, "se_channels": 16,
        "sentence_len": 1.5, "batch_size": 16, "step_size": 20, "valid_ratio": 0.125}
TINY_SET = [f"{key}={json.dumps(value)}" for key, value in TINY.items()]
EPOCHS = 6
TRAIN_UTTS = range(1, 9)   # demo utterances -0001..-0008 of every speaker train the attacker
ENROL_UTTS = range(9, 11)  # -0009, -0010 enrol; -0011..-0014 are the held-out trials


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with single_torch_thread():
        yield


@pytest.fixture(scope="module")
def b2_demo(tmp_path_factory):
    """The demo speakers anonymised with B2: a training set and a held-out enrolment/trial set."""
    root = tmp_path_factory.mktemp("asv")
    demo = read_data_dir(demo_corpus_dir())
    config = load_system_config("b2")
    sets = {}
    for name, numbers in (("train", TRAIN_UTTS), ("held_out", range(9, 15))):
        subset = demo.subset([u for u in demo.wav if int(u.rsplit("-", 1)[1]) in numbers])
        subset.wav = subset.absolute_wav()
        subset.name, subset.enrolls, subset.trials = name, None, None
        anonymise_set(subset, config, root / f"{name}_b2", progress=False)
        sets[name] = read_data_dir(root / f"{name}_b2")
    return root, sets


@pytest.fixture(scope="module")
def trained(b2_demo):
    root, sets = b2_demo
    model = train_asv([root / "train_b2"], root / "model", {**TINY, "number_of_epochs": EPOCHS}, device="cpu",
                      progress=False).model_dir
    untrained = train_asv([root / "train_b2"], root / "untrained", {**TINY, "number_of_epochs": 0}, device="cpu",
                          progress=False).model_dir
    return root, sets, model, untrained


def _held_out_eer(model_dir: Path, held_out: DataDir) -> float:
    _, build = speaker_encoder_factory(f"ecapa:{model_dir}")
    encoder = build()
    waves = [soundfile.read(held_out.audio_path(u), dtype="float32")[0] for u in held_out.utterances]
    vectors = dict(zip(held_out.utterances, encoder.embed(waves)))
    enrol = [u for u in held_out.utterances if int(u.rsplit("-", 1)[1]) in ENROL_UTTS]
    tests = {u: v for u, v in vectors.items() if u not in enrol}
    from voxanon.data_prep.corpus import Trial
    trials = [Trial(spk, utt, held_out.utt2spk[utt] == spk) for spk in held_out.speakers for utt in sorted(tests)]
    tar, non, left_out = cosine_trial_scores(speaker_enrolment(vectors, enrol, held_out.utt2spk), tests, trials)
    assert left_out == 0 and len(tar) == 13 * 4 and len(non) == 13 * 12 * 4
    return rocch_eer(tar, non)


def test_trained_attacker_beats_random_init_on_held_out_anonymised_trials(trained):
    root, sets, model, untrained = trained
    summary = json.loads((model / TRAINING_FILE).read_text())
    assert summary["status"] == "complete" and summary["epochs_done"] == EPOCHS
    losses = [epoch["train_loss"] for epoch in summary["epochs"]]
    assert losses[-1] < 0.7 * losses[0], losses
    assert summary["epochs"][-1]["valid_accuracy"] > summary["epochs"][0]["valid_accuracy"]
    assert summary["selection"] == {"speakers": 13, "train_utterances": 13 * 7, "valid_utterances": 13,
                                    "skipped_short_utterances": 0, "skipped_unreadable_utterances": 0,
                                    "dropped_speakers": 0}
    assert summary["validation"] == {"valid_ratio": 0.125, "asked": 13, "held_out": 13, "speakers": 13, "status": "on"}
    trained_eer, random_eer = _held_out_eer(model, sets["held_out"]), _held_out_eer(untrained, sets["held_out"])
    # Seed 1986: 4.6 % against 9.7 % (a random ECAPA already separates 13 voices fairly well).
    assert trained_eer < random_eer, (trained_eer, random_eer)


def test_model_folder_records_the_training_data(trained):
    root, _, model, _ = trained
    summary = json.loads((model / TRAINING_FILE).read_text())
    run = json.loads((root / "train_b2" / "run.json").read_text())
    [entry] = summary["data"]
    assert entry["name"] == "train_b2" and entry["path"] == str((root / "train_b2").resolve())
    assert entry["anonymisation"] == {"system": "b2", "config_hash": run["config_hash"], "status": "complete"}
    assert entry["utterances"] == 13 * 8 and entry["speakers"] == 13
    assert summary["hparams"]["channels"] == TINY["channels"] and summary["hparams"]["margin"] == 0.2


def test_speechbrain_encoder_classifier_gives_voxanons_embeddings(trained):
    from speechbrain.inference.speaker import EncoderClassifier

    _, sets, model, _ = trained
    speechbrain_model = EncoderClassifier.from_hparams(source=str(model), savedir=None)
    _, build = speaker_encoder_factory(f"ecapa:{model}")
    ours = build()
    held_out = sets["held_out"]
    for utt in held_out.utterances[:3]:
        wave = soundfile.read(held_out.audio_path(utt), dtype="float32")[0]
        reference = speechbrain_model.encode_batch(torch.from_numpy(wave)[None]).reshape(-1).numpy()
        assert np.abs(reference - ours.embed([wave])[0]).max() < 1e-5
    labels = speechbrain_model.hparams.label_encoder
    assert [labels.ind2lab[i] for i in range(13)] == held_out.speakers


def test_challenge_sized_model_is_saved_key_for_key(tmp_path):
    """The full VPC 2024 shapes: every key and shape of speechbrain's own ECAPA_TDNN and Classifier."""
    from speechbrain.inference.speaker import EncoderClassifier
    from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN, Classifier

    from voxanon.models.nets.asv_model import SpeakerClassifier
    from voxanon.models.checkpoints.ecapa import ecapa_config_from_state
    from voxanon.models.nets.speaker import SSL_SAS_ECAPA
    from voxanon.pipeline.training.asv_settings import ecapa_config

    hparams = default_hparams()
    speakers = [f"s{i:03d}" for i in range(921)]
    export_model(SpeakerClassifier(ecapa_config(hparams), len(speakers)), hparams, speakers, tmp_path)
    reference = {"embedding_model.ckpt": ECAPA_TDNN(80, channels=[512, 512, 512, 512, 1536], kernel_sizes=[5, 3, 3, 3, 1],
                                                    dilations=[1, 2, 3, 4, 1], attention_channels=128,
                                                    lin_neurons=192).state_dict(),
                 CLASSIFIER_FILE: Classifier(192, out_neurons=921).state_dict()}
    for name, state in reference.items():
        saved = safe_load(tmp_path / name)
        assert {k: tuple(v.shape) for k, v in saved.items()} == {k: tuple(v.shape) for k, v in state.items()}, name
    assert ecapa_config_from_state(safe_load(tmp_path / "embedding_model.ckpt")) == SSL_SAS_ECAPA
    loaded = EncoderClassifier.from_hparams(source=str(tmp_path), savedir=None)
    for key, value in safe_load(tmp_path / "embedding_model.ckpt").items():
        assert torch.equal(loaded.mods.embedding_model.state_dict()[key], value), key


def _latest_checkpoint(model_dir: Path) -> tuple[int, int] | None:
    """(epochs done, batches into the next epoch) of the newest checkpoint file."""
    names = sorted((model_dir / "checkpoints").glob("ckpt_*.pt"))
    if not names:
        return None
    _, _, epoch, position = names[-1].stem.split("_")
    return int(epoch), int(position)


def test_kill_9_and_resume_gives_the_uninterrupted_weights(trained, tmp_path):
    """2 epochs straight equal 2 epochs with a kill -9 in the middle of epoch 2 (checkpoints every batch)."""
    root, _, _, _ = trained
    data = root / "train_b2"
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    base = ["train", "asv", "--data", str(data), "--device", "cpu", "--quiet", *sum((["--set", s] for s in TINY_SET), [])]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "voxanon.pipeline.cli", *base, "--out", str(killed),
                                "--set", "number_of_epochs=50", "--set", "checkpoint_interval_minutes=0"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert main([*base, "--out", str(straight), "--set", "number_of_epochs=2"]) == 0
        deadline = time.monotonic() + 120
        while (_latest_checkpoint(killed) or (0, 0)) < (1, 2):
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "the training process never reached epoch 2"
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        stopped_at = _latest_checkpoint(killed)
        assert (1, 0) < stopped_at < (2, 0), stopped_at
        assert not (killed / "embedding_model.ckpt").exists()
        assert json.loads((killed / TRAINING_FILE).read_text())["status"] == "training"
        assert main([*base, "--out", str(killed), "--set", "number_of_epochs=2"]) == 0
    finally:
        if process.poll() is None:
            process.kill()
    for name in ("embedding_model.ckpt", CLASSIFIER_FILE):
        first, second = safe_load(straight / name), safe_load(killed / name)
        assert first.keys() == second.keys()
        for key in first:
            assert torch.equal(first[key], second[key]), (name, key)
    timing = ("seconds", "utterances_per_s")
    history = [json.loads((folder / TRAINING_FILE).read_text())["epochs"] for folder in (straight, killed)]
    assert [{k: v for k, v in e.items() if k not in timing} for e in history[0]] == \
        [{k: v for k, v in e.items() if k not in timing} for e in history[1]]


def test_resume_refuses_other_settings(trained, capsys):
    root, _, model, _ = trained
    args = ["train", "asv", "--data", str(root / "train_b2"), "--out", str(model), "--device", "cpu", "--quiet",
            *sum((["--set", f"{k}={json.dumps(v)}"] for k, v in TINY.items()), [])]
    assert main([*args, "--set", "lr=0.02", "--set", f"number_of_epochs={EPOCHS}"]) == 2
    assert "cannot resume" in capsys.readouterr().err
    assert main([*args, "--set", "number_of_epochs=2"]) == 2
    assert "more than number_of_epochs" in capsys.readouterr().err


# Bad input: a clear error, and nothing written -------------------------------------------------------


def _run(args: list[str], capsys) -> str:
    assert main(["train", "asv", *args, "--device", "cpu", "--quiet"]) == 2
    return capsys.readouterr().err


def test_fewer_than_two_speakers_is_an_error(tmp_path, capsys):
    corpus = make_corpus(tmp_path, n_speakers=1, n_utts=3, seconds=2.0)
    error = _run(["--data", str(corpus.path), "--out", str(tmp_path / "model")], capsys)
    assert "1 speaker(s) (spk0)" in error and "at least 2" in error and str(corpus.path) in error
    assert not (tmp_path / "model").exists()


def test_speaker_whose_only_utterance_is_shorter_than_a_chunk_is_an_error(tmp_path, capsys):
    corpus = make_corpus(tmp_path, n_speakers=3, n_utts=2, seconds=3.5)
    soundfile.write(corpus.wav["spk1-000"], np.full(16000, 0.1, dtype=np.float32), 16000)
    write_data_dir(corpus.subset([u for u in corpus.wav if u != "spk1-001"]), corpus.path)
    error = _run(["--data", str(corpus.path), "--out", str(tmp_path / "model")], capsys)
    assert "1 speaker(s) have no utterance of at least one 3 s chunk: spk1 (in toy)" in error
    assert not (tmp_path / "model").exists()


def test_missing_data_directory_file_is_an_error(tmp_path, capsys):
    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=3.5)
    (corpus.path / "utt2spk").unlink()
    error = _run(["--data", str(corpus.path), "--out", str(tmp_path / "model")], capsys)
    assert "utt2spk: missing" in error and str(corpus.path) in error
    (corpus.path / "wav.scp").unlink()
    assert "wav.scp: missing" in _run(["--data", str(corpus.path), "--out", str(tmp_path / "model")], capsys)
    assert not (tmp_path / "model").exists()


def test_unknown_or_bad_settings_are_errors(tmp_path, capsys):
    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=3.5)
    assert "unknown setting(s) lerning_rate" in _run(["--data", str(corpus.path), "--out", str(tmp_path / "m"),
                                                      "--set", "lerning_rate=0.1"], capsys)
    assert "utt_selection must be one of" in _run(["--data", str(corpus.path), "--out", str(tmp_path / "m"),
                                                   "--set", "utt_selection=spk"], capsys)
    with pytest.raises(VoxanonError, match="channels must be a list of 5"):
        resolve_hparams({"channels": [512, 512]})
    assert not (tmp_path / "m").exists()


# Selection and schedule --------------------------------------------------------------------------------


def test_utterance_selection_follows_the_challenges_ways():
    utt2spk = {f"{spk}-{chapter}-{n:04d}": spk for spk, chapters in (("11", {"c1": 5, "c2": 1, "c3": 3}),
                                                                      ("22", {"c9": 4}))
               for chapter, count in chapters.items() for n in range(count)}
    settings = {**default_hparams(), "num_utt": 4}
    diverse = select_utterances(utt2spk, {**settings, "utt_selection": "spk-diverse-sess"})
    assert len(diverse) == 8 and {u.split("-")[1] for u in diverse if u.startswith("11-")} == {"c1", "c2", "c3"}
    assert diverse == select_utterances(utt2spk, {**settings, "utt_selection": "spk-diverse-sess"})
    per_session = select_utterances(utt2spk, {**settings, "num_utt": 2, "utt_selection": "spk-sess"})
    assert len(per_session) == 2 + 1 + 2 + 2
    assert len(select_utterances(utt2spk, {**settings, "utt_selection": "spk-random"})) == 8
    assert select_utterances(utt2spk, default_hparams()) == sorted(utt2spk)
    one = select_utterances(utt2spk, {**default_hparams(), "num_spk": 1})
    assert len({utt2spk[u] for u in one}) == 1


def test_cyclic_learning_rate_is_speechbrains():
    from speechbrain.nnet.schedulers import CyclicLRScheduler

    from voxanon.models.nets.asv_model import cyclic_learning_rate

    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    scheduler = CyclicLRScheduler(base_lr=1e-8, max_lr=0.01, step_size=3)
    for step in range(1, 15):
        scheduler.on_batch_end(optimizer)
        assert cyclic_learning_rate(step, 1e-8, 0.01, 3) == pytest.approx(optimizer.param_groups[0]["lr"], abs=1e-15)


def test_epoch_order_depends_on_seed_and_epoch_only_and_never_leaves_one_utterance_alone():
    from voxanon.pipeline.training.asv_loader import epoch_batches

    choices = np.full(33, 1000.0)
    batches = epoch_batches(33, choices, 16, seed=5, epoch=2)
    assert [len(b) for b in batches] == [16, 17]
    assert sorted(i for b in batches for i, _ in b) == list(range(33))
    assert batches == epoch_batches(33, choices, 16, seed=5, epoch=2) != epoch_batches(33, choices, 16, 5, 3)
    assert all(0 <= start < 1000 for b in batches for _, start in b)
    with pytest.raises(VoxanonError, match="batch_size must be an integer >= 2"):
        resolve_hparams({"batch_size": 1})


def test_non_standard_kernels_and_dilations_load_as_speechbrain_builds_them(tmp_path):
    """Kernel sizes come from the weight shapes, dilations (which no weight shows) from hyperparams.yaml."""
    from speechbrain.inference.speaker import EncoderClassifier

    from voxanon.models.nets.asv_model import SpeakerClassifier
    from voxanon.pipeline.training.asv_settings import ecapa_config

    hparams = resolve_hparams({**TINY, "kernel_sizes": [3, 5, 3, 1, 1], "dilations": [1, 3, 2, 1, 1]})
    torch.manual_seed(0)
    export_model(SpeakerClassifier(ecapa_config(hparams), 3), hparams, ["a", "b", "c"], tmp_path)
    tag, build = speaker_encoder_factory(f"ecapa:{tmp_path}")
    ours = build()
    assert ours.config.kernel_sizes == (3, 5, 3, 1, 1) and ours.config.dilations == (1, 3, 2, 1, 1)
    assert tag.endswith("-dil1.3.2.1.1")
    wave = np.random.default_rng(0).standard_normal(16000).astype(np.float32) * 0.1
    reference = EncoderClassifier.from_hparams(source=str(tmp_path), savedir=None)
    expected = reference.encode_batch(torch.from_numpy(wave)[None]).reshape(-1).numpy()
    assert np.abs(expected - ours.embed([wave])[0]).max() < 1e-5


def test_schedule_warning_is_relative_to_the_challenges_run_on_train_clean_360():
    """Issue 30: the challenge's configuration on train-clean-360 (104,014 utterances, one chunk each per epoch,
    10 % held out: 93,613 chunks, 366 batches of 256, 10 epochs) takes 3,660 steps to lr 5.63e-4; it is not
    warned about, and a run whose learning rate stays under a tenth of that is."""
    h = default_hparams()
    reference = reference_schedule()
    assert reference["steps"] == 10 * 366 == 3660
    assert reference["lr"] == pytest.approx(1e-8 + (0.01 - 1e-8) * 3660 / 65000)
    assert not schedule_reach(h, 3660)["undertrained"]
    assert schedule_reach(h, 365)["peak_lr"] < 0.1 * reference["lr"] and schedule_reach(h, 365)["undertrained"]
    assert not schedule_reach(h, 367)["undertrained"]
    # The run: 2 steps reach 3.18e-7; the advice's step size reaches the yardstick in those 2 steps.
    reach = schedule_reach(h, 2)
    assert reach["undertrained"] and reach["final_lr"] == pytest.approx(3.177e-7, rel=1e-3)
    advice = schedule_advice(reach, h, "--train-set")
    assert "--train-set step_size=35 " in advice and "--train-set number_of_epochs" in advice
    assert "3660 steps on LibriSpeech train-clean-360" in advice and "0.0032 % of the maximum 0.01" in advice
    assert not schedule_reach({**h, "step_size": 35}, 2)["undertrained"]
    # A full half cycle reaches the maximum even where the run ends low in the next one.
    assert schedule_reach({**h, "step_size": 10}, 20)["peak_lr"] == h["lr"]
    for n_train in (2, 255, 256, 257, 93613):
        assert batches_per_epoch(n_train, 256) == len(epoch_batches(n_train, np.ones(n_train), 256, 0, 0))
