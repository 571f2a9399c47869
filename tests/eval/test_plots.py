"""Metric figures: content of the ZEBRA profile and the other plots, and atomic PNG/PDF output."""
import numpy as np
import pytest

from voxanon.data_prep.scores import ScoreTable
from voxanon.eval.cllr import min_ece, prior_entropy
from voxanon.eval.plots import (calibration_figure, det_figure, ece_profile_figure, save_figure, similarity_figure,
                                zoo_figure)
from voxanon.eval.scores import ScoreError
from voxanon.eval.similarity import similarity_matrices
from voxanon.eval.zebra import zebra


def score_sets(seed, separation):
    rng = np.random.default_rng(seed)
    return rng.normal(separation, 1.0, 200), rng.normal(0.0, 1.0, 800)


def test_ece_profile_curves_and_legend():
    tar, non = score_sets(0, 2.0)
    other = score_sets(1, 0.5)
    figure = ece_profile_figure([("original", tar, non), ("protected", *other)])
    axes = figure.axes[0]
    labels = [text.get_text() for text in axes.get_legend().get_texts()]
    assert labels == ["perfect privacy (0, 0, 0)", f"original {zebra(tar, non)}", f"protected {zebra(*other)}"]
    lines = axes.get_lines()
    x, y = lines[0].get_data()
    assert len(x) == 201 and x[0] == -10 and x[-1] == 10
    np.testing.assert_allclose(y, prior_entropy(x))
    np.testing.assert_allclose(lines[1].get_ydata(), min_ece(tar, non, x), atol=1e-5)
    assert axes.get_ylim() == (0.0, 1.4) and axes.get_xlim() == (-10.0, 10.0)


def test_actual_ece_raises_the_upper_limit_for_badly_calibrated_scores():
    tar, non = score_sets(2, 2.0)
    figure = ece_profile_figure([("raw", 10 * tar - 5, 10 * non - 5)], show_actual=True)
    axes = figure.axes[0]
    actual = axes.get_lines()[2].get_ydata()
    assert axes.get_ylim()[1] == pytest.approx(1.4 * max(1.0, actual.min()))
    assert axes.get_legend().get_texts()[-1].get_text() == "raw actual ECE"


def test_normalised_profile_puts_perfect_privacy_at_one():
    tar, non = score_sets(3, 1.0)
    figure = ece_profile_figure([("s", tar, non)], normalized=True)
    np.testing.assert_allclose(figure.axes[0].get_lines()[0].get_ydata(), 1.0)


def test_save_figure_writes_png_and_pdf_atomically(tmp_path):
    tar, non = score_sets(4, 1.0)
    written = save_figure(ece_profile_figure([("s", tar, non)]), tmp_path / "profile")
    assert [p.name for p in written] == ["profile.png", "profile.pdf"]
    assert (tmp_path / "profile.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "profile.pdf").read_bytes()[:4] == b"%PDF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.pdf", "profile.png"]


def test_similarity_and_zoo_figures():
    rng = np.random.default_rng(5)
    utts = [f"s{s}_{k}" for s in range(3) for k in range(4)]
    utt2spk = {u: u.split("_")[0] for u in utts}
    pairs = [(a, b) for i, a in enumerate(utts) for b in utts[i + 1:]]
    same = np.array([utt2spk[a] == utt2spk[b] for a, b in pairs])

    def table(strength):
        return ScoreTable([a for a, _ in pairs], [b for _, b in pairs], strength * same + rng.normal(size=len(pairs)))

    matrices = similarity_matrices(table(3.0), table(0.2), table(1.0), utt2spk, symmetrize_op=True)
    image = similarity_figure(matrices).axes[0].get_images()[0]
    assert image.get_array().shape == (6, 6) and image.get_clim() == (0.0, 1.0)
    log_image = similarity_figure(matrices, log_scale=True).axes[0].get_images()[0]
    assert log_image.get_clim()[1] == 0.0
    zoo_axes = zoo_figure(matrices.oo.zoo(), title="OO").axes[0]
    assert sorted(t.get_text() for t in zoo_axes.texts) == ["0", "1", "2"]


def test_det_and_calibration_figures():
    tar, non = score_sets(6, 1.5)
    det = det_figure([("a", tar, non), ("b", tar + 1, non)]).axes[0]
    assert len(det.get_legend().get_texts()) == 2 and "ROCCH-EER" in det.get_legend().get_texts()[0].get_text()
    calibration = calibration_figure(tar, non, n_bins=10).axes[0]
    assert calibration.get_xlim() == (0.0, 1.0)
    with pytest.raises(ScoreError, match="no score set"):
        det_figure([])
    with pytest.raises(ScoreError, match="no score set"):
        ece_profile_figure([])


def test_det_axes_probit_is_the_normal_quantile():
    from scipy.stats import norm

    from voxanon.eval.plots import probit

    rates = np.concatenate([np.linspace(1e-6, 1 - 1e-6, 10_001), [0.001, 0.5, 0.999]])
    assert np.array_equal(probit(rates), norm.ppf(rates))
