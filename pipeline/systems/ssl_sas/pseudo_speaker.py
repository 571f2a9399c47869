"""Speaker-vector transforms: B1's pool pseudo-speaker and the global average vector.

``pseudo_speaker`` replaces ``features["speaker"]`` by a vector chosen from a pool
(:mod:`voxanon.models.speakers.pseudo_speaker`; SSL-SAS ``selec_anon``, VoicePrivacy 2020 B1). Affinities are computed
from the source **speaker's** vector, the mean of its utterances' ECAPA vectors in the set
being anonymised: :meth:`PseudoSpeakerStage.prepare_set` embeds the set once (cached per
audio content) and hands the workers a file of speaker means. The draw of ``region`` out of
``world`` candidates uses ``utt.rng("speaker")`` (one pseudo-speaker per source speaker) or
``utt.rng("utterance")`` (a new one per utterance). The chosen vector is kept as
``<out>/pseudo_xvectors/<utt>.xvector`` and the chosen pool speakers in the run journal.

``global_speaker`` gives every utterance the pool's global vector (the balanced average of
L2-normalised utterance vectors, the "global" baseline of Noé 2023 thesis §5.4).

Pools load lazily, once per process.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import numpy as np

from ....data_prep.errors import VoxanonError
from ....data_prep.paths import contained_path
from ..stage import SEED_LEVELS, Stage, Utterance

log = logging.getLogger(__name__)

PSEUDO_VECTORS = "pseudo_xvectors"
DEFAULT_POOL = "libritts-other-500"

_pools: dict[tuple[str, str, bool], Any] = {}
_selectors: dict[tuple, Any] = {}
_sources: dict[str, Any] = {}


def _pool_key(name: str, with_utterances: bool) -> tuple[str, str, bool]:
    """The pool's folder and the digest of its manifest: a rebuilt pool is loaded afresh."""
    from ....models.speakers.pseudo_speaker import POOL_MANIFEST, load_pool
    from ....models.checkpoints.registry import asset_dir

    directory = asset_dir("pools", name).resolve()
    manifest = directory / POOL_MANIFEST
    if not manifest.is_file():
        load_pool(directory)  # raises the error that names the install command
    return str(directory), hashlib.sha256(manifest.read_bytes()).hexdigest(), with_utterances


def _pool(name: str, with_utterances: bool = False):
    from ....models.speakers.pseudo_speaker import load_pool

    key = _pool_key(name, with_utterances)
    if key not in _pools:
        _pools[key] = load_pool(key[0], with_utterances=with_utterances)
    return _pools[key]


def _source_vectors(path: str) -> dict[str, np.ndarray]:
    from ....data_prep.vectors import read_vectors

    if path not in _sources:
        vectors = read_vectors(path)
        _sources[path] = dict(zip(vectors.ids, vectors.matrix))
    return _sources[path]


