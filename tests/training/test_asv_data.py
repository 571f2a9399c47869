"""voxanon train asv on awkward real-world sets: speakers without a long enough utterance, too few utterances for
the validation split, missing or unreadable files, and a model folder that is already finished.

A tiny ECAPA trained for one epoch on a few synthetic vowels: these tests are about what the command does with
the data and what it records, not about the model.
"""
from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest
import soundfile

from voxanon.data_prep.corpus import write_data_dir
from voxanon.pipeline.cli import main
from voxanon.pipeline.training.asv.run import train_asv
from voxanon.pipeline.training.asv.data import validation_counts
from voxanon.pipeline.training.asv.settings import SKIPPED_FILE, TRAINING_FILE, resolve_hparams

from tests.helpers.corpora import make_corpus

from tests.helpers.corpora import single_torch_thread

TINY = {"channels": [16, 16, 16, 16, 48], "lin_neurons": 16, "attention_channels": 8, "se_channels": 8,
        "sentence_len": 1.5, "batch_size": 4, "number_of_epochs": 1}
TINY_SET = [arg for key, value in TINY.items() for arg in ("--set", f"{key}={json.dumps(value)}")]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with single_torch_thread():
        yield


def _train(args: list[str]) -> int:
    return main(["train", "asv", *args, "--device", "cpu", "--quiet", *TINY_SET])


def _training(model_dir) -> dict:
    return json.loads((model_dir / TRAINING_FILE).read_text())


# Speakers with no utterance of one chunk -----------------------------------------------------------------------


def _set_with_a_short_speaker(tmp_path):
    """spk1's only utterance is 1 s, shorter than a 1.5 s chunk; the others have three of 2 s or more."""
    corpus = make_corpus(tmp_path, n_speakers=3, n_utts=3, seconds=2.0)
    soundfile.write(corpus.wav["spk1-000"], np.full(16000, 0.1, dtype=np.float32), 16000, subtype="PCM_16")
    write_data_dir(corpus.subset([u for u in corpus.wav if not u.startswith("spk1-") or u == "spk1-000"]),
                   corpus.path)
    return corpus


def test_drop_short_speakers_trains_without_them_with_one_warning_and_records_them(tmp_path, capsys, caplog):
    corpus = _set_with_a_short_speaker(tmp_path)
    assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "refused")]) == 2
    error = capsys.readouterr().err
    assert "1 speaker(s) have no utterance of at least one 1.5 s chunk: spk1 (in toy)" in error
    assert "--set drop_short_speakers=true" in error and not (tmp_path / "refused").exists()

    with caplog.at_level(logging.WARNING):
        assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "model"),
                       "--set", "drop_short_speakers=true"]) == 0
    lines = [r.getMessage() for r in caplog.records if "not trained on" in r.getMessage()]
    assert lines == ["1 speaker(s) are not trained on (recorded in training.json): spk1 (no utterance of at least "
                     "one 1.5 s chunk)"]
    training = _training(tmp_path / "model")
    assert training["dropped_speakers"] == {"spk1": "no utterance of at least one 1.5 s chunk"}
    assert training["selection"]["speakers"] == 2 and training["selection"]["dropped_speakers"] == 1
    assert (tmp_path / "model" / SKIPPED_FILE).read_text().startswith("toy/spk1-000 1.00 s, shorter than one")
    labels = (tmp_path / "model" / "label_encoder.txt").read_text()
    assert "'spk0'" in labels and "'spk2'" in labels and "'spk1'" not in labels
    assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "m"), "--set", "drop_short_speakers=3"]) == 2
    assert "drop_short_speakers must be true or false, got 3" in capsys.readouterr().err


# The validation split with few utterances per speaker ----------------------------------------------------------


def test_validation_split_holds_out_whole_utterances_where_rounding_per_speaker_gives_none(tmp_path, caplog):
    """3 speakers x 4 utterances at valid_ratio 0.1: 10 % of 12 is one utterance (per speaker, 0.4 rounds to 0)."""
    corpus = make_corpus(tmp_path, n_speakers=3, n_utts=4, seconds=2.0)
    with caplog.at_level(logging.WARNING):
        assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "model"), "--set", "valid_ratio=0.1"]) == 0
    training = _training(tmp_path / "model")
    assert training["validation"] == {"valid_ratio": 0.1, "asked": 1, "held_out": 1, "speakers": 1, "status": "on"}
    assert training["selection"]["valid_utterances"] == 1 and training["selection"]["train_utterances"] == 11
    assert training["epochs"][0]["valid_loss"] is not None
    assert "validation" not in caplog.text


