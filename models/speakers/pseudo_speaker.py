"""B1's pseudo-speaker: a pool of speaker vectors and the selection of a target vector from it.

Selection, as SSL-SAS ``selec_anon/gen_pseudo_xvecs.py`` and VoicePrivacy 2020/2022 B1 do it
(nii-yamagishilab/SSL-SAS ``selec_anon``; VoicePrivacy 2020 B1 ``gen_pseudo_xvecs.py``):

1. keep the pool speakers of the source speaker's sex (``gender="same"``) or of the other
   sex (``"cross"``);
2. score each against the **speaker-level** source vector (the mean of the source speaker's
   utterance vectors, for both selection levels): ``cosine`` affinity is
   ``-scipy.spatial.distance.cosine(source, pool) = cos_sim - 1``; ``plda`` is speechbrain's
   PLDA log-likelihood ratio (trained on the pool's utterance vectors, speakers as classes);
3. sort: ``farthest`` ascending (least similar first), ``nearest`` descending; the first
   ``world`` (200) form the candidate world (ties keep the pool's sorted-id order);
4. draw ``region`` (100) of them without replacement, ``rng.choice(world, region,
   replace=False)``, and return their plain mean (no normalisation).

The pool folder (``voxanon pool build`` / ``import``) holds ``speakers.npy`` + ``.ids``
(speaker-level vectors: arithmetic means of raw utterance vectors), ``spk2gender``,
``global.npy`` (the balanced global average, L2-normalised; Noé 2023 thesis §5.4 "global"), optionally
``utterances.npy`` + ``.ids`` and ``utt2spk`` (kept for PLDA), and ``pool.json``, written
last: a folder without it is incomplete. ``pool.json`` records every file's sha256.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np

from ...data_prep.atomic import atomic_path, atomic_write_text
from ...data_prep.corpus import read_mapping, write_mapping
from ...data_prep.digest import sha256_file
from ...data_prep.errors import VoxanonError
from ...data_prep.vectors import Vectors, l2_normalise, read_vectors, speaker_means, write_vectors
from .balanced_average import balanced_average

AFFINITIES = ("cosine", "plda")
GENDER_MODES = ("same", "cross")
PROXIMITIES = ("farthest", "nearest")
SEXES = ("f", "m")
DEFAULT_WORLD = 200
DEFAULT_REGION = 100
DEFAULT_PLDA_RANK = 100

POOL_MANIFEST = "pool.json"
SPEAKER_VECTORS = "speakers.npy"
UTTERANCE_VECTORS = "utterances.npy"
GLOBAL_VECTOR = "global.npy"
SPK2GENDER = "spk2gender"
UTT2SPK = "utt2spk"
POOL_FORMAT = 1


class PoolError(VoxanonError):
    """A pool that cannot be read, or a selection the pool cannot satisfy."""


@dataclass(frozen=True)
class SpeakerPool:
    """Speaker-level vectors with each speaker's sex; utterance vectors when the source had them."""

    speakers: Vectors
    sex: Mapping[str, str]
    global_vector: np.ndarray
    utterances: Vectors | None = None
    utt2spk: Mapping[str, str] | None = None
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [spk for spk in self.speakers.ids if spk not in self.sex]
        if missing:
            raise PoolError(f"pool: no sex for {len(missing)} speaker(s): {', '.join(missing[:10])}")
        bad = sorted({self.sex[spk] for spk in self.speakers.ids} - set(SEXES))
        if bad:
            raise PoolError(f"pool: sex labels {bad} are not f or m")
        if np.shape(self.global_vector) != (self.speakers.dim,):
            raise PoolError(f"pool: global vector of shape {np.shape(self.global_vector)} for "
                            f"{self.speakers.dim}-d speaker vectors")
        if (self.utterances is None) != (self.utt2spk is None):
            raise PoolError("pool: utterance vectors and utt2spk go together")
        if self.utterances is not None:
            pool_speakers = set(self.speakers.ids)
            unknown = [u for u in self.utterances.ids if self.utt2spk.get(u) not in pool_speakers]
            if unknown:
                raise PoolError(f"pool: {len(unknown)} utterance vector(s) of no pool speaker: {', '.join(unknown[:10])}")

    def speakers_per_sex(self) -> dict[str, int]:
        return {sex: sum(self.sex[spk] == sex for spk in self.speakers.ids) for sex in SEXES}


