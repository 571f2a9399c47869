"""Sex-neutral F0 target moments of a corpus (Noé 2023 thesis §5.4) and the targets file.

For every utterance: YAAPT F0 with the SSL-SAS settings (the ``fast`` version by default, or
``pyaapt`` itself: :data:`voxanon.models.f0.params.PYAAPT_BACKENDS`), on the audio as the SSL-SAS chain sees it
(16 kHz, trimmed to a multiple of 320 samples, peak 0.95: the ``ssl_sas_input`` stage), so the
per-utterance F0 cache is shared with anonymisation runs; then the mean and population
std of its voiced frames. The utterance values are averaged per speaker, per sex and over
the two sexes with equal weight (:func:`voxanon.models.speakers.balanced_average.balanced_average`).

Utterances without a voiced frame carry no F0 moments: they are excluded from the averages
and reported (count and ids); files that cannot be read or analysed are reported with the
reason. Neither is dropped silently.

The targets file is JSON: ``f0_mean_hz`` and ``f0_std_hz`` (what ``f0_neutral`` and ``tdpsola``
read), ``by_sex``, ``speakers_per_sex``, ``utterances`` (the number averaged), ``source`` (the
data directories), ``excluded`` and ``f0_backend``.
"""
from __future__ import annotations

import json
import math
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ....data_prep.corpus import DataDir, merge_labelled_sets
from ....data_prep.errors import VoxanonError
from ....models.f0.params import DEFAULT_BACKEND

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class F0Job:
    utt: str
    source: str
    allow_pipe: bool
    cache_dir: str | None
    backend: str


@dataclass(frozen=True)
class UtteranceF0:
    """Voiced moments of one utterance; ``mean_hz is None`` when nothing was voiced; ``error`` if unusable."""

    utt: str
    mean_hz: float | None = None
    std_hz: float | None = None
    n_voiced: int = 0
    error: str | None = None


@dataclass
class F0Targets:
    f0_mean_hz: float
    f0_std_hz: float
    by_sex: dict[str, dict[str, float]]
    speakers_per_sex: dict[str, int]
    utterances: int
    source: list[str]
    excluded: dict[str, object] = field(default_factory=dict)
    f0_backend: str = DEFAULT_BACKEND

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def utterance_f0(job: F0Job) -> UtteranceF0:
    """Load, prepare as ``ssl_sas_input`` does, track F0 (cached) and measure the voiced moments."""
    from ....data_prep.audio import AudioError, load_audio
    from ....models.f0.extract import F0Cache, yaapt_f0
    from ....models.f0.params import SSL_SAS_YAAPT
    from ....models.dsp.f0_transform import voiced_moments
    from .chain import SslSasInputStage
    from ..stage import Utterance

    try:
        audio = load_audio(job.source, SAMPLE_RATE, allow_pipe=job.allow_pipe)
    except AudioError as error:
        return UtteranceF0(job.utt, error=str(error))
    try:
        utterance = Utterance(job.utt, "", None, audio.samples, SAMPLE_RATE, seeds={})
        SslSasInputStage().process(utterance)
        if job.cache_dir is None:
            f0 = yaapt_f0(utterance.audio, SAMPLE_RATE, SSL_SAS_YAAPT, job.backend)
        else:
            f0 = F0Cache(job.cache_dir).f0(utterance.audio, SAMPLE_RATE, SSL_SAS_YAAPT, job.backend)
    except Exception as error:  # one bad file must not stop a corpus-wide run: it is reported instead
        reason = str(error) if isinstance(error, VoxanonError) else f"{type(error).__name__}: {error}"
        return UtteranceF0(job.utt, error=f"{job.source}: {reason}")
    moments = voiced_moments(f0)
    if moments is None:
        return UtteranceF0(job.utt)
    return UtteranceF0(job.utt, moments.mean_hz, moments.std_hz, moments.n_voiced)


def _tracker_pool(workers: int, backend: str) -> ProcessPoolExecutor:
    """Worker processes for :func:`utterance_f0`. On Linux the tracker is loaded once, here, and the workers
    are forked from this process with it: spawned workers each imported it and loaded the fast version's
    compiled kernels again (2-4 s of CPU per worker, about a third of the demo corpus's F0 on one core).
    Elsewhere, or when this process already runs other threads, they are spawned."""
    from ...execution.pool import fork_safe
    from ..f0 import F0Stage

    if not fork_safe():
        return ProcessPoolExecutor(workers, mp_context=get_context("spawn"))
    F0Stage(backend=backend).load_models()
    from ....data_prep.audio import load_audio  # noqa: F401  (what utterance_f0 imports, imported before the fork)
    from .chain import SslSasInputStage  # noqa: F401
    return ProcessPoolExecutor(workers, mp_context=get_context("fork"))


