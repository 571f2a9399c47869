"""WER arithmetic against hand-aligned cases, the English normaliser, and id checks."""
from __future__ import annotations

import pytest

from voxanon.data_prep.errors import VoxanonError
from voxanon.eval.wer import WerResult, normalise_english, wer_difference, word_error_rate


def counts(result: WerResult) -> tuple[int, int, int, int]:
    return result.substitutions, result.deletions, result.insertions, result.hits


def test_identical_transcripts_have_zero_wer():
    refs = {"a": "THE BOX WAS THROWN", "b": "NOTE CLOSELY"}
    result = word_error_rate(refs, dict(refs))
    assert result.wer == 0.0
    assert counts(result) == (0, 0, 0, 6)
    assert (result.n_reference_words, result.n_utterances) == (6, 2)


def test_substitution_deletion_insertion_counted_by_hand():
    # a: "the cat sat on mat" vs "the bat sat mat": cat->bat (S), "on" deleted (D), 3 hits.
    # b: "hello world" vs "hello big world": "big" inserted (I), 2 hits.
    refs = {"a": "THE CAT SAT ON MAT", "b": "HELLO WORLD"}
    hyps = {"a": "the bat sat mat", "b": "hello big world"}
    result = word_error_rate(refs, hyps)
    assert counts(result) == (1, 1, 1, 5)
    assert result.n_reference_words == 7
    assert result.errors == 3
    assert result.wer == pytest.approx(100 * 3 / 7)


def test_wer_is_corpus_level_not_mean_of_utterances():
    # One long utterance all right, one short all wrong: corpus WER 1/11, not the mean 50 %.
    refs = {"long": "A B C D E F G H I J", "short": "CAT"}
    hyps = {"long": "A B C D E F G H I J", "short": "DOG"}
    result = word_error_rate(refs, hyps, normalise=False)
    assert counts(result) == (1, 0, 0, 10)
    assert result.wer == pytest.approx(100 / 11)


def test_all_deleted_and_many_insertions_exceed_bounds_correctly():
    assert word_error_rate({"u": "A B C"}, {"u": ""}).wer == 100.0
    result = word_error_rate({"u": "CAT"}, {"u": "cat sat on the mat"})
    assert counts(result) == (0, 0, 4, 1)
    assert result.wer == 400.0


def test_normaliser_numbers_case_punctuation_and_spelling():
    assert normalise_english("THE GIRL SOLD FIFTY BONDS") == "the girl sold 50 bonds"
    assert normalise_english("The girl sold 50 bonds.") == "the girl sold 50 bonds"
    assert normalise_english("Twenty-one, colour!") == "21 color"
    assert normalise_english("I WON'T GO") == "i will not go"
    assert normalise_english("UM") == ""


def test_normalisation_removes_format_only_differences():
    refs = {"u1": "THE GIRL AT THE BOOTH SOLD FIFTY BONDS", "u2": "LIFT THE SQUARE STONE"}
    hyps = {"u1": "The girl at the booth sold 50 bonds.", "u2": "Lift the square stone!"}
    assert word_error_rate(refs, hyps).wer == 0.0
    raw = word_error_rate(refs, hyps, normalise=False)
    # Without normalisation every word differs by case, and "50."/"stone!" too.
    assert raw.substitutions == 12 and raw.hits == 0


def test_empty_normalised_reference_counts_hypothesis_as_insertions():
    refs = {"filler": "UM", "real": "NOTE CLOSELY"}
    hyps = {"filler": "hello there", "real": "note closely"}
    result = word_error_rate(refs, hyps)
    assert counts(result) == (0, 0, 2, 2)
    assert result.n_reference_words == 2
    assert result.wer == 100.0


def test_no_reference_words_at_all_is_an_error():
    with pytest.raises(VoxanonError, match="empty after normalisation"):
        word_error_rate({"a": "UH", "b": ""}, {"a": "x", "b": ""})
    with pytest.raises(VoxanonError, match="no utterances"):
        word_error_rate({}, {})


def test_mismatched_ids_are_counted_and_named():
    refs = {f"utt{i}": "A WORD" for i in range(8)}
    hyps = {f"utt{i}": "a word" for i in range(1, 8)} | {"stray1": "x", "stray2": "y"}
    with pytest.raises(VoxanonError) as raised:
        word_error_rate(refs, hyps)
    message = str(raised.value)
    assert "1 utterance(s) have a reference but no hypothesis (e.g. utt0)" in message
    assert "2 utterance(s) have a hypothesis but no reference (e.g. stray1, stray2)" in message


def test_many_missing_ids_are_abbreviated():
    refs = {f"utt{i:02d}": "WORD" for i in range(12)}
    with pytest.raises(VoxanonError, match=r"12 utterance\(s\) have a reference .*utt04, \.\.\.\)"):
        word_error_rate(refs, {})


def test_non_string_transcript_is_rejected_with_its_id():
    with pytest.raises(TypeError, match="u1"):
        word_error_rate({"u1": "A"}, {"u1": None})


def test_wer_difference_sign_and_reference_check():
    refs = {"a": "RED GREEN BLUE GREY"}
    original = word_error_rate(refs, {"a": "red green blue grey"})
    anonymised = word_error_rate(refs, {"a": "red grin blue"})
    assert wer_difference(original, anonymised) == pytest.approx(50.0)
    other = word_error_rate({"a": "RED GREEN"}, {"a": "red green"})
    with pytest.raises(VoxanonError, match="different references"):
        wer_difference(original, other)
