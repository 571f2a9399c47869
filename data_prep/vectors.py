"""Embedding vectors (x-vectors, ECAPA embeddings): read, write, average by speaker.

Three on-disk forms, chosen by the file suffix:

- ``.ark``  a Kaldi archive of vectors, binary (``\\0B``) or text (``key [ v1 v2 ... ]``);
- ``.scp``  a Kaldi script file ``<key> <ark>:<offset>``; ark paths are resolved against the
  current directory (Kaldi's convention) and, when nothing is there, against the scp's folder;
- ``.npy``  an ``(n, d)`` array, with the ids one a line in the ``.ids`` file beside it.

Keys are utterance ids for utterance-level vectors and speaker ids for speaker-level ones;
ids that cannot be file names (:mod:`voxanon.data_prep.paths`) are refused, naming the line or entry.
Values are stored as float32 (Kaldi's ``BFV``) and handled as float64 in memory.
"""
from __future__ import annotations

import io
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import kaldiio
import numpy as np

from .atomic import atomic_path, atomic_write_bytes, atomic_write_text
from .errors import VoxanonError
from .paths import id_message, id_problem

VECTOR_SUFFIXES = (".ark", ".scp", ".npy")


class VectorFileError(VoxanonError):
    """A vector file that cannot be read, or vectors that do not fit together."""


@dataclass(frozen=True)
class Vectors:
    """Row ``i`` of ``matrix`` is the vector of ``ids[i]``; ids are unique."""

    ids: tuple[str, ...]
    matrix: np.ndarray

    def __post_init__(self) -> None:
        matrix = np.asarray(self.matrix, dtype=np.float64)
        if matrix.ndim != 2:
            raise VectorFileError(f"vectors must form an (n, d) matrix, got shape {matrix.shape}")
        if matrix.shape[0] != len(self.ids):
            raise VectorFileError(f"{len(self.ids)} ids for {matrix.shape[0]} vectors")
        repeated = sorted(key for key, count in Counter(self.ids).items() if count > 1)
        if repeated:
            raise VectorFileError(f"duplicate vector ids: {', '.join(repeated[:10])}")
        object.__setattr__(self, "ids", tuple(self.ids))
        object.__setattr__(self, "matrix", matrix)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return self.matrix.shape[1]

    def select(self, ids: Iterable[str], *, what: str = "vectors") -> "Vectors":
        """The vectors of ``ids``, in that order; every id must be present."""
        wanted = list(ids)
        position = {key: row for row, key in enumerate(self.ids)}
        missing = [key for key in wanted if key not in position]
        if missing:
            raise VectorFileError(f"{what}: no vector for {len(missing)} id(s): {', '.join(missing[:10])}"
                                  + (" ..." if len(missing) > 10 else ""))
        return Vectors(tuple(wanted), self.matrix[[position[key] for key in wanted]])

    def with_matrix(self, matrix: np.ndarray) -> "Vectors":
        """The same ids with new values (e.g. after a transform)."""
        return Vectors(self.ids, matrix)


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit Euclidean norm; an all-zero row is an error (it has no direction)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    if np.any(norms == 0):
        raise VectorFileError(f"{int(np.sum(norms == 0))} all-zero vector(s) cannot be L2-normalised")
    return matrix / norms


def speaker_means(vectors: Vectors, utt2spk: Mapping[str, str]) -> Vectors:
    """Speaker-level vectors: the mean of each speaker's utterance vectors (Kaldi ``spk_xvector``).

    Speakers are sorted; every utterance must have a speaker.
    """
    unknown = [utt for utt in vectors.ids if utt not in utt2spk]
    if unknown:
        raise VectorFileError(f"utt2spk: no speaker for {len(unknown)} utterance(s): {', '.join(unknown[:10])}")
    rows: dict[str, list[int]] = defaultdict(list)
    for row, utt in enumerate(vectors.ids):
        rows[utt2spk[utt]].append(row)
    speakers = sorted(rows)
    return Vectors(tuple(speakers), np.stack([vectors.matrix[rows[spk]].mean(axis=0) for spk in speakers]))


