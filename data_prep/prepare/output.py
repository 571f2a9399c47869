"""Writing prepared data directories so that they stand on their own.

voxanon writes ``wav.scp`` paths relative to the data directory (see
``voxanon.data_prep.corpus``); sets derived from one directory and written elsewhere
must therefore point at the files with absolute paths. A directory prepared again in
place must not keep files of the earlier run that the new one no longer has (an old
``utt2dur`` after ``--no-durations``, say).
"""
from __future__ import annotations

import os
from pathlib import Path

from voxanon.data_prep.corpus import MODELLED_FILES, DataDir, write_data_dir


def absolute_audio(data: DataDir) -> dict[str, str]:
    """``wav.scp`` of ``data`` with every file entry made absolute; commands are kept as they are."""
    wav: dict[str, str] = {}
    for utt, entry in data.wav.items():
        if data.is_pipe(utt) or os.path.isabs(entry):
            wav[utt] = entry
        else:
            wav[utt] = os.path.abspath(data.audio_path(utt))
    return wav


def write_prepared_dir(data: DataDir, path: str | os.PathLike) -> None:
    """:func:`write_data_dir`, first removing Kaldi files that ``data`` will not rewrite."""
    path = Path(path)
    present = {
        "spk2gender": bool(data.spk2gender), "text": bool(data.text), "utt2dur": bool(data.utt2dur),
        "enrolls": data.enrolls is not None, "trials": data.trials is not None,
    }
    for name in MODELLED_FILES:
        if not present.get(name, True) and (path / name).is_file():
            (path / name).unlink()
    write_data_dir(data, path)