@dataclass(frozen=True)
class SelectionSettings:
    affinity: str = "cosine"
    gender: str = "same"
    proximity: str = "farthest"
    world: int = DEFAULT_WORLD
    region: int = DEFAULT_REGION
    plda_rank: int = DEFAULT_PLDA_RANK

    def __post_init__(self) -> None:
        for name, value, choices in (("affinity", self.affinity, AFFINITIES), ("gender", self.gender, GENDER_MODES),
                                     ("proximity", self.proximity, PROXIMITIES)):
            if value not in choices:
                raise ValueError(f"pseudo-speaker {name} must be one of {', '.join(choices)}, got {value!r}")
        if int(self.region) < 1 or int(self.world) < int(self.region):
            raise ValueError(f"pseudo-speaker selection needs 1 <= region <= world, got world {self.world}, "
                             f"region {self.region}")
        if int(self.plda_rank) < 1:
            raise ValueError(f"PLDA rank must be positive, got {self.plda_rank}")


@dataclass(frozen=True)
class Selection:
    vector: np.ndarray          # (d,) mean of the chosen pool vectors
    chosen: tuple[str, ...]     # the ``region`` pool speakers averaged, in draw order
    world: tuple[str, ...]      # the ``world`` candidates, in affinity order


def cosine_affinity(source: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """``-cosine_distance(source, row) = cos_sim - 1`` for every row of ``pool`` (range [-2, 0])."""
    source = np.asarray(source, dtype=np.float64)
    pool = np.asarray(pool, dtype=np.float64)
    if source.ndim != 1 or pool.ndim != 2 or pool.shape[1] != source.shape[0]:
        raise ValueError(f"cosine affinity of a ({source.shape}) vector with a {pool.shape} pool")
    norms = np.linalg.norm(pool, axis=1) * np.linalg.norm(source)
    if np.any(norms == 0):
        raise PoolError("cosine affinity is undefined for an all-zero vector")
    return pool @ source / norms - 1.0


class PldaAffinity:
    """speechbrain's PLDA (``speechbrain.processing.PLDA_LDA``) trained on utterance vectors, speakers as classes.

    The score is ``fast_PLDA_scoring`` of the source vector (enrolment side) against each
    pool speaker vector (test side). speechbrain estimates the residual covariance from the
    spread of vectors around their speaker's mean, so one vector per speaker is not enough.
    """

    def __init__(self, vectors: Vectors, utt2spk: Mapping[str, str], rank: int = DEFAULT_PLDA_RANK):
        from speechbrain.processing.PLDA_LDA import PLDA

        speakers = [utt2spk[u] for u in vectors.ids]
        within = len(speakers) - len(set(speakers))
        if len(set(speakers)) < 2 or within < vectors.dim:
            raise PoolError(f"PLDA on {vectors.dim}-d vectors needs at least 2 speakers and {vectors.dim} "
                            "within-speaker degrees of freedom (utterance vectors minus speakers) to estimate its "
                            f"covariances; the pool has {len(speakers)} utterance vectors of {len(set(speakers))} "
                            f"speakers ({within}). Use affinity cosine or a larger pool")
        self.plda = PLDA(rank_f=min(int(rank), vectors.dim))
        try:
            with np.errstate(invalid="ignore", divide="ignore"):
                self.plda.plda(self._stats(np.array(speakers, dtype=object), vectors.matrix))
        except (ValueError, np.linalg.LinAlgError) as error:
            raise PoolError(f"PLDA training failed on the pool's utterance vectors ({error})") from None
        if not (np.all(np.isfinite(self.plda.F)) and np.all(np.isfinite(self.plda.Sigma))):
            raise PoolError("PLDA training gave non-finite parameters (degenerate utterance vectors?); "
                            "use affinity cosine")

    @staticmethod
    def _stats(models: np.ndarray, matrix: np.ndarray):
        from speechbrain.processing.PLDA_LDA import StatObject_SB

        n = len(matrix)
        segments = np.array([f"seg{i}" for i in range(n)], dtype=object)
        none = np.array([None] * n)
        return StatObject_SB(modelset=models, segset=segments, start=none, stop=none,
                             stat0=np.ones((n, 1)), stat1=np.asarray(matrix, dtype=np.float64).copy())

    def __call__(self, source: np.ndarray, pool: np.ndarray) -> np.ndarray:
        from speechbrain.processing.PLDA_LDA import Ndx, fast_PLDA_scoring

        enrol = self._stats(np.array(["source"], dtype=object), np.asarray(source, dtype=np.float64)[None])
        test = self._stats(np.array([f"pool{i}" for i in range(len(pool))], dtype=object), pool)
        trials = Ndx(models=enrol.modelset, testsegs=test.modelset)
        # check_missing=False keeps scoremat in the order of the stat1 rows (the Ndx is sorted).
        scores = fast_PLDA_scoring(enrol, test, trials, self.plda.mean, self.plda.F, self.plda.Sigma,
                                   check_missing=False)
        return np.asarray(scores.scoremat[0], dtype=np.float64)


class PseudoSpeakerSelector:
    """Chooses pseudo-speaker vectors from a pool with fixed settings; affinity models are built once."""

    def __init__(self, pool: SpeakerPool, settings: SelectionSettings = SelectionSettings()):
        self.pool = pool
        self.settings = settings
        self._by_sex = {sex: [row for row, spk in enumerate(pool.speakers.ids) if pool.sex[spk] == sex]
                        for sex in SEXES}
        self._plda: PldaAffinity | None = None
        if settings.affinity == "plda":
            if pool.utterances is None:
                raise PoolError("PLDA affinity needs the pool's utterance vectors (several per speaker) to "
                                "train on, and this pool holds speaker-level vectors only (e.g. an import of "
                                "speaker means). Build the pool with voxanon pool build, import utterance "
                                "vectors with their utt2spk, or use affinity cosine")
            self._plda = PldaAffinity(pool.utterances, pool.utt2spk, settings.plda_rank)

    def target_sex(self, source_sex: str) -> str:
        sex = str(source_sex).lower()
        if sex not in SEXES:
            raise PoolError(f"source sex must be f or m for gender filtering, got {source_sex!r}")
        return sex if self.settings.gender == "same" else SEXES[1 - SEXES.index(sex)]

    def world(self, source_vector: np.ndarray, source_sex: str) -> tuple[str, ...]:
        """The ``world`` candidate pool speakers for a source speaker, in affinity order."""
        sex = self.target_sex(source_sex)
        rows = self._by_sex[sex]
        if len(rows) < self.settings.world:
            raise PoolError(f"the pool has {len(rows)} speaker(s) of sex {sex!r} but the selection needs a world "
                            f"of {self.settings.world} (region {self.settings.region}); lower world/region "
                            "(e.g. --set pseudo_speaker.world=N) or use a larger pool")
        candidates = self.pool.speakers.matrix[rows]
        source = np.asarray(source_vector, dtype=np.float64)
        if source.shape != (self.pool.speakers.dim,):
            raise PoolError(f"source vector of shape {source.shape} for a pool of {self.pool.speakers.dim}-d vectors")
        affinity = self._plda(source, candidates) if self._plda is not None else cosine_affinity(source, candidates)
        order = np.argsort(affinity if self.settings.proximity == "farthest" else -affinity, kind="stable")
        return tuple(self.pool.speakers.ids[rows[i]] for i in order[:self.settings.world])

    def select(self, source_vector: np.ndarray, source_sex: str, rng: np.random.Generator,
               world: tuple[str, ...] | None = None) -> Selection:
        """A pseudo vector: the mean of ``region`` candidates drawn from the world with ``rng``.

        ``world`` may be passed when already computed for this source speaker (it depends on
        the speaker only, not on the draw).
        """
        world = world if world is not None else self.world(source_vector, source_sex)
        picks = rng.choice(len(world), self.settings.region, replace=False)
        chosen = tuple(world[i] for i in picks)
        vectors = self.pool.speakers.select(chosen, what="pool")
        return Selection(vectors.matrix.mean(axis=0), chosen, world)


def pool_from_utterances(utterances: Vectors, utt2spk: Mapping[str, str], sex: Mapping[str, str],
                         *, keep_utterances: bool = True) -> SpeakerPool:
    """A pool from utterance vectors: speaker means of the raw vectors (SSL-SAS ``speaker_xvector.py``)
    and the global vector, the balanced average (utterance -> speaker -> sex -> mean of the sexes) of
    the L2-normalised utterance vectors, L2-normalised (Noé 2023 thesis §5.4 "global")."""
    speakers = speaker_means(utterances, utt2spk)
    _check_sexes(speakers.ids, sex)
    neutral = balanced_average(l2_normalise(utterances.matrix), [utt2spk[u] for u in utterances.ids], sex).neutral
    return SpeakerPool(speakers, {spk: sex[spk].lower() for spk in speakers.ids}, l2_normalise(neutral[None])[0],
                       utterances if keep_utterances else None,
                       {u: utt2spk[u] for u in utterances.ids} if keep_utterances else None)


def pool_from_speakers(speakers: Vectors, sex: Mapping[str, str]) -> SpeakerPool:
    """A pool from speaker-level vectors only (e.g. imported speaker means): the global vector is then
    the balanced average of the L2-normalised speaker vectors (each speaker counts as one utterance)."""
    _check_sexes(speakers.ids, sex)
    neutral = balanced_average(l2_normalise(speakers.matrix), list(speakers.ids), sex).neutral
    return SpeakerPool(speakers, {spk: sex[spk].lower() for spk in speakers.ids}, l2_normalise(neutral[None])[0])


def _check_sexes(speakers, sex: Mapping[str, str]) -> None:
    missing = [spk for spk in speakers if spk not in sex]
    if missing:
        raise PoolError(f"spk2gender: no sex for {len(missing)} pool speaker(s): {', '.join(missing[:10])}"
                        + (" ..." if len(missing) > 10 else ""))
    bad = sorted(spk for spk in speakers if str(sex[spk]).lower() not in SEXES)
    if bad:
        raise PoolError(f"spk2gender: speaker(s) {', '.join(bad[:10])} have labels other than f or m")


def save_pool(directory: str | os.PathLike, pool: SpeakerPool, metadata: dict) -> Path:
    """Write a pool folder; ``pool.json`` (``metadata`` + counts + file checksums) goes last."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / POOL_MANIFEST
    if manifest.exists():
        manifest.unlink()
    write_vectors(directory / SPEAKER_VECTORS, pool.speakers)
    write_mapping(directory / SPK2GENDER, {spk: pool.sex[spk] for spk in pool.speakers.ids})
    with atomic_path(directory / GLOBAL_VECTOR) as tmp, open(tmp, "wb") as handle:
        np.save(handle, np.asarray(pool.global_vector, dtype=np.float32))
    files = [SPEAKER_VECTORS, Path(SPEAKER_VECTORS).with_suffix(".ids").name, SPK2GENDER, GLOBAL_VECTOR]
    for name in (UTTERANCE_VECTORS, Path(UTTERANCE_VECTORS).with_suffix(".ids").name, UTT2SPK):
        stale = directory / name
        if stale.exists():
            stale.unlink()
    if pool.utterances is not None:
        write_vectors(directory / UTTERANCE_VECTORS, pool.utterances)
        write_mapping(directory / UTT2SPK, {u: pool.utt2spk[u] for u in pool.utterances.ids})
        files += [UTTERANCE_VECTORS, Path(UTTERANCE_VECTORS).with_suffix(".ids").name, UTT2SPK]
    record = {
        "format": POOL_FORMAT, **metadata,
        "speakers": len(pool.speakers), "speakers_per_sex": pool.speakers_per_sex(),
        "utterances": None if pool.utterances is None else len(pool.utterances), "dim": pool.speakers.dim,
        "files": {name: sha256_file(directory / name) for name in files},
    }
    atomic_write_text(manifest, json.dumps(record, indent=2) + "\n")
    return directory


def load_pool(directory: str | os.PathLike, *, with_utterances: bool = True, verify: bool = True) -> SpeakerPool:
    """A complete pool folder (its ``pool.json`` present), files checked against their sha256 sums.

    ``with_utterances=False`` skips the utterance vectors (only PLDA training reads them).
    """
    directory = Path(directory)
    manifest = directory / POOL_MANIFEST
    if not manifest.is_file():
        raise PoolError(f"{directory}: not a complete pool ({POOL_MANIFEST} missing); build one with "
                        "voxanon pool build --data DIR --out NAME, or voxanon pool import")
    try:
        metadata = json.loads(manifest.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise PoolError(f"{manifest}: not JSON ({error})") from None
    files = dict(metadata.get("files", {}))
    keep_utterances = with_utterances and UTTERANCE_VECTORS in files
    if not keep_utterances:
        for name in (UTTERANCE_VECTORS, Path(UTTERANCE_VECTORS).with_suffix(".ids").name, UTT2SPK):
            files.pop(name, None)
    for name, digest in files.items():
        path = directory / name
        if not path.is_file():
            raise PoolError(f"pool {directory}: {name} is missing; rebuild the pool")
        if verify and sha256_file(path) != digest:
            raise PoolError(f"pool {directory}: {name} does not match its checksum in {POOL_MANIFEST}; "
                            "rebuild the pool")
    utterances = utt2spk = None
    if keep_utterances:
        utterances = read_vectors(directory / UTTERANCE_VECTORS)
        utt2spk = read_mapping(directory / UTT2SPK, key_kind="utterance", value_kind="speaker")
    return SpeakerPool(speakers=read_vectors(directory / SPEAKER_VECTORS), sex=read_mapping(directory / SPK2GENDER),
                       global_vector=np.load(directory / GLOBAL_VECTOR).astype(np.float64),
                       utterances=utterances, utt2spk=utt2spk, metadata=metadata)
