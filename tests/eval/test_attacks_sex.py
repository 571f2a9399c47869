import numpy as np
import pytest
from scipy.stats import norm

from voxanon.data_prep.errors import VoxanonError
from voxanon.eval.attacks.sex import assess_sex_llrs, sex_attack, train_sex_classifier


def gaussian_sexes(rng, n, separation, dim=8, speakers=40):
    """Shared-covariance Gaussians: the true LLR is ``separation * x_0``, its EER Φ(−separation/2)."""
    speaker = rng.integers(0, speakers, size=n)
    is_female = speaker % 2 == 0
    x = rng.normal(size=(n, dim))
    x[:, 0] += np.where(is_female, separation / 2, -separation / 2)
    return x, is_female, np.array([f"s{k}" for k in speaker])


@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_calibrated_llrs_on_gaussians(kind):
    rng = np.random.default_rng(0)
    separation = 2.0
    x, is_female, groups = gaussian_sexes(rng, 3000, separation)
    test_x, test_female, _ = gaussian_sexes(rng, 3000, separation)
    result = sex_attack(x, is_female, test_x, test_female, kind, train_groups=groups)
    assert result.eer == pytest.approx(100 * norm.cdf(-separation / 2), abs=2.5)
    assert result.cllr - result.min_cllr < 0.05
    oracle = assess_sex_llrs(separation * test_x[:, 0], test_female)
    assert result.min_cllr == pytest.approx(oracle.min_cllr, abs=0.05)
    assert result.dece == pytest.approx(oracle.dece, abs=0.03)
    assert result.n_female + result.n_male == 3000


def test_uninformative_vectors_disclose_nothing():
    rng = np.random.default_rng(1)
    x, is_female, groups = gaussian_sexes(rng, 1500, 0.0)
    test_x, test_female, _ = gaussian_sexes(rng, 1500, 0.0)
    result = sex_attack(x, is_female, test_x, test_female, "logistic", train_groups=groups)
    assert result.eer > 40
    assert result.dece < 0.05
    assert result.cllr < 1.05 and result.min_cllr > 0.9


def test_mlp_finds_what_a_linear_classifier_cannot():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3000, 4))
    is_female = x[:, 0] * x[:, 1] > 0
    test_x = rng.normal(size=(2000, 4))
    test_female = test_x[:, 0] * test_x[:, 1] > 0
    linear = sex_attack(x, is_female, test_x, test_female, "logistic")
    mlp = sex_attack(x, is_female, test_x, test_female, "mlp")
    assert linear.eer > 40
    assert mlp.eer < 10


def test_llr_sign_supports_female():
    rng = np.random.default_rng(3)
    x, is_female, groups = gaussian_sexes(rng, 1000, 4.0)
    classifier = train_sex_classifier(x, is_female, "logistic", groups=groups)
    llr = classifier.llr(x)
    assert llr[is_female].mean() > 1 > -1 > llr[~is_female].mean()


def test_inputs_are_checked():
    x = np.zeros((4, 2))
    with pytest.raises(VoxanonError, match="2 male"):
        train_sex_classifier(x, [True, True, True, False])
    with pytest.raises(VoxanonError, match="labels"):
        train_sex_classifier(x, [True, False])
    with pytest.raises(VoxanonError, match="unknown sex classifier"):
        train_sex_classifier(np.eye(4), [True, False, True, False], "forest")
    with pytest.raises(VoxanonError, match="both sexes"):
        assess_sex_llrs([1.0, 2.0], [True, True])
    rng = np.random.default_rng(4)
    x, is_female, _ = gaussian_sexes(rng, 100, 2.0)
    with pytest.raises(VoxanonError, match="do not fit"):
        sex_attack(x, is_female, np.zeros((3, 5)), [True, False, True])


def test_constant_vectors_give_zero_evidence():
    rng = np.random.default_rng(5)
    is_female = rng.random(200) < 0.5
    constant = np.ones((200, 3))
    result = sex_attack(constant, is_female, constant, is_female, "logistic")
    assert result.eer == pytest.approx(50.0)
    assert result.dece == pytest.approx(0.0, abs=1e-6)
    assert result.min_cllr == pytest.approx(1.0, abs=1e-6)
    assert result.cllr == pytest.approx(1.0)
