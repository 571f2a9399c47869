"""SER: the speechbrain wav2vec2 IEMOCAP layout in our modules (parity), fold directories, errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.speechbrain_layouts import IEMOCAP_LABELS, write_label_encoder, write_ser_dir
from voxanon.data_prep.errors import VoxanonError
from voxanon.models.recognisers.ser import EmotionClassifier, fold_model_dirs, read_label_encoder
from tests.helpers.ser_sets import UTTERANCES, write_set
from tests.helpers.ser_sets import SIGNALS

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def ser_dir(tmp_path_factory):
    return write_ser_dir(tmp_path_factory.mktemp("ser") / "fold_1")


def speechbrain_reference(directory):
    """speechbrain's own modules built from the YAML the test wrote, with the Pretrainer's loading."""
    from hyperpyyaml import load_hyperpyyaml

    hparams = load_hyperpyyaml((directory / "hyperparams.yaml").read_text())
    pretrainer = hparams["pretrainer"]
    pretrainer.set_collect_in(directory / "collected")
    pretrainer.collect_files()
    pretrainer.load_collected()
    for name in ("wav2vec2", "avg_pool", "output_mlp"):
        hparams[name].eval()
    return hparams


def reference_log_probs(hparams, samples, noise: bool):
    """CustomEncoderWav2vec2Classifier.classify_batch on one utterance."""
    pool = hparams["avg_pool"]
    if not noise:
        pool._get_gauss_noise = lambda shape, device="cpu": torch.zeros(shape, device=device)
    with torch.inference_mode():
        wav = torch.from_numpy(samples)[None]
        pooled = pool(hparams["wav2vec2"](wav), torch.ones(1)).view(1, -1)
        return hparams["softmax"](hparams["output_mlp"](pooled))[0].numpy()


def test_classifier_matches_speechbrain(ser_dir):
    ours = EmotionClassifier(ser_dir)
    reference = speechbrain_reference(ser_dir)
    assert set(reference["wav2vec2"].state_dict()) == set(torch.load(ser_dir / "wav2vec2.ckpt"))
    assert set(reference["model"].state_dict()) == set(torch.load(ser_dir / "model.ckpt"))
    assert ours.labels == tuple(reference["label_encoder"].decode_ndim(list(range(4)))) == IEMOCAP_LABELS
    got = ours.log_probabilities(SIGNALS)
    exact = np.stack([reference_log_probs(reference, s, noise=False) for s in SIGNALS])
    np.testing.assert_allclose(got, exact, atol=1e-5)
    # speechbrain's pooling adds noise of at most 9e-5 to each mean: the classes do not move.
    noisy = np.stack([reference_log_probs(reference, s, noise=True) for s in SIGNALS])
    np.testing.assert_allclose(got, noisy, atol=5e-3)
    assert ours.classify(SIGNALS) == [IEMOCAP_LABELS[i] for i in noisy.argmax(axis=1)]
    assert np.ptp(got, axis=0).max() > 1e-2  # the scores depend on the input


def test_label_encoder_file(tmp_path):
    write_label_encoder(tmp_path / "label_encoder.txt", ["sad", "hap", "neu", "ang"])
    assert read_label_encoder(tmp_path / "label_encoder.txt") == ("sad", "hap", "neu", "ang")
    (tmp_path / "bad.txt").write_text("'neu' => 0\n'ang' => 0\n")
    with pytest.raises(VoxanonError, match="bad.txt:2: index 0 given twice"):
        read_label_encoder(tmp_path / "bad.txt")
    (tmp_path / "code.txt").write_text("__import__('os').system('x') => 0\n")
    with pytest.raises(VoxanonError, match="code.txt:1: expected"):
        read_label_encoder(tmp_path / "code.txt")


@pytest.mark.parametrize("missing", ["wav2vec2.ckpt", "model.ckpt", "label_encoder.txt", "hyperparams.yaml"])
def test_model_dir_missing_a_file_names_it(tmp_path, ser_dir, missing):
    import shutil

    copy = tmp_path / "fold_2"
    shutil.copytree(ser_dir, copy, ignore=shutil.ignore_patterns(missing, "collected"))
    with pytest.raises(VoxanonError, match=f"{copy / missing}: missing"):
        EmotionClassifier(copy)


def test_unknown_ser_layout_is_refused_without_evaluating_it(tmp_path, ser_dir):
    import shutil

    copy = tmp_path / "other"
    shutil.copytree(ser_dir, copy)
    marker = tmp_path / "ran"
    text = (copy / "hyperparams.yaml").read_text().replace("speechbrain.nnet.pooling.StatisticsPooling",
                                                             "speechbrain.nnet.pooling.AttentionPooling")
    (copy / "hyperparams.yaml").write_text(text + f'boom: !apply:os.system ["touch {marker}"]\n')
    with pytest.raises(VoxanonError, match="not the speechbrain wav2vec2 emotion-classifier layout"):
        EmotionClassifier(copy)
    assert not marker.exists()


def test_fold_model_dirs(tmp_path):
    for fold in ("1", "2"):
        (tmp_path / f"fold_{fold}").mkdir()
    (tmp_path / "fold_1" / "hyperparams.yaml").write_text("x: 1\n")
    for name in ("CKPT+2024-01-01", "CKPT+2024-02-01"):
        (tmp_path / "fold_2" / name).mkdir()
    (tmp_path / "notes").mkdir()
    assert fold_model_dirs(tmp_path) == {"1": tmp_path / "fold_1", "2": tmp_path / "fold_2" / "CKPT+2024-02-01"}
    with pytest.raises(VoxanonError, match="no fold_<k> folders"):
        fold_model_dirs(tmp_path / "notes")


# ser_results: per-fold scoring, UAR, caching, errors ---------------------------------------------


@pytest.fixture(scope="module")
def fold_models(tmp_path_factory, ser_dir):
    import shutil

    root = tmp_path_factory.mktemp("models")
    shutil.copytree(ser_dir, root / "fold_1", ignore=shutil.ignore_patterns("collected"))
    shutil.copytree(ser_dir, root / "fold_2", ignore=shutil.ignore_patterns("collected"))
    # Fold 2's output layer is zero: uniform scores, so every fold-2 utterance is class 0 (neu).
    state = torch.load(root / "fold_2" / "model.ckpt")
    torch.save({k: torch.zeros_like(v) for k, v in state.items()}, root / "fold_2" / "model.ckpt")
    return root


def test_ser_results_scores_each_utterance_with_its_fold_model(tmp_path, fold_models):
    from sklearn.metrics import recall_score

    from voxanon.pipeline.feature_cache import ContentCache
    from voxanon.pipeline.evaluation.ser import FoldClassifiers, ser_results

    original = write_set(tmp_path / "IEMOCAP_dev", UTTERANCES, 1.0)
    anonymised = write_set(tmp_path / "IEMOCAP_dev_b1", UTTERANCES, 0.2)
    cache = ContentCache(tmp_path / "cache")
    classifiers = FoldClassifiers(fold_models)
    rows = ser_results(original, anonymised, fold_models, system="b1", cache=cache, classifiers=classifiers)
    values = {(r.system, r.metric, r.variant): r.value for r in rows}

    fold_1 = EmotionClassifier(fold_models / "fold_1")
    for side, directory, scale in (("original", original, 1.0), ("b1", anonymised, 0.2)):
        truth, predicted, per_fold = [], [], {}
        for utt, (speaker, emotion, index) in sorted(UTTERANCES.items()):
            import soundfile

            samples = soundfile.read(directory / "wav" / f"{utt}.wav", dtype="float32")[0]
            label = fold_1.classify([samples])[0] if speaker[4] == "1" else "neu"
            truth.append(emotion)
            predicted.append(label)
            per_fold.setdefault(speaker[4], []).append((emotion, label))
        expected = 100 * recall_score(truth, predicted, average="macro", zero_division=0)
        assert values[(side, "uar", "all")] == pytest.approx(expected)
        fold_values = [100 * recall_score(*zip(*pairs), average="macro", zero_division=0)
                       for _, pairs in sorted(per_fold.items())]
        assert values[(side, "uar", "fold 2")] == pytest.approx(fold_values[1])
        assert values[(side, "uar", "fold-mean")] == pytest.approx(np.mean(fold_values))
        assert values[(side, "n_utterances", "")] == len(UTTERANCES)
    assert values[("b1", "uar_decrease", "all")] == pytest.approx(
        values[("original", "uar", "all")] - values[("b1", "uar", "all")])
    assert {r.set for r in rows} == {"IEMOCAP_dev"}

    # A rerun is served from the cache: no model is even loaded.
    fresh = FoldClassifiers(fold_models)
    assert ser_results(original, anonymised, fold_models, system="b1", cache=cache, classifiers=fresh) == rows
    assert fresh._loaded == {}


def test_ser_results_clear_errors(tmp_path, fold_models):
    import shutil

    from voxanon.pipeline.evaluation.ser import ser_results

    original = write_set(tmp_path / "IEMOCAP_test", UTTERANCES, 1.0)
    bare = tmp_path / "IEMOCAP_test_anon"
    shutil.copytree(original, bare)
    (bare / "utt2emo").unlink()
    with pytest.raises(VoxanonError, match=f"{bare}: no utt2emo"):
        ser_results(original, bare, fold_models, system="x")
    broken = tmp_path / "models"
    shutil.copytree(fold_models, broken)
    (broken / "fold_2" / "wav2vec2.ckpt").unlink()
    with pytest.raises(VoxanonError, match=f"{broken / 'fold_2' / 'wav2vec2.ckpt'}: missing"):
        ser_results(original, None, broken, system="x")
    shutil.rmtree(broken / "fold_2")
    with pytest.raises(VoxanonError, match="no SER model for fold\\(s\\) 2 \\(have 1\\)"):
        ser_results(original, None, broken, system="x")


def test_each_fold_model_is_hashed_once_across_runs(tmp_path, fold_models, monkeypatch):
    import os

    import voxanon.data_prep.digest
    import voxanon.pipeline.feature_cache
    from voxanon.pipeline.evaluation.ser import FoldClassifiers, ser_results
    from voxanon.pipeline.feature_cache import ContentCache, FileDigests

    hashed = []
    for module in (voxanon.data_prep.digest, voxanon.pipeline.feature_cache):
        original = module.sha256_file
        monkeypatch.setattr(module, "sha256_file", lambda path, original=original: hashed.append(
            Path(path).resolve()) or original(path))

    def model_files_hashed() -> list[Path]:
        return [p for p in hashed if p.is_relative_to(fold_models.resolve())]

    original_set = write_set(tmp_path / "IEMOCAP_dev", UTTERANCES, 1.0)
    cache = ContentCache(tmp_path / "cache")
    for run in range(2):
        classifiers = FoldClassifiers(fold_models, digests=FileDigests(cache.root))
        rows = ser_results(original_set, None, fold_models, system="b1", cache=cache, classifiers=classifiers)
        assert rows
        # The first run hashes each fold's four files; the next run (a new process would be the same) none.
        assert len(model_files_hashed()) == 8, model_files_hashed()
    changed = fold_models / "fold_2" / "label_encoder.txt"
    os.utime(changed, ns=(changed.stat().st_atime_ns, changed.stat().st_mtime_ns + 10**9))
    ser_results(original_set, None, fold_models, system="b1", cache=cache,
                classifiers=FoldClassifiers(fold_models, digests=FileDigests(cache.root)))
    assert model_files_hashed()[8:] == [changed.resolve()]
