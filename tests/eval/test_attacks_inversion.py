import numpy as np
import pytest
from scipy.stats import ortho_group

from voxanon.data_prep.corpus import Trial
from voxanon.data_prep.errors import VoxanonError
from voxanon.data_prep.vectors import Vectors, l2_normalise
from voxanon.eval.attacks.alignment import WassersteinProcrustesConfig, orthogonal_procrustes, wasserstein_procrustes
from voxanon.eval.attacks.inversion import InversionInputs, inversion_attack, top1_accuracy
from tests.helpers.attacks import synthetic_attack_inputs
from tests.helpers.attacks import clustered


def test_procrustes_recovers_a_random_orthogonal_map_exactly():
    rng = np.random.default_rng(0)
    source = rng.normal(size=(50, 12))
    rotation = ortho_group.rvs(12, random_state=3)
    np.testing.assert_allclose(orthogonal_procrustes(source, source @ rotation), rotation, atol=1e-10)


def test_procrustes_needs_pairs():
    with pytest.raises(VoxanonError, match="paired"):
        orthogonal_procrustes(np.ones((3, 2)), np.ones((4, 2)))


def test_wasserstein_procrustes_aligns_a_shuffled_rotated_noisy_set():
    rng = np.random.default_rng(0)
    source = clustered(rng, speakers=20, per_speaker=10, dim=32)
    rotation = ortho_group.rvs(32, random_state=1)
    order = rng.permutation(len(source))
    target = l2_normalise((source @ rotation)[order] + 0.01 * rng.normal(size=source.shape))
    estimate = wasserstein_procrustes(source, target)
    restored = target @ estimate.T
    nearest = np.argmin(((source[:, None, :] - restored[None, :, :]) ** 2).sum(-1), axis=1)
    segment_top1 = np.mean(nearest == np.argsort(order))
    assert segment_top1 > 0.9
    np.testing.assert_allclose(estimate @ estimate.T, np.eye(32), atol=1e-10)


def test_wasserstein_procrustes_accepts_sets_of_different_sizes():
    rng = np.random.default_rng(4)
    source = clustered(rng, speakers=10, per_speaker=12, dim=16)
    rotation = ortho_group.rvs(16, random_state=2)
    target = (source @ rotation)[rng.permutation(len(source))[:90]]
    estimate = wasserstein_procrustes(source, target, WassersteinProcrustesConfig(iterations=64))
    restored = target @ estimate.T
    distances = ((restored[:, None, :] - source[None, :, :]) ** 2).sum(-1).min(axis=1)
    assert np.median(distances) < 1e-2


def test_wasserstein_config_is_validated():
    with pytest.raises(VoxanonError, match="batch_size"):
        WassersteinProcrustesConfig(batch_size=0)


def test_top1_counts_speaker_and_segment_hits():
    original = Vectors(("a1", "a2", "b1"), np.eye(3))
    restored = Vectors(("a2", "a1", "b1"), np.eye(3))
    utt2spk = {"a1": "A", "a2": "A", "b1": "B"}
    assert top1_accuracy(original, restored, utt2spk) == (3, 1)


@pytest.mark.parametrize("method", ["procrustes", "wasserstein-procrustes"])
@pytest.mark.parametrize("by_sex,pca", [(False, None), (True, 10)])
def test_attack_inverts_a_rotation_anonymiser(method, by_sex, pca):
    inputs, spk2gender = synthetic_attack_inputs()
    result = inversion_attack(inputs, method, pca_dim=pca, spk2gender=spk2gender if by_sex else None,
                              wasserstein=WassersteinProcrustesConfig(iterations=64))
    assert result.train_top1_speaker > 95 and result.test_top1_speaker > 95
    assert result.test_top1_segment > 50
    assert result.eer_rocch < 5 and result.min_cllr < 0.2
    assert result.linkability > 0.4
    assert result.n_target == 6 * 12 and result.n_nontarget == 6 * 12 * 5
    assert (result.pca_explained_variance != {}) == (pca is not None)
    keys = list(result.as_dict())
    assert keys[:8] == ["train_top1_speaker", "train_top1_segment", "test_top1_speaker", "test_top1_segment",
                        "eer_rocch", "min_cllr", "cllr", "linkability"]


def test_attack_fails_against_an_anonymiser_that_is_no_rotation():
    dim = 24
    scrambler = np.random.default_rng(9).normal(size=(dim, dim)) ** 3
    inputs, _ = synthetic_attack_inputs(dim=dim, anonymiser=scrambler)
    rng = np.random.default_rng(1)
    # Replace the anonymised test vectors by unrelated ones: nothing can be recovered.
    unrelated = inputs.test_anon.with_matrix(l2_normalise(rng.normal(size=inputs.test_anon.matrix.shape)))
    inputs = InversionInputs(**{**inputs.__dict__, "test_anon": unrelated})
    result = inversion_attack(inputs, "procrustes")
    assert result.test_top1_speaker < 40
    assert result.eer_rocch > 25


def test_by_sex_rejects_cross_sex_trials():
    inputs, spk2gender = synthetic_attack_inputs()
    trials = [*inputs.trials, Trial("f0", "m0-u08", False)]
    inputs = InversionInputs(**{**inputs.__dict__, "trials": trials})
    with pytest.raises(VoxanonError, match="different sex"):
        inversion_attack(inputs, "procrustes", spk2gender=spk2gender)


def test_inputs_are_checked():
    inputs, spk2gender = synthetic_attack_inputs()
    with pytest.raises(VoxanonError, match="spk2gender.*f0"):
        inversion_attack(inputs, "procrustes", spk2gender={k: v for k, v in spk2gender.items() if k != "f0"})
    with pytest.raises(VoxanonError, match="PCA needs"):
        inversion_attack(inputs, "procrustes", pca_dim=500)
    missing = InversionInputs(**{**inputs.__dict__, "trials": [*inputs.trials, Trial("f0", "ghost", False)]})
    with pytest.raises(VoxanonError, match="ghost"):
        inversion_attack(missing, "procrustes")
    unpaired = InversionInputs(**{**inputs.__dict__, "train_anon": inputs.train_anon.select(inputs.train_anon.ids[1:])})
    with pytest.raises(VoxanonError, match="train-anon"):
        inversion_attack(unpaired, "procrustes")
    with pytest.raises(VoxanonError, match="unknown attack"):
        inversion_attack(inputs, "rotation")
