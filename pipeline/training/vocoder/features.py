"""The vocoder's training features: computed once per utterance by the anonymisation chain's own stages, cached on
disk, read back memory-mapped (see :mod:`voxanon.pipeline.training.vocoder.run`)."""
from __future__ import annotations

import hashlib
import json
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Iterable

import numpy as np

from ....data_prep.audio import load_audio
from ....data_prep.corpus import DataDir
from ....data_prep.digest import sha256_file
from ....data_prep.errors import VoxanonError
from ....models.f0.params import DEFAULT_BACKEND
from ...feature_cache import ContentCache
from ...systems.f0 import F0Stage
from ...systems.ssl_sas.chain import SSL_SAS_MULTIPLE, ContentStage, SpeakerStage, SslSasInputStage
from ...systems.stage import Utterance
from .settings import SAMPLE_RATE

FEATURE_KINDS = ("audio", "f0", "content", "speaker")


@dataclass(frozen=True)
class UtteranceFeatures:
    """One usable utterance: where its cached features are and how many content frames it has."""

    key: str
    paths: dict[str, Path]
    content_frames: int


@dataclass
class FeatureSet:
    utterances: list[UtteranceFeatures]
    skipped: dict[str, str]
    computed: int  # utterances for which something was computed rather than found in the cache

    @property
    def digest(self) -> str:
        """Identity of the training data: keys and feature files, in order (a resumed run must match it)."""
        text = "\n".join(f"{u.key} {u.paths['audio'].stem}" for u in self.utterances)
        return hashlib.sha256(text.encode()).hexdigest()


def _component_tag(model_set, component: str) -> str:
    if f"{component}.safetensors" not in model_set.manifest["files"]:
        raise VoxanonError(f"model set {model_set.name!r} has no {component} model; vocoder training needs a set "
                           "with content, speaker and generator (e.g. ssl-sas)")
    digest = hashlib.sha256(model_set.manifest["files"][f"{component}.safetensors"].encode())
    digest.update(json.dumps(model_set.config[component], sort_keys=True).encode())
    return digest.hexdigest()[:16]


def feature_tags(models: str) -> dict[str, str]:
    """Cache tags per feature kind: audio and F0 depend on the file only, content and speaker on the encoders too."""
    from ....models.checkpoints.registry import load_model_set

    model_set = load_model_set(models, verify=False)
    return {"audio": "vocoder-input-sslsas", "f0": f"f0-yaapt-sslsas-{DEFAULT_BACKEND}",
            "content": f"content-{_component_tag(model_set, 'content')}",
            "speaker": f"speaker-{_component_tag(model_set, 'speaker')}"}


@dataclass(frozen=True)
class _FeatureJob:
    key: str
    source: str
    is_pipe: bool
    digest: str
    paths: dict[str, Path]

    def has(self, *kinds: str) -> bool:
        return all(self.paths[kind].is_file() for kind in kinds)


