"""voxanon challenge checks every input before its first stage (issue 37 item 3): each of its paths, model folders and
options, given a bogus value, a path that does not exist, or a path that exists but is not what the option needs,
ends in one line and exit 2, with --out neither created nor touched. Before, --asv-eval and --asr were found wrong
only after the training set was anonymised and the attacker trained."""
from __future__ import annotations

from pathlib import Path

import pytest

from voxanon.pipeline.cli import main

from tests.helpers.corpora import make_corpus
from tests.helpers.challenge_settings import TINY_SET


@pytest.fixture(scope="module")
def sets(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("challenge-inputs")
    make_corpus(root, n_speakers=4, n_utts=4, name="train")
    make_corpus(root, n_speakers=4, n_utts=3, name="evalset")
    (root / "empty").mkdir()
    (root / "a-file").write_text("not a folder\n")
    return root


def _args(root: Path, out: Path, replaced: dict[str, str], extra: list[str]) -> list[str]:
    options = {"--system": "b2", "--train": str(root / "train"), "--data": str(root / "evalset"),
               "--out": str(out), "--asr": "none", "--cache": str(root / "cache"), "--workers": "1"} | replaced
    return ["challenge", *(part for item in options.items() for part in item), *TINY_SET, *extra]


CASES = {
    # option class: bogus value
    "system bogus": ({"--system": "no-such-system"}, [], "no-such-system"),
    "protocol bogus": ({"--protocol": "no-such-protocol"}, [], "no-such-protocol"),
    "asv-eval bogus": ({}, ["--asv-eval", "bogus"], "unknown speaker encoder 'bogus'"),
    "asr bogus": ({"--asr": "whisper-huge"}, [], "ASR model 'whisper-huge': no such directory"),
    "set bogus": ({}, ["--set", "bogus=1"], "unknown setting"),
    "train-set bogus": ({}, ["--train-set", "bogus=1"], "bogus"),
    "eval-set bogus": ({}, ["--eval-set", "bogus=1"], "unknown setting"),
    "workers bogus": ({"--workers": "0"}, [], "--workers must be at least 1"),
    "batch-size bogus": ({}, ["--batch-size", "0"], "--batch-size must be at least 1"),
    "ser-models without iemocap": ({}, ["--ser-models", "{root}/empty"], "--ser-models needs --iemocap"),
    # option class: a path that does not exist
    "train missing": ({"--train": "{root}/nonexistent"}, [], "{root}/nonexistent"),
    "data missing": ({"--data": "{root}/nonexistent"}, [], "{root}/nonexistent"),
    "iemocap missing": ({}, ["--iemocap", "{root}/nonexistent"], "{root}/nonexistent"),
    "asv-eval folder missing": ({}, ["--asv-eval", "ecapa:/nonexistent"], "/nonexistent/embedding_model.ckpt"),
    "asr folder missing": ({"--asr": "/nonexistent"}, [], "ASR model '/nonexistent': no such directory"),
    # option class: a path that exists but is not what the option needs
    "train not a data dir": ({"--train": "{root}/empty"}, [], "{root}/empty"),
    "data not a data dir": ({"--data": "{root}/empty"}, [], "{root}/empty"),
    "asv-eval not a model folder": ({}, ["--asv-eval", "ecapa-voxceleb:{root}/empty"],
                                    "{root}/empty/embedding_model.ckpt"),
    "asr not a model folder": ({"--asr": "{root}/empty"}, [], "{root}/empty: neither model.bin nor hyperparams.yaml"),
    "cache under a file": ({"--cache": "{root}/a-file/cache"}, [], "--cache {root}/a-file/cache: cannot write"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_bad_input_is_one_line_and_exit_2_before_anything_is_written(sets, tmp_path, capsys, case):
    replaced, extra, message = CASES[case]
    replaced = {key: value.format(root=sets) for key, value in replaced.items()}
    extra = [value.format(root=sets) for value in extra]
    out = tmp_path / "out"
    assert main(_args(sets, out, replaced, extra)) == 2
    error = capsys.readouterr().err.strip()
    assert message.format(root=sets) in error and len(error.splitlines()) == 1, error
    assert not out.exists()


def test_an_out_folder_that_cannot_be_written_is_found_before_the_first_stage(sets, capsys):
    out = sets / "a-file" / "out"
    assert main(_args(sets, out, {}, [])) == 2
    error = capsys.readouterr().err.strip()
    assert f"--out {out}: cannot write" in error and len(error.splitlines()) == 1, error


def test_an_existing_out_folder_is_left_untouched_by_a_refused_run(sets, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.txt").write_text("earlier\n")
    before = out.stat().st_mtime_ns
    assert main(_args(sets, out, {"--asr": "/nonexistent"}, [])) == 2
    assert "/nonexistent" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["kept.txt"] and out.stat().st_mtime_ns == before
