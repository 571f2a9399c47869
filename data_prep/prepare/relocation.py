"""Making a data directory's audio entries independent of where it lives.

voxanon writes ``wav.scp`` paths relative to the data directory (see
``voxanon.data_prep.corpus``); sets derived from one directory and written elsewhere
must therefore point at the files with absolute paths.
"""
from __future__ import annotations

import os

from voxanon.data_prep.corpus import DataDir


def absolute_audio(data: DataDir) -> dict[str, str]:
    """``wav.scp`` of ``data`` with every file entry made absolute; commands are kept as they are."""
    wav: dict[str, str] = {}
    for utt, entry in data.wav.items():
        if data.is_pipe(utt) or os.path.isabs(entry):
            wav[utt] = entry
        else:
            wav[utt] = os.path.abspath(data.audio_path(utt))
    return wav
