"""Transcript normalisation for prepared corpora.

VoicePrivacy's data download scripts upper-case transcripts and delete ``, ! ? .``.
LibriSpeech transcripts are already in that form and pass through
unchanged. VCTK and LibriTTS text also holds quotes, colons, brackets and dashes; those
separate words, so they become spaces rather than being deleted. Apostrophes stay, as
in LibriSpeech ("DON'T", "SOLDIERS'").
"""
from __future__ import annotations

import re

_DELETED = str.maketrans({",": None, "!": None, "?": None, ".": None, "\u2019": "'", "\u2018": "'"})
_SEPARATORS = re.compile(r"[^\w'\s]|_")


def normalise_transcript(text: str) -> str:
    """Upper-case words without punctuation, single-spaced (VoicePrivacy style)."""
    cleaned = _SEPARATORS.sub(" ", text.translate(_DELETED))
    return " ".join(cleaned.upper().split())
