"""The Python API behind ``import voxanon``: a system as an object, a corpus run, an evaluation.

:func:`load_system` gives a :class:`System` that anonymises waveforms in this process through the runner's own
per-utterance functions (:mod:`voxanon.pipeline.execution.batches`): the same seeds (from the run seed, the system's
name and the utterance or speaker id), the same stages, the same 16-bit quantisation as the WAV a batch run writes,
so that ``system(audio, rate, utt_id=u, speaker=s)`` equals the file ``voxanon anonymise`` writes for ``u``, sample
for sample. :func:`anonymise` runs a whole corpus with every guarantee of the runner (resume, failures, workers,
the streaming executor, Ray), and :func:`evaluate` scores one; the commands of the same names call them.
"""
from __future__ import annotations

import copy
import json
import numbers
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union

from ..data_prep.corpus import DataDir, load_corpus, read_data_dir
from ..data_prep.errors import VoxanonError
from .systems.plugins import import_path_of
from .systems.recipes import (apply_overrides, build_system, check_needs, configure, load_system_config,
                              resolve_system_config)

if TYPE_CHECKING:
    import numpy as np

    from .evaluation.evaluate import Evaluation
    from .systems.recipes import System as BuiltSystem
    from .systems.stage import Stage

SystemSpec = Union[str, os.PathLike, Mapping[str, Any], "System"]
DataSpec = Union[str, os.PathLike, DataDir]


class UtteranceFailed(VoxanonError):
    """An utterance that one of the system's stages (or loading) could not process; names the stage."""

    def __init__(self, utt: str, stage: str, error: str):
        self.utt, self.stage, self.error = utt, stage, error
        super().__init__(f"utterance {utt!r}, stage {stage!r}: {error}")


def system_config(system: SystemSpec, settings: Mapping[str, Any] | None = None, *, device: str | None = None,
                  precision: str | None = None) -> dict:
    """The resolved configuration of ``system``: a recipe's name or file (``.yaml``), a recipe as a mapping (its
    ``stages`` may hold stage classes), or a :class:`System`; ``settings`` override the recipe's (``seed=1``,
    ``mcadams={"alpha": 0.7}``), ``device`` and ``precision`` set every stage that has the setting, as the
    command's ``--device`` and ``--precision`` do."""
    overrides = _overrides(settings or {})
    if isinstance(system, System):
        base, load = system.config, None
    elif isinstance(system, Mapping):
        base = copy.deepcopy(dict(system))
        base.setdefault("name", "recipe")
        stages = base.get("stages", [])
        if isinstance(stages, list):
            base["stages"] = [stage if isinstance(stage, str) else import_path_of(stage) for stage in stages]
        load = None
    else:
        base, load = None, os.fspath(system)

    if load is not None:
        return load_system_config(load, overrides, device=device, precision=precision)
    return configure(lambda extra: resolve_system_config(apply_overrides(base, extra)), overrides, device, precision)


