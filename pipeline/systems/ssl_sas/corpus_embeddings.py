"""ECAPA vectors of every utterance of a data directory, with a model set's speaker encoder.

The front end is the reference's (nii-yamagishilab/SSL-SAS ``selec_anon/extract_emb.py``): audio
resampled to 16 kHz, 80 Fbanks, sentence mean normalisation, the raw 192-d ECAPA output (no
L2) — all inside :class:`voxanon.models.nets.speaker.EcapaEncoder`. No peak normalisation: the
reference embeds the file as read.

Vectors are cached per audio content (:mod:`voxanon.pipeline.feature_cache`) under a tag
naming the encoder's weights (sha256 of the set's ``speaker.safetensors``), so an interrupted
run resumes where it stopped and two model sets never share vectors. Unusable audio is
reported per file, never dropped silently.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ....data_prep.corpus import DataDir, merge_labelled_sets, read_data_dir
from ....data_prep.errors import VoxanonError
from ....data_prep.vectors import Vectors
from ....models.checkpoints.registry import default_cache_dir
from ...feature_cache import CachedComputation, ContentCache

log = logging.getLogger(__name__)

SPEAKER_COMPONENT_FILE = "speaker.safetensors"


def cache_from_option(option: Path | None) -> ContentCache:
    """The embedding cache a ``--cache`` option names: a folder, 'none' (no cache) or the default."""
    if option is not None and str(option).lower() == "none":
        return ContentCache(None)
    return ContentCache(Path(option) if option is not None else default_cache_dir())


@dataclass
class CorpusEmbeddings:
    """Utterance vectors of one or more data directories, and the files that could not be embedded."""

    vectors: Vectors
    utt2spk: dict[str, str]
    encoder_tag: str                                         # names the encoder weights (cache tag)
    random_models: bool                                      # the model set has random weights
    failures: dict[str, str] = field(default_factory=dict)   # utterance -> message
    computed: int = 0                                        # vectors computed (not served from the cache)


def read_labelled_data_dirs(paths: list[Path]) -> tuple[list[DataDir], dict[str, str]]:
    """Kaldi data directories whose every speaker has a sex in ``spk2gender``, and the merged
    speaker -> sex map (a speaker in several sets must have the same sex in each)."""
    data_dirs = [read_data_dir(path) for path in paths]
    return data_dirs, merge_labelled_sets(data_dirs)[1]


def model_set_encoder(models: str, device: str = "cpu") -> tuple[str, bool, CachedComputation]:
    """``(cache tag, set is random, computation)`` for the speaker encoder of an installed model set, run on
    ``device`` (off the CPU as padded batches, :meth:`~voxanon.models.nets.speaker.EcapaEncoder.embed_on_device`:
    the same vectors to float rounding, so both share the cache).

    The encoder itself is loaded only when a vector is missing from the cache.
    """
    from ....models.checkpoints.registry import load_model_set

    model_set = load_model_set(models)
    digest = model_set.manifest["files"].get(SPEAKER_COMPONENT_FILE)
    if digest is None:
        raise VoxanonError(f"model set {models!r} has no speaker encoder ({SPEAKER_COMPONENT_FILE})")
    tag = f"ecapa-set-{digest[:16]}"

    def embed(waves: list[np.ndarray]) -> list[np.ndarray]:
        from ...model_service import check_device_available, resolve_device
        from .loader import load_model

        where = resolve_device(device)
        if where == "cpu":
            return list(load_model(models, "speaker").embed(waves))
        from ....models.nets.precision import float32_products

        check_device_available(where)
        with float32_products(False):
            return list(load_model(models, "speaker", device=where).embed_on_device(waves))

    return tag, model_set.random, CachedComputation(tag, embed, kind="vector")


def embed_data_dirs(data_dirs: list[DataDir], models: str = "ssl-sas", cache: ContentCache | None = None, *,
                    allow_failures: bool = False, backend=None, batch_size: int | None = None,
                    progress: bool = True, device: str = "cpu") -> CorpusEmbeddings:
    """ECAPA vectors of every utterance of ``data_dirs`` (utterance ids must be unique across them).

    Utterances whose audio cannot be used are listed in the result's ``failures``; unless
    ``allow_failures``, any of them is an error naming the files. The progress bar (stderr) shows
    unless ``progress`` is false (``--quiet``). ``backend`` (a :class:`voxanon.pipeline.execution.ray.RayBackend`;
    None: this process) runs the encoder's batches of ``batch_size`` utterances, on ``device`` (in this process).
    """
    cache = cache if cache is not None else ContentCache(default_cache_dir())
    tag, random_models, computation = model_set_encoder(models, device)
    computation.backend = backend
    computation.progress = progress
    if batch_size is not None:
        computation.batch_size = batch_size
    utt2spk: dict[str, str] = {}
    origin: dict[str, str] = {}
    failures: dict[str, str] = {}
    found: dict[str, np.ndarray] = {}
    for data in data_dirs:
        clashes = sorted(set(data.wav) & set(origin))
        if clashes:
            raise VoxanonError(f"utterance id(s) {', '.join(clashes[:5])} occur in both {origin[clashes[0]]} and "
                               f"{data.path or data.name}; utterance ids must be unique across data sets")
        origin.update({utt: str(data.path or data.name) for utt in data.wav})
        utt2spk.update({utt: data.utt2spk[utt] for utt in data.wav if utt in data.utt2spk})
        files = {}
        for utt in data.utterances:
            if data.is_pipe(utt):
                failures[utt] = f"wav.scp entry {data.wav[utt]!r} is a command; only audio files can be embedded"
            else:
                files[utt] = data.audio_path(utt)
        results = computation.run(files, cache, f"ECAPA {data.name}")
        found.update({utt: np.asarray(vector, dtype=np.float64) for utt, vector in results.items()})
        failures.update(computation.take_failures(""))
    if failures and not allow_failures:
        shown = "\n  ".join(f"{utt} ({origin.get(utt, '?')}): {message}" for utt, message in list(failures.items())[:10])
        raise VoxanonError(f"{len(failures)} utterance(s) could not be embedded:\n  {shown}"
                           + (f"\n  ... and {len(failures) - 10} more" if len(failures) > 10 else ""))
    for utt, message in failures.items():
        log.warning("not embedded: %s: %s", utt, message)
    if not found:
        raise VoxanonError("no utterance could be embedded")
    ids = sorted(found)
    return CorpusEmbeddings(Vectors(tuple(ids), np.stack([found[u] for u in ids])),
                            {u: utt2spk[u] for u in ids}, tag, random_models, failures,
                            computation.computed)