def _track_all(jobs: list[F0Job], workers: int, progress: bool) -> list[UtteranceF0]:
    desc = f"F0 ({jobs[0].backend if jobs else 'YAAPT'})"
    results: list[UtteranceF0] = []
    if workers <= 1 or len(jobs) <= 1:
        with tqdm(total=len(jobs), unit="utt", desc=desc, disable=not progress, dynamic_ncols=True) as bar:
            for job in jobs:
                results.append(utterance_f0(job))
                bar.update(1)
    else:
        # Every job submitted, which starts the processes, before the progress bar starts its thread.
        with _tracker_pool(min(workers, len(jobs)), jobs[0].backend) as pool:
            futures = [pool.submit(utterance_f0, job) for job in jobs]
            with tqdm(total=len(jobs), unit="utt", desc=desc, disable=not progress, dynamic_ncols=True) as bar:
                for future in as_completed(futures):
                    results.append(future.result())
                    bar.update(1)
    order = {job.utt: index for index, job in enumerate(jobs)}
    return sorted(results, key=lambda result: order[result.utt])


def compute_f0_targets(sets: list[DataDir], *, workers: int = 1, cache_dir: str | os.PathLike | None = None,
                       allow_pipes: bool = False, progress: bool = True,
                       backend: str = DEFAULT_BACKEND) -> F0Targets:
    """Balanced F0 target moments over the utterances of ``sets`` (see the module doc); ``backend``: the
    YAAPT version (:data:`voxanon.models.f0.params.PYAAPT_BACKENDS`)."""
    from ....models.speakers.balanced_average import balanced_average
    from ....models.f0.params import PYAAPT_BACKENDS

    if backend not in PYAAPT_BACKENDS:
        raise VoxanonError(f"f0-targets computes the SSL-SAS chain's F0: its backend must be one of "
                           f"{', '.join(PYAAPT_BACKENDS)}, got {backend!r}")
    utt2spk, sex_of_speaker = merge_labelled_sets(sets)
    jobs = [F0Job(utt, data.wav[utt] if data.is_pipe(utt) else str(data.audio_path(utt)), allow_pipes,
                  None if cache_dir is None else str(cache_dir), backend)
            for data in sets for utt in data.utterances]
    results = _track_all(jobs, workers, progress)
    unusable = {r.utt: r.error for r in results if r.error is not None}
    unvoiced = [r.utt for r in results if r.error is None and r.mean_hz is None]
    used = [r for r in results if r.mean_hz is not None]
    excluded = {"no_voiced_frames": unvoiced, "unusable_audio": unusable}
    if not used:
        raise VoxanonError(f"no utterance gave voiced F0 ({len(unvoiced)} without voiced frames, "
                           f"{len(unusable)} unusable); cannot compute targets")
    values = np.array([[r.mean_hz, r.std_hz] for r in used])
    average = balanced_average(values, [utt2spk[r.utt] for r in used], sex_of_speaker)
    return F0Targets(
        f0_mean_hz=float(average.neutral[0]), f0_std_hz=float(average.neutral[1]),
        by_sex={sex: {"f0_mean_hz": float(v[0]), "f0_std_hz": float(v[1])} for sex, v in average.by_sex.items()},
        speakers_per_sex=dict(average.speakers_per_sex), utterances=len(used),
        source=[str(Path(data.path).resolve()) if data.path else data.name for data in sets], excluded=excluded,
        f0_backend=backend)


def read_f0_targets(path: str | os.PathLike) -> tuple[float, float]:
    """``(f0_mean_hz, f0_std_hz)`` of a targets file written by ``voxanon f0-targets``."""
    path = Path(path).expanduser()
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise VoxanonError(f"{path}: cannot read the F0 targets file ({error.strerror or error}); "
                           "make one with voxanon f0-targets --data DIR --out FILE.json") from None
    except ValueError as error:
        raise VoxanonError(f"{path}: not JSON ({error})") from None
    values = []
    for key in ("f0_mean_hz", "f0_std_hz"):
        value = content.get(key) if isinstance(content, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise VoxanonError(f"{path}: {key} must be a number (an F0 targets file from voxanon f0-targets)")
        values.append(float(value))
    if values[0] <= 0 or values[1] < 0:
        raise VoxanonError(f"{path}: f0_mean_hz must be > 0 and f0_std_hz >= 0, got {values[0]} and {values[1]}")
    return values[0], values[1]