class PseudoSpeakerStage(Stage):
    """B1: a pseudo-speaker vector from a pool, far from (or near to) the source speaker."""

    name = "pseudo_speaker"

    def __init__(self, pool: str = DEFAULT_POOL, models: str = "ssl-sas", affinity: str = "cosine",
                 gender: str = "same", proximity: str = "farthest", world: int = 200, region: int = 100,
                 level: str = "speaker", plda_rank: int = 100, cache_dir: str | None = None,
                 source_vectors: str | None = None, pool_manifest_sha256: str | None = None, device: str = "cpu"):
        from ....models.speakers.pseudo_speaker import SelectionSettings
        from ...model_service import check_device_name

        if level not in SEED_LEVELS:
            raise ValueError(f"pseudo_speaker.level must be one of {', '.join(SEED_LEVELS)}, got {level!r}")
        self.settings = SelectionSettings(affinity=affinity, gender=gender, proximity=proximity, world=int(world),
                                          region=int(region), plda_rank=int(plda_rank))
        self.pool = str(pool)
        self.models = models
        self.level = level
        self.cache_dir = cache_dir
        self.source_vectors = source_vectors
        self.pool_manifest_sha256 = pool_manifest_sha256
        # Where the set's ECAPA embedding (prepare_set, in the run's own process, before the clock's first
        # utterance) runs; the selection itself is a few vector operations per utterance.
        self.device = check_device_name(device, "pseudo_speaker.device")
        self._worlds: dict[str, tuple[str, ...]] = {}
        self._loaded_selector = None

    def needs(self) -> list[str]:
        return [f"checkpoint:{self.models}", f"pool:{self.pool}", "spk2gender"]

    def prepare_set(self, data, work_dir, progress: bool = True) -> dict[str, Any]:
        """Embed the set (cached), check the pool can serve every source speaker, and write the
        speaker means under ``work_dir``, named by their digest."""
        from ....data_prep.vectors import speaker_means, write_vectors
        from .corpus_embeddings import cache_from_option, embed_data_dirs

        cache = cache_from_option(self.cache_dir)
        # Files that cannot be embedded are logged here and fail again, by name, when the runner loads them.
        embeddings = embed_data_dirs([data], self.models, cache, allow_failures=True, progress=progress,
                                     device=self.device)
        means = speaker_means(embeddings.vectors, embeddings.utt2spk)
        # Settings the pool cannot satisfy (too few speakers of a sex, PLDA without utterance
        # vectors) fail here, once, rather than on every utterance.
        selector = self._selector()
        pool_encoder = selector.pool.metadata.get("encoder")
        if pool_encoder is not None and pool_encoder != embeddings.encoder_tag:
            log.warning("pool %r was built with another speaker encoder (%s) than model set %r's (%s): "
                        "affinities compare vectors of different spaces", self.pool, pool_encoder, self.models,
                        embeddings.encoder_tag)
        for spk, vector in zip(means.ids, means.matrix):
            if spk in data.spk2gender:
                selector.world(vector, data.spk2gender[spk])
        digest = hashlib.sha256("\n".join(means.ids).encode() + means.matrix.astype("<f4").tobytes()).hexdigest()
        path = contained_path(Path(work_dir).resolve(), f"source-speakers-{self.models}-{digest[:16]}.npy")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_vectors(path, means)
        # The pool's digest enters the configuration hash: outputs made with another pool are redone.
        return {"source_vectors": str(path), "pool_manifest_sha256": _pool_key(self.pool, False)[1]}

    def _selector(self):
        """The pool's selector, looked up once per stage (the pool is read and checked once per process)."""
        from ....models.speakers.pseudo_speaker import PseudoSpeakerSelector

        if self._loaded_selector is None:
            with_utterances = self.settings.affinity == "plda"
            pool_key = _pool_key(self.pool, with_utterances)
            if self.pool_manifest_sha256 not in (None, pool_key[1]):
                raise VoxanonError(f"pool {self.pool!r} changed since the run started (its pool.json differs); "
                                   "rerun to redo the set with the new pool")
            key = (pool_key, self.settings)
            if key not in _selectors:
                _selectors[key] = PseudoSpeakerSelector(_pool(self.pool, with_utterances), self.settings)
            self._loaded_selector = _selectors[key]
        return self._loaded_selector

    def load_models(self) -> None:
        # The pool is read and checked before any utterance: a broken or changed pool is the run's fault.
        self._selector()

    def process(self, utt: Utterance) -> None:
        if self.source_vectors is None:
            raise VoxanonError("pseudo_speaker needs the source speakers' vectors, which the runner computes "
                               "before the run (Stage.prepare_set); run the system with voxanon anonymise")
        if utt.gender is None:
            raise VoxanonError(f"{utt.utt_id}: speaker {utt.speaker!r} has no sex in spk2gender; pseudo_speaker "
                               f"filters the pool by sex (gender={self.settings.gender})")
        sources = _source_vectors(self.source_vectors)
        if utt.speaker not in sources:
            raise VoxanonError(f"{utt.utt_id}: no source vector for speaker {utt.speaker!r}: none of their "
                               "utterances could be embedded (see the warnings before the run)")
        selector = self._selector()
        if utt.speaker not in self._worlds:
            self._worlds[utt.speaker] = selector.world(sources[utt.speaker], utt.gender)
        selection = selector.select(sources[utt.speaker], utt.gender, utt.rng(self.level), self._worlds[utt.speaker])
        vector = selection.vector.astype(np.float32)
        utt.features["speaker"] = vector
        utt.vectors[PSEUDO_VECTORS] = vector
        utt.record["pseudo_speaker"] = {"pool": self.pool, "level": self.level,
                                        "target_sex": selector.target_sex(utt.gender),
                                        "chosen": sorted(selection.chosen)}


class GlobalSpeakerStage(Stage):
    """The pool's global (balanced average, L2-normalised) vector for every utterance: every voice the same."""

    name = "global_speaker"

    def __init__(self, pool: str = DEFAULT_POOL, pool_manifest_sha256: str | None = None):
        self.pool = str(pool)
        self.pool_manifest_sha256 = pool_manifest_sha256
        self._vector = None

    def needs(self) -> list[str]:
        return [f"pool:{self.pool}"]

    def prepare_set(self, data, work_dir, progress: bool = True) -> dict[str, Any]:
        # The pool's digest enters the configuration hash: outputs made with another pool are redone.
        return {"pool_manifest_sha256": _pool_key(self.pool, False)[1]}

    def load_models(self) -> None:
        # Read and checked before any utterance: a broken or changed pool is the run's fault, not each one's.
        self._global_vector()

    def _global_vector(self) -> np.ndarray:
        if self._vector is None:
            if self.pool_manifest_sha256 not in (None, _pool_key(self.pool, False)[1]):
                raise VoxanonError(f"pool {self.pool!r} changed since the run started (its pool.json differs); "
                                   "rerun to redo the set with the new pool")
            self._vector = _pool(self.pool).global_vector.astype(np.float32)
        return self._vector

    def process(self, utt: Utterance) -> None:
        utt.features["speaker"] = self._global_vector()
        utt.record["global_speaker"] = {"pool": self.pool}
