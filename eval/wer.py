"""Word error rate of transcripts against reference texts, for the ASR utility evaluation.

References (VoicePrivacy ``text`` files are upper case without punctuation) and
hypotheses (Whisper writes mixed case, punctuation and digits) pass through the same
normaliser, Whisper's English text normaliser, before words are aligned; otherwise
"FIFTY" against "50." would count as an error. With ``normalise=False`` both sides are
only split on whitespace, as VoicePrivacy 2024 (SpeechBrain ``ErrorRateStats``) does.

WER is a corpus-level figure: total edits over total reference words, in percent,
``100 * (S + D + I) / (S + D + H)``. It can exceed 100 when insertions are many.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import jiwer

from ..data_prep.errors import VoxanonError


class WerError(VoxanonError):
    """References and hypotheses that cannot be scored together."""


@dataclass(frozen=True)
class WerResult:
    """Corpus-level alignment counts; ``wer`` is in percent."""

    wer: float
    substitutions: int
    deletions: int
    insertions: int
    hits: int
    n_reference_words: int
    n_utterances: int

    @property
    def errors(self) -> int:
        """Total word edits, S + D + I."""
        return self.substitutions + self.deletions + self.insertions


@lru_cache(maxsize=1)
def _english_normaliser():
    from whisper_normalizer.english import EnglishTextNormalizer

    return EnglishTextNormalizer()


def normalise_english(text: str) -> str:
    """Whisper's English normaliser: lower case, no punctuation, numbers as digits, US spelling.

    Also expands contractions ("WON'T" -> "will not") and drops fillers ("uh", "um"), so an
    utterance can normalise to the empty string.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected a str, got {type(text).__name__}")
    return _english_normaliser()(text)


def _describe_ids(ids: list[str], what: str) -> str:
    shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
    return f"{len(ids)} utterance(s) {what} (e.g. {shown})"


def _check_same_ids(references: Mapping[str, str], hypotheses: Mapping[str, str]) -> list[str]:
    missing = sorted(set(references) - set(hypotheses))
    extra = sorted(set(hypotheses) - set(references))
    if missing or extra:
        problems = []
        if missing:
            problems.append(_describe_ids(missing, "have a reference but no hypothesis"))
        if extra:
            problems.append(_describe_ids(extra, "have a hypothesis but no reference"))
        raise WerError("references and hypotheses must cover the same utterance ids: "
                       + "; ".join(problems))
    if not references:
        raise WerError("no utterances to score")
    return sorted(references)


def _prepare(text: str, utterance: str, normalise: bool) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{utterance}: expected a str transcript, got {type(text).__name__}")
    return " ".join((normalise_english(text) if normalise else text).split())


def word_error_rate(references: Mapping[str, str], hypotheses: Mapping[str, str], *,
                    normalise: bool = True) -> WerResult:
    """Corpus WER of ``hypotheses`` against ``references``, both ``{utterance id: text}``.

    The two mappings must have exactly the same ids. An utterance whose (normalised)
    reference is empty contributes its hypothesis words as insertions; a set with no
    reference words at all has no WER and raises :class:`WerError`.
    """
    utterances = _check_same_ids(references, hypotheses)
    reference_texts = [_prepare(references[u], u, normalise) for u in utterances]
    hypothesis_texts = [_prepare(hypotheses[u], u, normalise) for u in utterances]
    n_reference_words = sum(len(text.split()) for text in reference_texts)
    if n_reference_words == 0:
        raise WerError(f"the references of all {len(utterances)} utterance(s) are empty"
                       + (" after normalisation" if normalise else "") + "; WER is undefined")
    alignment = jiwer.process_words(reference_texts, hypothesis_texts)
    errors = alignment.substitutions + alignment.deletions + alignment.insertions
    return WerResult(wer=100.0 * errors / n_reference_words,
                     substitutions=alignment.substitutions, deletions=alignment.deletions,
                     insertions=alignment.insertions, hits=alignment.hits,
                     n_reference_words=n_reference_words, n_utterances=len(utterances))


def wer_difference(original: WerResult, anonymised: WerResult) -> float:
    """Utility loss in percentage points: anonymised WER minus original WER.

    Both results must score the same references (same utterance and reference-word
    counts); positive values mean anonymisation made the speech harder to recognise.
    """
    if (original.n_utterances, original.n_reference_words) != (anonymised.n_utterances,
                                                                 anonymised.n_reference_words):
        raise WerError("original and anonymised WER were computed on different references: "
                       f"{original.n_utterances} utterances / {original.n_reference_words} words "
                       f"vs {anonymised.n_utterances} utterances / {anonymised.n_reference_words} words")
    return anonymised.wer - original.wer
