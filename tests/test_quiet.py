"""A quiet run: ``--quiet`` silences every progress bar of its command, and a first plot does not
announce matplotlib's font cache."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from voxanon.pipeline.cli import main

from tests.helpers.corpora import make_corpus

PROGRESS_MARKS = ("it/s", "utt/s", "s/utt", "%|")


class Terminal(io.StringIO):
    """stderr as a terminal, so that bars shown only on one (tqdm's ``disable=None``) show too."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("command", [
    ["validate", "{data}", "--check-audio"],
    ["anonymise", "--system", "b2", "--data", "{data}", "--out", "{out}", "--workers", "1"],
    ["f0-targets", "--data", "{data}", "--workers", "1", "--no-cache"],
    # The evaluation's embedding bars (a fresh cache each run, so there is work to show).
    ["evaluate", "--orig", "{data}", "--anon", "{data}", "--out", "{out}", "--set", "asr=null", "--cache",
     "{out}/cache", "--device", "cpu"],
    pytest.param(["benchmark", "--systems", "b2", "--data", "{data}", "--out", "{out}", "--set", "asr=null", "--cache",
                  "{out}/cache", "--workers", "1", "--device", "cpu"], marks=pytest.mark.slow),  # anonymise + evaluate
    # The ECAPA embedding of labelled corpora.
    ["pool", "build", "--data", "{data}", "--out", "{out}/pool", "--cache", "none"],
    ["train", "sex-flow", "--data", "{data}", "--out", "{out}/flow", "--cache", "none", "--epochs", "1",
     "--held-out", "0"],
], ids=lambda command: " ".join(command[:2]) if command[0] in ("pool", "train") else command[0])
def test_quiet_silences_every_progress_bar(command, tmp_path, monkeypatch, voxanon_home):
    data = make_corpus(tmp_path, n_speakers=4, n_utts=3, seconds=0.5)  # 4 speakers, 3 each: evaluable trials
    if command[0] in ("pool", "train"):   # they embed with a model set's ECAPA
        assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)  # in the test: pytest's capture replaces stderr before it
    argv = [part.format(data=data.path, out=tmp_path / "out") for part in command]
    assert main(argv + ["--quiet"]) == 0
    shown = terminal.getvalue()
    assert not any(mark in shown for mark in PROGRESS_MARKS), shown
    # The same command without --quiet shows its bar, so the check above can fail.
    argv = [part.format(data=data.path, out=tmp_path / "again") for part in command]
    assert main(argv) == 0
    assert any(mark in terminal.getvalue()[len(shown):] for mark in PROGRESS_MARKS)


def test_first_plot_does_not_announce_the_font_cache(tmp_path):
    trials, scores = tmp_path / "trials", tmp_path / "scores"
    rows = [(f"spk{i % 3}", f"utt{i}", "target" if i % 2 else "nontarget", (1.5 if i % 2 else -1.5) + 0.1 * i)
            for i in range(12)]
    trials.write_text("".join(f"{e} {u} {t}\n" for e, u, t, _ in rows))
    scores.write_text("".join(f"{e} {u} {s}\n" for e, u, _, s in rows))
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "fresh-matplotlib-config")}
    completed = subprocess.run([sys.executable, "-m", "voxanon.pipeline.cli", "metrics", "--trials", str(trials),
                                "--scores", str(scores), "--plot", str(tmp_path / "plots")],
                               capture_output=True, text=True, env=env, timeout=300)
    assert completed.returncode == 0, completed.stderr
    assert (tmp_path / "plots" / "det.png").is_file()
    assert (tmp_path / "fresh-matplotlib-config").is_dir()  # the cache was built in this run
    assert "fontManager" not in completed.stderr and "font" not in completed.stderr.lower(), completed.stderr


def test_quiet_b1_embeds_its_source_speakers_without_a_bar(tmp_path, monkeypatch, voxanon_home):
    """B1 embeds the whole set before the run (its pseudo-speakers come from speaker means): --quiet reaches it."""
    training = make_corpus(tmp_path, n_speakers=4, n_utts=2, seconds=0.5, name="pool_source")
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    assert main(["pool", "build", "--data", str(training.path), "--out", "libritts-other-500"]) == 0
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    for run, quiet in (("quiet", ["--quiet"]), ("loud", [])):
        # Other audio each time (not in the embedding cache), so the set-level embedding has work to show.
        data = make_corpus(tmp_path / run, n_speakers=2, n_utts=2, seconds=0.6 if quiet else 0.7)
        shown = len(terminal.getvalue())
        assert main(["anonymise", "--system", "b1", "--data", str(data.path), "--workers", "1", "--out",
                     str(tmp_path / run / "out"), "--set", "pseudo_speaker.world=2",
                     "--set", "pseudo_speaker.region=1"] + quiet) == 0
        output = terminal.getvalue()[shown:]
        if quiet:
            assert not any(mark in output for mark in PROGRESS_MARKS), output
        else:
            assert "ECAPA toy" in output


def test_evaluation_bars_count_utterances_and_audio_seconds(tmp_path, monkeypatch, voxanon_home):
    data = make_corpus(tmp_path, n_speakers=4, n_utts=3, seconds=0.5)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["evaluate", "--orig", str(data.path), "--anon", str(data.path), "--out", str(tmp_path / "out"),
                 "--set", "asr=null", "--cache", str(tmp_path / "cache")]) == 0
    shown = terminal.getvalue()
    assert "toy o enrol" in shown and "utt/s" in shown and "s audio/s" in shown, shown


def test_quiet_challenge_shows_no_bar_at_any_stage(tmp_path, monkeypatch, voxanon_home):
    """Anonymisation, the attacker's training and the evaluation each show bars, and --quiet silences them all."""
    import json

    make_corpus(tmp_path, n_speakers=4, n_utts=3, seconds=0.6, name="train")
    make_corpus(tmp_path, n_speakers=4, n_utts=2, seconds=0.6, name="evalset")
    tiny = {"channels": [8, 8, 8, 8, 24], "lin_neurons": 8, "attention_channels": 4, "se_channels": 4,
            "sentence_len": 0.5, "batch_size": 8, "valid_ratio": 0, "number_of_epochs": 1}
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)

    def challenge(cache: str, *quiet: str) -> str:
        shown = len(terminal.getvalue())
        assert main(["challenge", "--system", "b2", "--train", str(tmp_path / "train"), "--data",
                     str(tmp_path / "evalset"), "--out", str(tmp_path / "out"), "--asr", "none", "--cache",
                     str(tmp_path / cache), "--workers", "1", "--device", "cpu", *quiet]
                    + [o for k, v in tiny.items() for o in ("--train-set", f"{k}={json.dumps(v)}")]) == 0
        return terminal.getvalue()[shown:]

    quiet = challenge("cache", "--quiet")
    assert not any(mark in quiet for mark in PROGRESS_MARKS), quiet
    # Again without --quiet (a fresh cache, so the evaluation has embeddings to compute): its bars show.
    assert "s audio/s" in challenge("other-cache")


def test_quiet_demo_silences_anonymisation_and_evaluation(monkeypatch):
    """The demo passes --quiet to both halves (the run itself takes minutes, so only the call is checked)."""
    from voxanon.pipeline.evaluation import benchmark

    seen = {}

    def compare(*args, progress=True, **kwargs):
        seen["progress"] = progress
        raise SystemExit(0)

    monkeypatch.setattr(benchmark, "compare", compare)  # the demo imports it when it runs
    for argv, expected in ((["demo", "--quiet"], False), (["demo"], True)):
        with pytest.raises(SystemExit):
            main(argv)
        assert seen.pop("progress") is expected