def prepare_features(data_dirs: Iterable[DataDir], models: str, cache_root: Path, segment: int,
                     progress: bool = True, workers: int = 1) -> FeatureSet:
    """Compute (or find cached) training features for every utterance; unusable ones are listed, not dropped silently.

    Two passes, the cache handing over between them: the input convention and pYAAPT (CPU-bound,
    per utterance) in ``workers`` processes, then the content and speaker encoders in this process.
    """
    from tqdm import tqdm

    cache = ContentCache(cache_root)
    tags = feature_tags(models)
    skipped: dict[str, str] = {}
    jobs = []
    for data in data_dirs:
        for utt in data.utterances:
            key = f"{data.name}/{utt}"
            source = data.wav[utt] if data.is_pipe(utt) else data.audio_path(utt)
            try:
                digest = (hashlib.sha256(str(source).encode()).hexdigest() if data.is_pipe(utt)
                          else sha256_file(source))
            except OSError as error:
                skipped[key] = f"{source}: {error.strerror or error}"
                continue
            paths = {kind: cache.path(tags[kind], digest, "vector") for kind in FEATURE_KINDS}
            jobs.append(_FeatureJob(key, str(source), data.is_pipe(utt), digest, paths))

    signal_jobs = [job for job in jobs if not job.has("audio", "f0")]
    arguments = [(job.source, job.is_pipe, cache_root, tags["audio"], tags["f0"], job.digest) for job in signal_jobs]
    with tqdm(total=len(signal_jobs), desc="vocoder features: input + F0", unit="utt",
              disable=not progress or not signal_jobs, dynamic_ncols=True) as bar:
        if workers > 1 and len(signal_jobs) > 1:
            with ProcessPoolExecutor(min(workers, len(signal_jobs)), mp_context=get_context("spawn")) as pool:
                futures = {pool.submit(_input_and_f0, *args): job.key for job, args in zip(signal_jobs, arguments)}
                for future in as_completed(futures):
                    if future.result():
                        skipped[futures[future]] = future.result()
                    bar.update(1)
        else:
            for job, args in zip(signal_jobs, arguments):
                error = _input_and_f0(*args)
                if error:
                    skipped[job.key] = error
                bar.update(1)

    ready = [job for job in jobs if job.key not in skipped]
    encoder_jobs = [job for job in ready if not job.has("content", "speaker")]
    content_stage, speaker_stage = ContentStage(models), SpeakerStage(models)
    for job in tqdm(encoder_jobs, desc="vocoder features: content + speaker", unit="utt",
                    disable=not progress or not encoder_jobs, dynamic_ncols=True):
        utterance = Utterance(job.key, "", None, np.load(job.paths["audio"]), SAMPLE_RATE, seeds={})
        content_stage.process_batch([utterance])
        speaker_stage.process_batch([utterance])
        content = utterance.features["content"]
        if content.shape[0] * SSL_SAS_MULTIPLE != len(utterance.audio):
            skipped[job.key] = (f"{job.source}: {content.shape[0]} content frames for {len(utterance.audio)} "
                                f"samples (expected one per {SSL_SAS_MULTIPLE})")
            continue
        cache.put(tags["speaker"], job.digest, "vector", np.asarray(utterance.features["speaker"], dtype=np.float32))
        cache.put(tags["content"], job.digest, "vector", np.asarray(content, dtype=np.float32))

    usable = []
    for job in ready:
        if job.key in skipped:
            continue
        content_frames = int(np.load(job.paths["content"], mmap_mode="r").shape[0])
        if content_frames * SSL_SAS_MULTIPLE < segment:
            skipped[job.key] = (f"{job.source}: {content_frames * SSL_SAS_MULTIPLE} samples after trimming, "
                                f"shorter than one {segment}-sample training segment")
            continue
        usable.append(UtteranceFeatures(job.key, job.paths, content_frames))
    return FeatureSet(usable, skipped, len({job.key for job in signal_jobs + encoder_jobs}))


def _input_and_f0(source: str, allow_pipe: bool, cache_root: Path, audio_tag: str, f0_tag: str,
                  digest: str) -> str | None:
    """Load, apply the SSL-SAS input convention, run pYAAPT and cache audio and F0; an error message, or None."""
    try:
        samples = load_audio(source, SAMPLE_RATE, allow_pipe=allow_pipe).samples
        utterance = Utterance(source, "", None, samples, SAMPLE_RATE, seeds={})
        SslSasInputStage().process(utterance)
    except VoxanonError as error:
        return str(error)
    try:
        F0Stage().process(utterance)
    except (ValueError, RuntimeError, IndexError, FloatingPointError) as error:
        return f"{source}: pYAAPT failed ({type(error).__name__}: {error})"
    f0 = utterance.features["f0"]
    if f0.shape[0] * SSL_SAS_MULTIPLE != 2 * len(utterance.audio):
        return f"{source}: {f0.shape[0]} F0 frames for {len(utterance.audio)} samples (expected one per 160)"
    cache = ContentCache(cache_root)
    cache.put(audio_tag, digest, "vector", utterance.audio)
    cache.put(f0_tag, digest, "vector", f0)
    return None