def test_validation_off_is_warned_and_recorded_when_no_speaker_can_spare_an_utterance(tmp_path, caplog):
    """One utterance per speaker (a set cut one utterance per speaker): holding one out would lose its speaker."""
    corpus = make_corpus(tmp_path, n_speakers=4, n_utts=1, seconds=2.0)
    with caplog.at_level(logging.WARNING):
        assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "model"), "--set", "valid_ratio=0.5"]) == 0
    reason = ("0 of the 2 utterance(s) valid_ratio=0.5 asks for could be held out: 4 of the 4 speakers have a "
              "single usable utterance, which must train")
    assert f"validation is off: {reason}; training.json records it" in caplog.text
    training = _training(tmp_path / "model")
    assert training["validation"] == {"valid_ratio": 0.5, "asked": 2, "held_out": 0, "speakers": 0,
                                      "status": "off", "reason": reason}
    assert training["epochs"][0]["valid_loss"] is None


def test_validation_counts_share_round_ratio_times_total_in_proportion_never_a_speakers_last():
    sizes = {"a": 113, "b": 87, "c": 4, "d": 4, "e": 4, "f": 1, "g": 2}
    counts = validation_counts(sizes, 0.1, seed=1986)
    assert sum(counts.values()) == round(0.1 * sum(sizes.values())) == 22
    assert counts["a"] in (11, 12) and counts["b"] in (8, 9) and counts["f"] == 0
    assert all(0 <= counts[s] <= n - 1 for s, n in sizes.items())
    assert counts == validation_counts(sizes, 0.1, seed=1986)
    # Where every speaker's share is whole, it is exactly that share (the challenge's 90/10 per speaker).
    assert validation_counts({"a": 20, "b": 30}, 0.1, seed=1) == {"a": 2, "b": 3}
    assert validation_counts({"a": 1, "b": 1}, 0.5, seed=1) == {"a": 0, "b": 0}
    # Ties (three speakers with 0.4 each, one utterance to give) go in a seeded order.
    picked = {next(s for s, n in validation_counts({"x": 4, "y": 4, "z": 4}, 0.1, seed).items() if n)
              for seed in range(20)}
    assert picked == {"x", "y", "z"}


# Missing and unreadable files ------------------------------------------------------------------------------------


def _set_with_bad_files(tmp_path):
    corpus = make_corpus(tmp_path, n_speakers=3, n_utts=3, seconds=2.0)
    missing, corrupt = corpus.wav["spk0-001"], corpus.wav["spk2-002"]
    (tmp_path / "toy_audio" / "spk0-001.wav").unlink()
    (tmp_path / "toy_audio" / "spk2-002.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    return corpus, missing, corrupt


def test_missing_or_unreadable_files_refuse_by_default_and_allow_missing_skips_them_listed(tmp_path, capsys, caplog):
    corpus, missing, corrupt = _set_with_bad_files(tmp_path)
    assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "refused")]) == 2
    error = capsys.readouterr().err
    assert f"utterance 'spk0-001': missing file {missing}" in error
    (tmp_path / "toy_audio" / "spk0-001.wav").write_bytes(b"")  # present now, but empty: unreadable
    assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "refused")]) == 2
    error = capsys.readouterr().err
    assert "toy/spk0-001" in error and "toy/spk2-002" in error and corrupt in error and "--allow-missing" in error
    assert not (tmp_path / "refused").exists()

    (tmp_path / "toy_audio" / "spk0-001.wav").unlink()
    with caplog.at_level(logging.WARNING):
        assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "model"), "--allow-missing"]) == 0
    assert ("--allow-missing: 2 utterance(s) with missing or unreadable audio are not used (listed in skipped.txt): "
            "toy/spk0-001, toy/spk2-002") in caplog.text
    training = _training(tmp_path / "model")
    assert sorted(training["unreadable_utterances"]) == ["toy/spk0-001", "toy/spk2-002"]
    assert "missing file" in training["unreadable_utterances"]["toy/spk0-001"]
    assert training["selection"]["skipped_unreadable_utterances"] == 2
    assert training["selection"]["train_utterances"] + training["selection"]["valid_utterances"] == 7
    skipped = (tmp_path / "model" / SKIPPED_FILE).read_text().splitlines()
    assert [line.split()[0] for line in skipped] == ["toy/spk0-001", "toy/spk2-002"]