def _overrides(settings: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``settings`` as ``--set`` overrides (``key.sub=value``, the value as JSON, which YAML reads alike)."""
    found = []
    for key, value in settings.items():
        if isinstance(value, Mapping):
            found += _overrides(value, f"{prefix}{key}.")
        else:
            found.append(f"{prefix}{key}={json.dumps(value)}")
    return found


class System:
    """An anonymisation system in this process: call it on a waveform (or a list) to anonymise it.

    >>> system = voxanon.load_system("b2")
    >>> audio, rate = system(samples, 16000, utt_id="1272-128104-0000", speaker="1272")

    The models load on the first call (or :meth:`load`). A system whose stages prepare from the whole set (B1's
    pseudo speakers, a target per source speaker) needs :meth:`prepare` with that set first.
    """

    def __init__(self, config: dict):
        self._system: BuiltSystem = build_system(config)
        check_needs(self._system)
        self._set_level = [stage.name for stage in self._system.stages if type(stage).prepares_from_set()]
        self._prepared = not self._set_level
        self._loaded = False

    @property
    def name(self) -> str:
        return self._system.name

    @property
    def config(self) -> dict:
        """The system's resolved configuration (a copy)."""
        return copy.deepcopy(self._system.config)

    @property
    def sample_rate(self) -> int:
        """The rate every output has (and inputs are resampled to)."""
        return self._system.sample_rate

    @property
    def stages(self) -> list[Stage]:
        return list(self._system.stages)

    def __repr__(self) -> str:
        return f"voxanon.System({self.name!r}: {' -> '.join(stage.name for stage in self._system.stages)})"

    def prepare(self, data: DataSpec, work_dir: str | os.PathLike | None = None) -> "System":
        """Prepare the stages' set-level options from ``data`` (a corpus, as a run of it does; files they write go
        under ``work_dir``, default a temporary folder): outputs then equal those of a run over that set."""
        from .runner import prepare_set

        data = _corpus(data)
        work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="voxanon-prepared-"))
        self._system = build_system(prepare_set(self._system, data, work_dir, progress=False))
        self._prepared, self._loaded = True, False
        return self

    def load(self) -> "System":
        """Load every stage's models in this process (the first call does it otherwise)."""
        from .execution.batches import load_stage_models
        from .runner import warn_random_model_sets

        if not self._loaded:
            warn_random_model_sets(self._system)
            load_stage_models(self._system, self._system.stages, device_models=True)
            self._loaded = True
        return self

    def __call__(self, audio, sample_rate: int | Sequence[int], *, utt_id: str | Sequence[str],
                 speaker: str | Sequence[str], gender: str | None | Sequence[str | None] = None):
        """Anonymise one waveform (``audio``: samples, mono or frames by channels, at ``sample_rate`` Hz) and return
        ``(samples, rate)``: float32 at :attr:`sample_rate`, quantised to 16 bits as the batch run's WAV is. Given
        lists (of waveforms, rates, ids, speakers, genders), anonymise them as one batch and return a list. A
        failure raises :class:`UtteranceFailed` naming the utterance and the stage."""
        if isinstance(utt_id, str):
            return self._run([(audio, sample_rate, utt_id, speaker, gender)])[0]
        count = len(utt_id)
        if len(set(utt_id)) != count:
            raise VoxanonError("utt_id: each utterance of a list needs an id of its own (its seeds derive from it)")
        rates = [sample_rate] * count if isinstance(sample_rate, numbers.Integral) else list(sample_rate)
        speakers = list(speaker) if not isinstance(speaker, str) else [speaker] * count
        genders = list(gender) if isinstance(gender, (list, tuple)) else [gender] * count
        if not len(audio) == len(rates) == len(speakers) == len(genders) == count:
            raise VoxanonError("audio, sample_rate, utt_id, speaker and gender must give one entry per utterance")
        return self._run(list(zip(audio, rates, utt_id, speakers, genders)))

    def _run(self, items: list[tuple]) -> list[tuple[np.ndarray, int]]:
        import numpy as np

        from ..data_prep.audio import AudioError, audio_from_samples, to_pcm16
        from .execution.batches import MIN_SECONDS, Job, load_batch, prepare_audio, run_stages

        if not self._prepared:
            raise VoxanonError(f"system {self.name!r}: stage(s) {', '.join(self._set_level)} prepare from the "
                               "whole set; call system.prepare(corpus) with the set first")
        self.load()
        system = self._system
        jobs, prepared = [], {}
        for audio, rate, utt, speaker, gender in items:
            job = Job(utt, speaker, gender, f"<array {utt}>", "")
            samples = np.asarray(audio)
            if np.issubdtype(samples.dtype, np.integer):  # as soundfile reads PCM: full scale is 1.0
                samples = samples / float(2 ** (8 * samples.dtype.itemsize - 1))
            samples = np.asarray(samples, dtype=np.float32)
            try:
                prepared[utt] = prepare_audio(system, job, audio_from_samples(
                    job.source, samples.reshape(len(samples), -1), int(rate), system.sample_rate,
                    max_seconds=system.max_seconds, min_seconds=MIN_SECONDS))
            except AudioError as error:
                raise UtteranceFailed(utt, "load", error.reason) from None
            jobs.append(job)
        batches = [jobs[i:i + system.batch_size] for i in range(0, len(jobs), system.batch_size)]
        results = {}
        for jobs_of_batch in batches:
            batch = run_stages(system, load_batch(system, jobs_of_batch, False, prepared))
            for outcome in batch.outcomes.values():
                if outcome.error is not None:
                    raise UtteranceFailed(outcome.utt, outcome.failed_stage, outcome.error)
            for item in batch.ready:
                quantised = to_pcm16(item.utterance.audio).astype(np.float32) / np.float32(32768)
                results[item.utterance.utt_id] = (quantised, system.sample_rate)
        return [results[job.utt] for job in jobs]


