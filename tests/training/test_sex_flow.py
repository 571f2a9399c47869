"""``voxanon train sex-flow``: ECAPA vectors of a labelled corpus -> zero-LLR flow, with a held-out Cllr."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.audio import load_audio
from voxanon.data_prep.errors import VoxanonError
from voxanon.eval.cllr import cllr, min_cllr
from voxanon.models.nets.flow import load_flow
from voxanon.pipeline.cli import main
from voxanon.pipeline.training.sex_flow import held_out_speakers
from voxanon.pipeline.commands.train import add_sex_flow_parser


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="voxanon train")
    add_sex_flow_parser(parser.add_subparsers(dest="action", required=True))
    return parser.parse_args(argv)


def test_held_out_speakers_per_sex():
    sex = {f"f{i}": "f" for i in range(10)} | {f"m{i}": "m" for i in range(5)}
    chosen = held_out_speakers(sex, 0.2, seed=3)
    assert sum(s.startswith("f") for s in chosen) == 2 and sum(s.startswith("m") for s in chosen) == 1
    assert held_out_speakers(sex, 0.2, seed=3) == chosen
    assert held_out_speakers(sex, 0.0, seed=3) == set()
    assert held_out_speakers({"f0": "f", "m0": "m", "m1": "m"}, 0.5, seed=0) == set()
    with pytest.raises(VoxanonError, match="--held-out"):
        held_out_speakers(sex, 1.0, seed=0)


def test_sex_flow_trains_saves_and_reports_held_out_cllr(tmp_path, monkeypatch, capsys, one_torch_thread):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    corpus = make_corpus(tmp_path, n_speakers=40, n_utts=2, seconds=0.3, name="labelled")
    args = parse(["sex-flow", "--data", str(corpus.path), "--out", "sex", "--epochs", "3", "--hidden", "16",
                  "--held-out", "0.1", "--quiet"])
    assert args.run(args) == 0
    out = capsys.readouterr().out
    assert "held-out speakers (4, 8 utterances)" in out and "RANDOM WEIGHTS" in out
    folder = tmp_path / "home" / "flows" / "sex"
    flow = load_flow(folder)
    assert flow.config.l2_normalise_input and flow.config.dim == 192 and flow.config.hidden == 16
    summary = json.loads((folder / "held_out.json").read_text())
    held_out = summary["held_out_speakers"]
    assert len(held_out) == 4 and {corpus.spk2gender[s] for s in held_out} == {"f", "m"}
    training_ids = (folder / "training_vectors.ids").read_text().split()
    assert len(training_ids) == 72 and not {corpus.utt2spk[u] for u in training_ids} & set(held_out)
    from voxanon.pipeline.systems.ssl_sas.loader import load_ssl_sas_models

    utts = [u for u in corpus.utterances if corpus.utt2spk[u] in held_out]
    vectors = load_ssl_sas_models("ssl-sas")[1].embed([load_audio(corpus.wav[u], 16000).samples for u in utts])
    llr = flow.llr_numpy(vectors)
    female = np.array([corpus.spk2gender[corpus.utt2spk[u]] == "f" for u in utts])
    assert summary["cllr"] == pytest.approx(cllr(llr[female], llr[~female]), rel=1e-4)
    assert summary["min_cllr"] == pytest.approx(min_cllr(llr[female], llr[~female], tie_order="tar_non"), rel=1e-4)
    assert (folder / "training.json").is_file() and (folder / "baselines.safetensors").is_file()


def test_sex_flow_needs_spk2gender(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.3, name="unlabelled")
    (corpus.path / "spk2gender").unlink()
    args = parse(["sex-flow", "--data", str(corpus.path), "--out", "sex"])
    with pytest.raises(VoxanonError, match="spk2gender: speaker 'spk0' has no sex label"):
        args.run(args)