def test_allow_missing_drops_a_speaker_whose_every_file_is_missing_with_a_warning(tmp_path, caplog):
    corpus = make_corpus(tmp_path, n_speakers=3, n_utts=2, seconds=2.0)
    for utt in ("spk1-000", "spk1-001"):
        (tmp_path / "toy_audio" / f"{utt}.wav").unlink()
    with caplog.at_level(logging.WARNING):
        assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "model"), "--allow-missing"]) == 0
    assert "spk1 (no readable utterance (--allow-missing))" in caplog.text
    assert _training(tmp_path / "model")["dropped_speakers"] == {"spk1": "no readable utterance (--allow-missing)"}


# A finished model folder -----------------------------------------------------------------------------------------


def test_train_asv_leaves_a_finished_model_as_it_is_without_reading_audio(tmp_path):
    """The check the challenge made before calling train_asv is train_asv's own: same settings and data -> no
    work (a file broken since is not even read); other settings -> trained (here: resumed and extended)."""
    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=3, seconds=2.0)
    first = train_asv([corpus.path], tmp_path / "model", TINY, device="cpu", progress=False)
    assert first.trained and first.model_dir == tmp_path / "model"
    weights = (tmp_path / "model" / "embedding_model.ckpt").read_bytes()
    (tmp_path / "toy_audio" / "spk0-002.wav").write_bytes(b"broken")
    again = train_asv([corpus.path], tmp_path / "model", TINY, device="cpu", progress=False)
    assert not again.trained and (tmp_path / "model" / "embedding_model.ckpt").read_bytes() == weights
    (tmp_path / "model" / "classifier.ckpt").unlink()
    with pytest.raises(Exception, match="spk0-002"):
        train_asv([corpus.path], tmp_path / "model", TINY, device="cpu", progress=False)


def test_a_finished_model_is_not_reused_for_other_data_of_the_same_size(tmp_path):
    """The finished-model check compares each set's listing (each utterance's audio entry and speaker), not only
    its name and counts: other data of the same size train a model of their own."""
    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=3, seconds=2.0)
    assert train_asv([corpus.path], tmp_path / "model", TINY, device="cpu", progress=False).trained
    import shutil

    other = tmp_path / "other.wav"   # an edited utterance, saved under another name: same set size
    shutil.copy(corpus.wav["spk0-000"], other)
    corpus.wav["spk0-000"] = str(other)
    write_data_dir(corpus, corpus.path)
    assert train_asv([corpus.path], tmp_path / "model", {**TINY, "number_of_epochs": 1}, device="cpu",
                     progress=False).trained is True


def test_a_checkpoint_of_the_per_speaker_split_is_refused(tmp_path):
    """Checkpoints written before the validation split was shared over the set would resume on other training
    utterances: refused, with the way out."""
    from voxanon.models.checkpoints.safe import atomic_torch_save

    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=3, seconds=2.0)
    atomic_torch_save({"format": "voxanon-asv-training-1", "settings": "{}"},
                      tmp_path / "model" / "checkpoints" / "ckpt_0000000001_0000_0000001.pt")
    with pytest.raises(Exception, match="older voxanon.*new --out folder"):
        train_asv([corpus.path], tmp_path / "model", TINY, device="cpu", progress=False)


# Issue 30: a small set's run says how far it trains, and what it needs --------------------------------------------


