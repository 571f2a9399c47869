"""``voxanon.Corpus``: one corpus set read from, and written to, a Kaldi data directory, a folder of audio files or
lhotse manifests."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from .data_prep.corpus import DataDir, DataDirError, load_corpus, write_data_dir
from .data_prep.lhotse_manifests import data_dir_from_lhotse, data_dir_to_lhotse, read_manifest, write_manifest

__all__ = ["Corpus"]


class Corpus(DataDir):
    """One corpus set: its utterances' audio entries (``wav``: utterance id -> path or ``command |``), speakers
    (``utt2spk``, ``spk2gender``), transcripts (``text``), durations (``utt2dur``) and, for evaluation sets,
    ``enrolls`` and ``trials``. Anything that takes a data set (:func:`voxanon.anonymise`,
    :func:`voxanon.evaluate`) takes a Corpus.

    >>> corpus = voxanon.Corpus.read("data/libri_dev_trials_f")
    >>> corpus.write("copy")                                    # a Kaldi data directory again
    >>> recordings, supervisions = corpus.to_lhotse()           # lhotse manifests (voxanon[lhotse])
    """

    @classmethod
    def read(cls, path: str | os.PathLike, *, allow_pipes: bool = False, speaker_level: int = 1,
             speaker_regex: str | None = None) -> "Corpus":
        """A Kaldi data directory when ``path`` has a ``wav.scp``, else a folder of audio files: the utterance id
        is the file's name without its extension, the speaker the folder ``speaker_level`` levels above it (or the
        group ``spk`` of ``speaker_regex`` matched against the file's path in the folder). ``allow_pipes``:
        accept ``wav.scp`` commands (``command |``), which run when the audio is read."""
        return cls.from_data_dir(load_corpus(path, allow_pipes=allow_pipes, speaker_level=speaker_level,
                                             speaker_regex=speaker_regex))

    @classmethod
    def from_data_dir(cls, data: DataDir) -> "Corpus":
        """The Corpus of a :class:`~voxanon.data_prep.corpus.DataDir` (which shares its tables)."""
        return cls(**{field.name: getattr(data, field.name) for field in dataclasses.fields(DataDir)})

    @classmethod
    def from_lhotse(cls, recordings: Any, supervisions: Any, *, name: str | None = None) -> "Corpus":
        """A corpus of a lhotse ``RecordingSet`` and ``SupervisionSet``, each given as the object or its manifest
        file's path: one utterance per supervision, which must cover its whole recording (what maps to what, and
        what is refused: :mod:`voxanon.data_prep.lhotse_manifests`). ``name``: the set's name (default: the
        supervisions file's name without its suffixes, else ``lhotse``)."""
        if name is None:
            name = (Path(supervisions).name.split(".")[0] if isinstance(supervisions, (str, os.PathLike))
                    else "lhotse")
        if isinstance(recordings, (str, os.PathLike)):
            recordings = read_manifest(recordings, "recordings")
        if isinstance(supervisions, (str, os.PathLike)):
            supervisions = read_manifest(supervisions, "supervisions")
        return cls.from_data_dir(data_dir_from_lhotse(recordings, supervisions, name))

    def check(self, *, check_files: bool = True) -> "Corpus":
        """The corpus itself when its tables agree (and, with ``check_files``, every audio file is there); else one
        :class:`~voxanon.data_prep.corpus.DataDirError` listing every problem."""
        problems = self.validate(check_files=check_files)
        if problems:
            raise DataDirError(str(self.path or self.name), problems)
        return self

    def write(self, path: str | os.PathLike) -> None:
        """The corpus as a Kaldi data directory at ``path``, each file written atomically; ``wav.scp``'s file
        entries are made absolute, so that they still name the audio from there."""
        write_data_dir(dataclasses.replace(self, wav=self.absolute_wav()), path)

    def to_lhotse(self) -> tuple[Any, Any]:
        """``(RecordingSet, SupervisionSet)``: a recording and a whole-recording supervision per utterance, named by
        the utterance id (sampling rates and lengths read from the files' headers)."""
        return data_dir_to_lhotse(self)

    def write_lhotse(self, recordings_path: str | os.PathLike, supervisions_path: str | os.PathLike) -> None:
        """The corpus as lhotse manifest files (``.jsonl`` or ``.jsonl.gz``), each written atomically."""
        recordings, supervisions = self.to_lhotse()
        write_manifest(recordings, recordings_path)
        write_manifest(supervisions, supervisions_path)
