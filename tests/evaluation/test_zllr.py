import json

import numpy as np
import pytest
import torch

from tests.helpers.attacks import sexed_vectors
from voxanon.data_prep.corpus import Trial, format_trials, write_mapping
from voxanon.data_prep.vectors import read_vectors, write_vectors
from voxanon.models.nets.flow import load_flow
from voxanon.models.speakers.lda import LinearDiscriminant
from voxanon.pipeline.cli import main
from voxanon.pipeline.evaluation.zllr import toy_dataset
from voxanon.pipeline.training.zllr_flow import default_hidden_width


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small model folder trained through the CLI, and an evaluation set."""
    folder = tmp_path_factory.mktemp("zllr")
    rng = np.random.default_rng(0)
    for name, speakers in (("train", 12), ("test", 6)):
        vectors, utt2spk, spk2gender = sexed_vectors(rng, speakers, 10, name)
        write_vectors(folder / f"{name}.npy", vectors)
        write_mapping(folder / f"{name}.utt2spk", utt2spk)
        write_mapping(folder / f"{name}.spk2gender", spk2gender)
    test = read_vectors(folder / "test.npy")
    enrol_ids = [utt for utt in test.ids if int(utt.split("-")[1]) < 4]
    test_ids = [utt for utt in test.ids if int(utt.split("-")[1]) >= 4]
    write_vectors(folder / "enroll.ark", test.select(enrol_ids))
    speakers = sorted({utt.split("-")[0] for utt in enrol_ids})
    trials = [Trial(spk, utt, utt.startswith(spk + "-")) for utt in test_ids for spk in speakers
              if spk[4] == utt[4]]
    (folder / "trials").write_text(format_trials(trials))
    code = main(["zllr", "train", "--vectors", str(folder / "train.npy"), "--utt2spk", str(folder / "train.utt2spk"),
                 "--spk2gender", str(folder / "train.spk2gender"), "--out", str(folder / "model"),
                 "--hidden", "16", "--lr", "1e-3", "--epochs", "15", "--quiet"])
    assert code == 0
    return folder


def test_train_writes_a_model_folder(trained):
    names = sorted(p.name for p in (trained / "model").iterdir())
    assert names == ["baselines.safetensors", "flow.json", "flow.safetensors", "training.json"]
    log = json.loads((trained / "model" / "training.json").read_text())
    assert log["n_speakers"] == 24 and len(log["history"]["mu"]) >= 1
    assert load_flow(trained / "model").config.hidden == 16


@pytest.mark.parametrize("method", ["zllr", "lda", "global"])
def test_apply_removes_the_evidence(trained, method):
    out = trained / f"protected_{method}.ark"
    assert main(["zllr", "apply", "--model", str(trained / "model"), "--vectors", str(trained / "test.npy"),
                 "--out", str(out), "--method", method]) == 0
    original, protected = read_vectors(trained / "test.npy"), read_vectors(out)
    assert protected.ids == original.ids
    if method == "zllr":
        assert np.max(np.abs(load_flow(trained / "model").llr_numpy(protected.matrix))) < 1e-3
        assert np.max(np.abs(load_flow(trained / "model").llr_numpy(original.matrix))) > 1
    elif method == "lda":
        train = read_vectors(trained / "train.npy")
        is_female = np.array(["trainf" in utt for utt in train.ids])
        lda = LinearDiscriminant.fit(train.matrix, is_female)
        np.testing.assert_allclose(lda.llr(protected.matrix), 0.0, atol=1e-4)
    else:
        assert np.allclose(protected.matrix, protected.matrix[0])


def test_eval_table(trained, capsys):
    args = ["zllr", "eval", "--model", str(trained / "model"), "--vectors", str(trained / "test.npy"),
            "--utt2spk", str(trained / "test.utt2spk"), "--spk2gender", str(trained / "test.spk2gender"),
            "--trials", str(trained / "trials"), "--enroll", str(trained / "enroll.ark"),
            "--enroll-utt2spk", str(trained / "test.utt2spk"), "--classifier", "logistic"]
    assert main([*args, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert list(table) == ["original", "zllr", "lda", "global"]
    assert table["original"]["sex_eer_ignorant"] < 10
    assert table["original"]["sex_dece_ignorant"] > table["zllr"]["sex_dece_ignorant"]
    assert table["global"]["sex_eer_informed"] == pytest.approx(50.0)
    assert table["global"]["asv_eer"] == pytest.approx(50.0)
    assert table["global"]["asv_min_cllr"] == pytest.approx(1.0, abs=1e-6)
    assert table["original"]["asv_eer"] < 10
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "ignorant" in out and "informed" in out and "minCllr" in out


def test_import_then_apply(tmp_path, reference_module, capsys):
    torch.manual_seed(0)
    torch.save(reference_module.RealNVP(6, 8), tmp_path / "model.pt")
    assert main(["zllr", "import", "--pickle", str(tmp_path / "model.pt"), "--out", str(tmp_path / "imported")]) == 0
    rng = np.random.default_rng(0)
    vectors, _, _ = sexed_vectors(rng, 2, 3, "x")
    write_vectors(tmp_path / "v.npy", vectors)
    assert main(["zllr", "apply", "--model", str(tmp_path / "imported"), "--vectors", str(tmp_path / "v.npy"),
                 "--out", str(tmp_path / "w.npy")]) == 0
    assert main(["zllr", "apply", "--model", str(tmp_path / "imported"), "--vectors", str(tmp_path / "v.npy"),
                 "--out", str(tmp_path / "w.npy"), "--method", "lda"]) == 2
    assert "no 'lda' protection" in capsys.readouterr().err


def test_toy_command_prints_the_table(capsys):
    threads = torch.get_num_threads()
    assert main(["zllr", "toy", "--epochs", "1", "--quiet"]) == 0
    assert torch.get_num_threads() == threads
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[2:5]] == ["Gaussians", "Moons", "Circles"]
    values = [float(v) for v in lines[3].split()[1:]]
    assert len(values) == 6 and all(0 <= v < 2 for v in values)


def test_toy_datasets_are_balanced_and_seeded():
    for name in ("Gaussians", "Moons", "Circles"):
        x, y = toy_dataset(name, 100, 3)
        assert x.shape == (100, 2) and y.sum() == 50
        np.testing.assert_array_equal(toy_dataset(name, 100, 3)[0], x)


def test_default_hidden_width():
    assert [default_hidden_width(d) for d in (2, 192, 256, 512)] == [2, 256, 256, 512]