def test_a_schedule_that_hardly_starts_is_warned_once_before_training_and_recorded_after(tmp_path, capsys, caplog):
    """One epoch of two batches with the challenge's step size 65000: lr 3.18e-7, as in the issue. Warned once
    before training, naming the remedies with --set; training.json and the summary line record the learning rate
    reached and the accuracy."""
    corpus = make_corpus(tmp_path, n_speakers=3, n_utts=3, seconds=2.0)
    with caplog.at_level(logging.WARNING):
        assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "model")]) == 0
    warned = [r.getMessage() for r in caplog.records if "schedule hardly starts" in r.getMessage()]
    assert len(warned) == 1 and "2 step(s) against step_size 65000 reach lr 3.18e-07" in warned[0]
    assert "--set number_of_epochs=..." in warned[0] and "--set step_size=35 " in warned[0]
    schedule = _training(tmp_path / "model")["schedule"]
    assert schedule["undertrained"] and schedule["steps"] == 2
    assert schedule["final_lr"] == pytest.approx(3.18e-7, rel=1e-2)
    assert schedule["reference"]["steps"] == 3660
    out = capsys.readouterr().out
    assert "last epoch train accuracy" in out and "lr reached 3.18e-07" in out and "too low for the model" in out
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert _train(["--data", str(corpus.path), "--out", str(tmp_path / "fast"), "--set", "step_size=1"]) == 0
    assert "schedule hardly starts" not in caplog.text
    assert not _training(tmp_path / "fast")["schedule"]["undertrained"]


def test_epoch_progress_shows_the_utterance_rate_of_the_log_line(tmp_path, capsys, monkeypatch):
    """The progress bar said 0.0 utt/s (the time was counted after the postfix was made) while the log said 2.8:
    with one batch per epoch, as in the issue, its only postfix came before any time was counted."""
    from voxanon.pipeline.training.asv import trainer as asv_trainer

    monkeypatch.setattr(asv_trainer, "POSTFIX_SECONDS", 0.0)
    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=3, seconds=2.0)
    assert main(["train", "asv", "--data", str(corpus.path), "--out", str(tmp_path / "model"), "--device", "cpu",
                 *TINY_SET, "--set", "batch_size=16"]) == 0
    bar = capsys.readouterr().err
    rates = [float(rate) for rate in re.findall(r"([0-9.]+) utt/s", bar)]
    assert rates and min(rates) > 0, bar


def _one_utterance_speakers(root, n_speakers: int, seconds: float):
    """``n_speakers`` speakers of one noise utterance each (the issue's set: one utterance per speaker)."""
    from voxanon.data_prep.corpus import DataDir

    rng = np.random.default_rng(0)
    (root / "audio").mkdir()
    wav, utt2spk = {}, {}
    for s in range(n_speakers):
        utt = f"{s:04d}-1-0001"
        wav[utt], utt2spk[utt] = str(root / "audio" / f"{utt}.wav"), f"{s:04d}"
        soundfile.write(wav[utt], 0.1 * rng.standard_normal(int(seconds * 16000)), 16000, subtype="PCM_16")
    write_data_dir(DataDir(name="small", wav=wav, utt2spk=utt2spk, path=root / "small"), root / "small")
    return root / "small"


def test_a_cpu_run_that_will_not_fit_in_memory_is_refused_before_training(tmp_path, capsys, monkeypatch):
    """243 utterances at the default batch size 256 (one batch of 243 chunks of 3 s: about 13 GB measured) on a
    machine of 8 GB: refused before anything is written, with what it needs and a batch size that fits."""
    from voxanon.pipeline.training.asv import loader as asv_loader

    data = _one_utterance_speakers(tmp_path, 243, 3.5)
    monkeypatch.setattr(asv_loader, "available_memory", lambda: 8_000_000_000 - asv_loader._resident_bytes())
    assert main(["train", "asv", "--data", str(data), "--out", str(tmp_path / "model"), "--device", "cpu",
                 "--quiet"]) == 2
    error = capsys.readouterr().err.strip()
    found = re.search(r"batches of 243 chunks of 3 s need about ([0-9.]+) GB on the CPU, and 8.0 GB is available; "
                      r"--set batch_size=([0-9]+) fits", error)
    assert found and float(found[1]) > 8 and len(error.splitlines()) == 1, error
    assert not (tmp_path / "model").exists()
    fitting = int(found[2])
    h = resolve_hparams({"batch_size": fitting})
    asv_loader.check_cpu_memory(h, 243)   # the suggested size passes the same check
    assert asv_loader.training_memory_estimate(h, fitting) <= 8e9
    with pytest.raises(Exception, match="need about"):
        asv_loader.check_cpu_memory({**h, "batch_size": fitting + 1}, 243)
