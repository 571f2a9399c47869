"""Voice similarity matrices, D_diag, DeID, G_VD and zoo coordinates (Noé et al. 2020; Noé et al. 2022, §4)."""
import math

import numpy as np
import pytest

from voxanon.data_prep.scores import ScoreTable
from voxanon.eval.calibration import optimal_llr
from voxanon.eval.scores import ScoreError
from voxanon.eval.similarity import (deidentification, diagonal_dominance, similarity_matrices, speaker_similarity,
                                     split_pair_scores, voice_distinctiveness_gain_db)

SPEAKERS = ["s0", "s1", "s2", "s3"]
UTTS = [f"{spk}_u{k}" for spk in SPEAKERS for k in range(5)]
UTT2SPK = {utt: utt.split("_")[0] for utt in UTTS}


def embeddings(seed, speaker_strength):
    rng = np.random.default_rng(seed)
    centres = {spk: rng.normal(size=16) for spk in SPEAKERS}
    vectors = np.array([speaker_strength * centres[UTT2SPK[u]] + rng.normal(size=16) for u in UTTS])
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def pair_table(first, second, *, include_same_index):
    """Upper triangle in list order, as the challenge code builds its trial lists."""
    rows = [(i, j) for i in range(len(UTTS)) for j in range(len(UTTS)) if j > i or (include_same_index and j == i)]
    return ScoreTable([UTTS[i] for i, _ in rows], [UTTS[j] for _, j in rows],
                      np.array([first[i] @ second[j] for i, j in rows]))


@pytest.fixture(scope="module")
def settings():
    original, protected = embeddings(0, 2.0), embeddings(1, 0.6)
    oo = pair_table(original, original, include_same_index=False)
    op = pair_table(original, protected, include_same_index=True)
    pp = pair_table(protected, protected, include_same_index=False)
    return oo, op, pp


def test_diagonal_dominance_reference_matrices():
    assert diagonal_dominance(np.eye(5)) == 1.0
    assert diagonal_dominance(np.ones((5, 5))) == 0.0
    assert diagonal_dominance(np.ones((5, 5)) - np.eye(5)) == 1.0


@pytest.mark.parametrize("seed", range(4))
def test_diagonal_dominance_equals_the_challenge_form(seed):
    matrix = np.random.default_rng(seed).uniform(size=(6 + seed, 6 + seed))
    n = matrix.shape[0]
    mean_all, mean_diag = matrix.mean(), np.diag(matrix).mean()
    assert diagonal_dominance(matrix) == pytest.approx(abs(mean_diag - n / (n - 1) * (mean_all - mean_diag / n)),
                                                       abs=1e-14)


def test_diagonal_dominance_input_checks():
    with pytest.raises(ScoreError, match="square"):
        diagonal_dominance(np.ones((1, 1)))
    with pytest.raises(ScoreError, match="square"):
        diagonal_dominance(np.ones((2, 3)))
    with_gap = np.eye(3)
    with_gap[0, 0] = np.nan
    with pytest.warns(RuntimeWarning, match="empty cell"):
        assert diagonal_dominance(with_gap) == 1.0


def test_three_matrices(settings):
    oo, op, pp = settings
    # One direction per speaker pair in OP, as the challenge lists: pool it (VoicePrivacy 2022).
    matrices = similarity_matrices(oo, op, pp, UTT2SPK, symmetrize_op=True)
    assert matrices.speakers == SPEAKERS
    for setting in (matrices.oo, matrices.op, matrices.pp):
        assert setting.matrix.shape == (4, 4)
        assert np.all((setting.matrix > 0) & (setting.matrix < 1))
    np.testing.assert_allclose(matrices.oo.matrix, matrices.oo.matrix.T)
    on = np.eye(4, dtype=bool)
    assert matrices.oo.matrix[on].min() > matrices.oo.matrix[~on].max()
    assert matrices.deid == pytest.approx(1 - diagonal_dominance(matrices.op.matrix)
                                          / diagonal_dominance(matrices.oo.matrix))
    assert matrices.gvd_db < 0
    assert matrices.gvd_db == pytest.approx(voice_distinctiveness_gain_db(matrices.oo.matrix, matrices.pp.matrix))


def test_exhaustive_op_list_fills_every_cell():
    original, protected = embeddings(0, 2.0), embeddings(1, 0.6)
    rows = [(i, j) for i in range(len(UTTS)) for j in range(len(UTTS))]
    op = ScoreTable([UTTS[i] for i, _ in rows], [UTTS[j] for _, j in rows],
                    np.array([original[i] @ protected[j] for i, j in rows]))
    oo = pair_table(original, original, include_same_index=False)
    matrices = similarity_matrices(oo, op, oo, UTT2SPK)
    assert not np.isnan(matrices.op.matrix).any()
    assert matrices.op.count[0, 1] == matrices.op.count[1, 0] == 25
    assert matrices.gvd_db == 0.0