def read_vectors(path: str | os.PathLike) -> Vectors:
    """Read vectors from ``.ark`` (binary or text), ``.scp`` or ``.npy`` + ``.ids``."""
    path = Path(path)
    if not path.is_file():
        raise VectorFileError(f"{path}: no such vector file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return _read_npy(path)
    if suffix == ".ark":
        try:
            items = list(kaldiio.load_ark(str(path)))
        except Exception as error:  # kaldiio raises bare ValueError/IOError on corrupt archives
            raise VectorFileError(f"{path}: not a readable Kaldi archive ({error})") from error
        for number, (key, _) in enumerate(items, 1):
            _check_id(f"{path}: entry {number}", key)
    elif suffix == ".scp":
        items = _read_scp(path)
    else:
        raise VectorFileError(f"{path}: unknown vector file type; expected one of {', '.join(VECTOR_SUFFIXES)}")
    return _from_items(path, items)


def write_vectors(path: str | os.PathLike, vectors: Vectors, *, text: bool = False) -> None:
    """Write vectors atomically in the form the suffix names.

    ``.scp`` also writes the archive ``<same stem>.ark`` beside it (binary unless ``text``);
    ``.npy`` also writes ``<same stem>.ids``.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    values = {key: row.astype(np.float32) for key, row in zip(vectors.ids, vectors.matrix)}
    if suffix == ".npy":
        with atomic_path(path) as tmp, open(tmp, "wb") as handle:
            np.save(handle, vectors.matrix.astype(np.float32))
        atomic_write_text(path.with_suffix(".ids"), "".join(f"{key}\n" for key in vectors.ids))
    elif suffix == ".ark":
        atomic_write_bytes(path, _ark_bytes(values, str(path), text)[0])
    elif suffix == ".scp":
        ark = path.with_suffix(".ark")
        data, scp = _ark_bytes(values, str(ark), text)
        atomic_write_bytes(ark, data)
        atomic_write_text(path, scp)
    else:
        raise VectorFileError(f"{path}: unknown vector file type; expected one of {', '.join(VECTOR_SUFFIXES)}")


class _NamedBuffer(io.BytesIO):
    """An in-memory archive that kaldiio names, in the scp lines, after the final file."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name


def _ark_bytes(values: dict[str, np.ndarray], ark_name: str, text: bool) -> tuple[bytes, str]:
    for key in values:
        if not key or re.search(r"\s", key):
            raise VectorFileError(f"vector id {key!r} is empty or contains white space; Kaldi cannot store it")
    archive = _NamedBuffer(ark_name)
    scp = io.StringIO()
    kaldiio.save_ark(archive, values, scp=scp, text=text)
    return archive.getvalue(), scp.getvalue()


def _read_npy(path: Path) -> Vectors:
    ids_path = path.with_suffix(".ids")
    if not ids_path.is_file():
        raise VectorFileError(f"{path}: the id list {ids_path.name} is missing beside it")
    try:
        matrix = np.load(path, allow_pickle=False)
    except ValueError as error:
        raise VectorFileError(f"{path}: not a numeric .npy array ({error})") from error
    ids = []
    for number, line in enumerate(ids_path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            ids.append(_check_id(f"{ids_path}:{number}", line.split()[0]))
    if matrix.ndim != 2 or matrix.shape[0] != len(ids):
        raise VectorFileError(f"{path}: array of shape {matrix.shape} does not match "
                              f"{len(ids)} ids in {ids_path.name} (expected ({len(ids)}, d))")
    return _checked(path, tuple(ids), matrix)


def _read_scp(path: Path) -> list[tuple[str, np.ndarray]]:
    items = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2:
            raise VectorFileError(f"{path}:{number}: expected '<id> <ark>:<offset>', got {line!r}")
        key, spec = _check_id(f"{path}:{number}", parts[0]), parts[1].strip()
        if spec.endswith("|"):
            raise VectorFileError(f"{path}:{number}: entry {key!r} is a command; only archive "
                                  "offsets (ark:offset) are read")
        match = re.fullmatch(r"(.+?)(:\d+)?", spec)
        ark = Path(match.group(1))
        if not ark.is_absolute() and not ark.exists() and (path.parent / ark).exists():
            ark = path.parent / ark
        if not ark.exists():
            raise VectorFileError(f"{path}:{number}: archive {match.group(1)!r} of entry {key!r} not found")
        try:
            items.append((key, kaldiio.load_mat(f"{ark}{match.group(2) or ''}")))
        except Exception as error:  # kaldiio raises bare ValueError/IOError on bad offsets
            raise VectorFileError(f"{path}:{number}: cannot read entry {key!r} ({error})") from error
    return items


def _check_id(where: str, key: str) -> str:
    problem = id_problem(key)
    if problem is not None:
        raise VectorFileError(f"{where}: {id_message('vector', key, problem)}")
    return key


def _from_items(path: Path, items: Sequence[tuple[str, np.ndarray]]) -> Vectors:
    if not items:
        raise VectorFileError(f"{path}: no vectors")
    rows = []
    for key, value in items:
        value = np.asarray(value)
        if value.ndim == 2 and value.shape[0] == 1:
            value = value[0]
        if value.ndim != 1:
            raise VectorFileError(f"{path}: entry {key!r} is a matrix of shape {value.shape}, not a vector")
        rows.append(value)
    dims = {row.shape[0] for row in rows}
    if len(dims) != 1:
        raise VectorFileError(f"{path}: vectors of different sizes {sorted(dims)}")
    return _checked(path, tuple(key for key, _ in items), np.stack(rows))


def _checked(path: Path, ids: tuple[str, ...], matrix: np.ndarray) -> Vectors:
    try:
        vectors = Vectors(ids, matrix)
    except VectorFileError as error:
        raise VectorFileError(f"{path}: {error}") from error
    bad = [key for key, row in zip(vectors.ids, vectors.matrix) if not np.all(np.isfinite(row))]
    if bad:
        raise VectorFileError(f"{path}: non-finite values in {len(bad)} vector(s): {', '.join(bad[:10])}")
    return vectors