def load_system(name_or_recipe: SystemSpec, *, device: str | None = None, precision: str | None = None,
                **settings: Any) -> System:
    """A :class:`System`: a recipe's name (``"b2"``), a recipe file (``"mine.yaml"``), or a recipe as a mapping
    (``{"name": "mine", "stages": [PitchShift], "pitch_shift": {"semitones": 2}}``); ``settings`` override its
    settings (``seed=3``, ``mcadams={"alpha": 0.7}``); ``device`` and ``precision`` as the command's options."""
    return System(system_config(name_or_recipe, settings, device=device, precision=precision))


@dataclass(frozen=True)
class Failure:
    """An utterance that failed: the stage (``load``, a stage's name, ``write``) and the error, as failures.tsv."""
    utt: str
    stage: str
    error: str


@dataclass
class AnonymiseResult:
    """What a run over one set did: counts, failures, where everything is, the run's record (run.json)."""
    name: str
    out_dir: Path
    total: int
    processed: int
    resumed: int
    failures: list[Failure]
    wall_seconds: float
    audio_seconds: float
    manifest: dict = field(repr=False)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def wav_dir(self) -> Path:
        return self.out_dir / "wav"

    @property
    def paths(self) -> dict[str, Path]:
        """Each anonymised utterance's WAV file."""
        return {utt: self.out_dir / entry for utt, entry in self.data().wav.items()}

    def data(self) -> DataDir:
        """The output set as a data set (read from its metadata), ready to evaluate or anonymise again."""
        return read_data_dir(self.out_dir)


def _corpus(data: DataSpec, allow_pipes: bool = False) -> DataDir:
    return data if isinstance(data, DataDir) else load_corpus(data, allow_pipes=allow_pipes)


def _backend(backend: Any, workers: int | None):
    """A backend object for ``backend``: ``local`` (None: the runner's worker pool), ``ray`` (a Ray instance on
    this machine, or at ``RAY_ADDRESS``), or a backend object given as it is."""
    if backend is None or backend == "local":
        return None
    if backend == "ray":
        from .execution.ray import RayBackend, RayOptions

        return RayBackend(RayOptions(address=os.environ.get("RAY_ADDRESS") or None, workers=workers))
    if isinstance(backend, str):
        raise VoxanonError(f"backend must be 'local' or 'ray', got {backend!r}")
    return backend


def anonymise(data: DataSpec, system: SystemSpec, out: str | os.PathLike, *, workers: int | None = None,
              backend: Any = "local", device: str | None = None, executor: str = "auto", resume: bool = True,
              progress: bool = False, allow_pipes: bool = False, input_digest: bool = False,
              queue_seconds: float | None = None, device_processes: int | None = None,
              started: float | None = None, **settings: Any) -> AnonymiseResult:
    """Anonymise the set ``data`` (a path or a corpus) with ``system`` (as :func:`load_system` takes it) into the
    folder ``out`` (``wav/<utt>.wav``, the set's metadata, ``run.json``, ``failures.tsv``; docs/api.md), as
    ``voxanon anonymise`` does: resumed when ``out`` holds a run of the same configuration, with ``workers`` local
    processes (default: one per usable core), on ``backend`` ``local`` or ``ray``, with the ``executor`` ``pool``,
    ``streaming`` or ``auto``. ``device`` and ``settings`` as :func:`load_system` takes them."""
    from .model_service import machine_workers, usable_cpus
    from .runner import RUN_MANIFEST, anonymise_set

    started = time.time() if started is None else started
    config = system_config(system, settings, device=device)
    data = _corpus(data, allow_pipes)
    owned = isinstance(backend, str) or backend is None
    backend = _backend(backend, workers)
    try:
        result = anonymise_set(data, config, Path(out), workers=machine_workers(workers) if workers else usable_cpus(),
                               resume=resume, allow_pipes=allow_pipes, progress=progress, backend=backend,
                               executor=executor, queue_seconds=queue_seconds, device_processes=device_processes,
                               input_digest=input_digest, started=started)
    finally:
        if owned and backend is not None:
            backend.close()
    manifest = json.loads((result.out_dir / RUN_MANIFEST).read_text(encoding="utf-8"))
    return AnonymiseResult(result.name, result.out_dir, result.total, result.processed, result.resumed,
                           [Failure(f.utt, f.failed_stage, f.error) for f in result.failures], result.wall_seconds,
                           result.audio_seconds, manifest)


