"""Score files (data_prep.scores) and pairing scores with trials (eval.scores)."""
import numpy as np
import pytest

from voxanon.data_prep.corpus import Trial
from voxanon.data_prep.errors import VoxanonError
from voxanon.data_prep.scores import ScoreFileError, ScoreTable, read_scores, repeated_pairs, write_scores
from voxanon.eval.scores import ScoreError, as_score_array, check_score_sets, pair_trials_with_scores


def test_round_trip_keeps_every_float(tmp_path):
    rng = np.random.default_rng(0)
    table = ScoreTable(["a", "b", "c"], ["u1", "u2", "u3"], rng.normal(size=3) * 1e3)
    write_scores(tmp_path / "scores", table)
    back = read_scores(tmp_path / "scores")
    assert back.first == table.first and back.second == table.second
    np.testing.assert_array_equal(back.scores, table.scores)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("text, message", [
    ("a u1 0.5\nb u2\n", "line 2: expected"),
    ("a u1 0.5\nb u2 high\n", "line 2: score 'high'"),
    ("a u1 nan\n", "line 1: score 'nan' is not a finite number"),
    ("a u1 -inf\n", "line 1: score '-inf'"),
    ("a u1 0.5\n\na u1 0.7\n", "line 3: pair a u1 already scored on line 1"),
])
def test_malformed_files_name_the_lines(tmp_path, text, message):
    (tmp_path / "scores").write_text(text)
    with pytest.raises(ScoreFileError, match=message) as caught:
        read_scores(tmp_path / "scores")
    assert isinstance(caught.value, VoxanonError)


def test_missing_file(tmp_path):
    with pytest.raises(ScoreFileError, match="cannot read"):
        read_scores(tmp_path / "absent")


def test_as_score_array_checks():
    np.testing.assert_array_equal(as_score_array([1, 2], "x"), [1.0, 2.0])
    assert as_score_array([np.inf], "llr", allow_infinite=True)[0] == np.inf
    for bad, message in (([], "empty"), ([[1.0]], "1-D"), ([np.nan], "NaN"), ([-np.inf], "infinite"),
                         (["a"], "numbers")):
        with pytest.raises(ScoreError, match=message):
            as_score_array(bad, "x")
    with pytest.raises(ScoreError, match="non-target scores: empty"):
        check_score_sets([1.0], [])


TRIALS = [Trial("s1", "u1", True), Trial("s2", "u1", False), Trial("s1", "u2", False), Trial("s2", "u2", True)]


def test_pairing_does_not_depend_on_score_order():
    table = ScoreTable(["s2", "s1", "s2", "s1"], ["u2", "u2", "u1", "u1"], np.array([4.0, 3.0, 2.0, 1.0]))
    paired = pair_trials_with_scores(TRIALS, table)
    np.testing.assert_array_equal(paired.tar, [1.0, 4.0])
    np.testing.assert_array_equal(paired.non, [2.0, 3.0])
    in_order = ScoreTable(["s1", "s2", "s1", "s2"], ["u1", "u1", "u2", "u2"], np.array([1.0, 2.0, 3.0, 4.0]))
    same = pair_trials_with_scores(TRIALS, in_order)
    np.testing.assert_array_equal(same.tar, paired.tar)
    np.testing.assert_array_equal(same.non, paired.non)


def test_missing_and_unused_scores_are_counted_with_examples():
    table = ScoreTable(["s1", "s2", "s9", "s8"], ["u1", "u1", "u9", "u8"], np.array([1.0, 2.0, 5.0, 6.0]))
    with pytest.raises(ScoreError) as caught:
        pair_trials_with_scores(TRIALS, table)
    message = str(caught.value)
    assert "2 trial(s) have no score, e.g. 's1 u2', 's2 u2'" in message
    assert "2 score(s) match no trial, e.g. 's9 u9', 's8 u8'" in message
    assert "--allow-missing" in message


def test_allow_missing_drops_and_reports():
    table = ScoreTable(["s1", "s2", "s2", "x"], ["u1", "u1", "u2", "y"], np.array([1.0, 2.0, 4.0, 9.0]))
    paired = pair_trials_with_scores(TRIALS, table, allow_missing=True)
    np.testing.assert_array_equal(paired.tar, [1.0, 4.0])
    np.testing.assert_array_equal(paired.non, [2.0])
    assert paired.trials_without_score == [("s1", "u2")]
    assert paired.scores_without_trial == [("x", "y")]


def test_duplicate_trials_and_single_class_are_errors():
    table = ScoreTable(["s1", "s2"], ["u1", "u1"], np.array([1.0, 2.0]))
    with pytest.raises(ScoreError, match="listed more than once"):
        pair_trials_with_scores(TRIALS[:2] + TRIALS[:1], table)
    with pytest.raises(ScoreError, match="0 non-target"):
        pair_trials_with_scores([TRIALS[0]], ScoreTable(["s1"], ["u1"], np.array([1.0])))


def test_repeated_pairs_compares_exact_keys_after_hashing():
    assert repeated_pairs(["a", "b", "a", "a"], ["x", "x", "x", "y"]) == [2]
    assert repeated_pairs([], []) == []
    # hash(-1) == hash(-2) in CPython: equal hashes, different pairs, nothing repeated.
    assert repeated_pairs([-1, -2, -1], [0, 0, 0]) == [2]