def test_sigmoid_of_mean_against_a_direct_computation(settings):
    oo, _, _ = settings
    tar, non = split_pair_scores(oo, UTT2SPK)
    tar_llr, non_llr = optimal_llr(tar, non, laplace=True)
    same = np.array([UTT2SPK[a] == UTT2SPK[b] for a, b in zip(oo.first, oo.second)])
    llrs = np.empty(len(oo))
    llrs[same], llrs[~same] = tar_llr, non_llr
    result = speaker_similarity(oo, UTT2SPK, symmetric=True)
    between_0_and_1 = [k for k, (a, b) in enumerate(zip(oo.first, oo.second))
                       if {UTT2SPK[a], UTT2SPK[b]} == {"s0", "s1"}]
    assert result.matrix[0, 1] == pytest.approx(1 / (1 + np.exp(-llrs[between_0_and_1].mean())), abs=1e-14)
    within_2 = [k for k, (a, b) in enumerate(zip(oo.first, oo.second)) if UTT2SPK[a] == UTT2SPK[b] == "s2"]
    assert result.count[2, 2] == len(within_2) == 10
    geometric = speaker_similarity(oo, UTT2SPK, symmetric=True, definition="geometric_mean")
    assert geometric.matrix[2, 2] == pytest.approx(
        np.exp(np.mean(-np.logaddexp(0, -llrs[within_2]))), abs=1e-14)
    # Jensen: the geometric mean of posteriors never exceeds the sigmoid of the mean LLR.
    assert np.all(geometric.matrix <= result.matrix + 1e-15)


def test_identical_utterance_pairs_in_op(settings):
    _, op, _ = settings
    default = speaker_similarity(op, UTT2SPK, symmetric=False)
    kept = speaker_similarity(op, UTT2SPK, symmetric=False, exclude_same_utt=False)
    assert default.count[1, 1] == 10 and kept.count[1, 1] == 15
    assert default.count[1, 0] == 0 and np.isnan(default.matrix[1, 0])


def test_symmetrised_op_pools_both_directions(settings):
    _, op, _ = settings
    one_way = speaker_similarity(op, UTT2SPK, symmetric=False)
    pooled = speaker_similarity(op, UTT2SPK, symmetric=True)
    np.testing.assert_allclose(pooled.matrix, pooled.matrix.T)
    np.testing.assert_array_equal(pooled.count, one_way.count + one_way.count.T - np.diag(np.diag(one_way.count)))


def test_each_setting_is_calibrated_on_its_own(settings):
    oo, op, pp = settings
    rescaled = ScoreTable(op.first, op.second, 2.0 * op.scores + 0.5)
    np.testing.assert_array_equal(speaker_similarity(rescaled, UTT2SPK, symmetric=False).matrix,
                                  speaker_similarity(op, UTT2SPK, symmetric=False).matrix)


def test_zoo_coordinates(settings):
    oo, _, _ = settings
    result = speaker_similarity(oo, UTT2SPK, symmetric=True)
    zoo = result.zoo()
    tar, non = split_pair_scores(oo, UTT2SPK)
    tar_llr, non_llr = optimal_llr(tar, non, laplace=True)
    same = np.array([UTT2SPK[a] == UTT2SPK[b] for a, b in zip(oo.first, oo.second)])
    llrs = np.empty(len(oo))
    llrs[same], llrs[~same] = tar_llr, non_llr
    for index, spk in enumerate(SPEAKERS):
        own = [k for k, (a, b) in enumerate(zip(oo.first, oo.second)) if UTT2SPK[a] == UTT2SPK[b] == spk]
        others = [k for k, (a, b) in enumerate(zip(oo.first, oo.second))
                  if (UTT2SPK[a] == spk) != (UTT2SPK[b] == spk)]
        assert zoo.target_mean_llr[index] == pytest.approx(llrs[own].mean(), abs=1e-12)
        assert zoo.nontarget_mean_llr[index] == pytest.approx(llrs[others].mean(), abs=1e-12)
    assert np.all(zoo.target_mean_llr > zoo.nontarget_mean_llr)


def test_single_utterance_speaker_leaves_an_empty_diagonal_cell():
    utt2spk = dict(UTT2SPK, lone="s9")
    rng = np.random.default_rng(3)
    first, second = ["lone", "lone", "s0_u0", "s0_u0"], ["s0_u1", "s1_u0", "s0_u1", "s1_u1"]
    table = ScoreTable(first, second, rng.normal(size=4))
    result = speaker_similarity(table, utt2spk, symmetric=True, speakers=["s0", "s1", "s9"])
    assert np.isnan(result.matrix[2, 2]) and result.count[2, 2] == 0
    with pytest.warns(RuntimeWarning):
        diagonal_dominance(result.matrix)


def test_deid_and_gvd_edge_cases():
    constant, identity = np.full((3, 3), 0.5), np.eye(3)
    assert math.isnan(deidentification(constant, identity))
    assert deidentification(identity, identity) == 0.0
    assert deidentification(0.5 * identity + 0.25, identity) < 0
    assert voice_distinctiveness_gain_db(identity, constant) == -math.inf
    assert math.isnan(voice_distinctiveness_gain_db(constant, identity))


def test_input_errors(settings):
    oo, _, _ = settings
    with pytest.raises(ScoreError, match="not in utt2spk"):
        speaker_similarity(ScoreTable(["nobody"], ["s0_u0"], np.zeros(1)), UTT2SPK, symmetric=True)
    only_same = ScoreTable(["s0_u0", "s0_u1"], ["s0_u2", "s0_u3"], np.zeros(2))
    with pytest.raises(ScoreError, match="calibration needs both"):
        speaker_similarity(only_same, UTT2SPK, symmetric=True)
    with pytest.raises(ScoreError, match="definition"):
        speaker_similarity(oo, UTT2SPK, symmetric=True, definition="arithmetic")
    with pytest.raises(ScoreError, match="speaker list"):
        speaker_similarity(oo, UTT2SPK, symmetric=True, speakers=["s0", "s1"])