@dataclass
class EvaluateResult:
    """An evaluation's figures (each a labelled :class:`~voxanon.eval.results.Result`), where its outputs are
    (``results.json``, ``results.csv``, ``results.md``, ``plots/``, ``report.html`` under ``out_dir``) and what
    could not be computed (``remarks``)."""
    results: list
    out_dir: Path
    report: Path
    remarks: list[str]

    @property
    def figures(self) -> dict[tuple[str, str, str, str, str], float | str]:
        """Every figure by ``(set, condition, metric, variant, attacker)``, e.g.
        ``figures["libri_dev_trials_f", "o-a", "eer", "rocch", "ignorant"]``, each in its result's unit (EER in %),
        as in results.json."""
        return {(r.set, r.condition, r.metric, r.variant, r.attacker): r.value for r in self.results}

    def table(self) -> str:
        """The figures as the command prints them: a Markdown table per condition."""
        from ..eval.tables import markdown_tables_by_condition

        return markdown_tables_by_condition(self.results)


def evaluate(original: str | os.PathLike, anonymised: str | os.PathLike, *, out: str | os.PathLike = "evaluation",
             suffix: str | None = None, system: str | None = None, protocol: str = "vpc2022",
             settings: Sequence[str] = (), asv_model: str | os.PathLike | None = None, device: str = "auto",
             backend: Any = "local", workers: int | None = None, batch_size: int | None = None,
             cache: str | os.PathLike | None = None, allow_missing: bool = False, allow_pipes: bool = False,
             trust_model_code: bool = False, progress: bool = False) -> EvaluateResult:
    """Evaluate the anonymised set(s) against the original(s) as ``voxanon evaluate`` does (the same options, by
    the same names), writing its outputs under ``out``; ``settings``: protocol overrides (``"asr=null"``);
    ``cache``: the embedding and transcript cache (default the user's; ``"none"`` for no cache)."""
    from ..data_prep.atomic import ensure_writable_folder
    from .evaluation.computations import (check_device, encoder_label, make_embedder, make_transcriber,
                                          run_computations_on, semi_informed_attacker)
    from .evaluation.evaluate import evaluate_sets
    from .evaluation.outputs import attacker_notes, write_outputs
    from .evaluation.protocols import load_protocol
    from .evaluation.sets import discover_sets
    from .feature_cache import ContentCache, FileDigests

    original, anonymised, out = Path(original), Path(anonymised), Path(out)
    owned = isinstance(backend, str) or backend is None
    backend = _backend(backend, workers)
    try:
        check_device(device, backend)
        ensure_writable_folder(out, "--out")   # now, not after every score is computed
        protocol_config = load_protocol(protocol, list(settings))
        name = system or (suffix.lstrip("_") if suffix else anonymised.name)
        sets = discover_sets(original, anonymised, suffix, allow_pipes=allow_pipes)
        content_cache = ContentCache.from_option(cache)
        digest = FileDigests(content_cache.root)
        asv = protocol_config.get("asv", {})
        embedder = make_embedder(asv, device=device, digest=digest)
        transcriber = make_transcriber(protocol_config.get("asr"), trust_model_code, device=device,
                                       decoding=protocol_config.get("asr_decoding"))
        notes = {"protocol": protocol_config["name"], "original": str(original), "anonymised": str(anonymised)}
        semi_informed = None
        if asv_model is not None:
            semi_informed, warnings = semi_informed_attacker(Path(asv_model), asv, sets, name, device=device,
                                                             digest=digest)
            notes |= attacker_notes(semi_informed, warnings)
        run_computations_on(backend, batch_size, embedder, transcriber,
                            semi_informed.embedder if semi_informed else None, progress=progress)
        evaluation: Evaluation = evaluate_sets(
            sets, protocol_config, name, embedder=embedder, cache=content_cache, asr=transcriber,
            allow_missing=allow_missing, asv_model=encoder_label(asv.get("encoder", "ge2e"), embedder.tag),
            semi_informed=semi_informed)
    finally:
        if owned and backend is not None:
            backend.close()   # its Ray actors served every set and side
    report = write_outputs(out, evaluation, f"voxanon evaluation: {name} ({protocol_config['name']})", notes)
    return EvaluateResult(evaluation.results, out, report, list(evaluation.remarks))
