"""The batch runner: anonymise every utterance of a set, in parallel, resumably.

Output goes to ``<out>/<set><suffix>/`` in the VoicePrivacy layout (``wav/<utt>.wav``,
16-bit mono, plus the set's metadata with ``wav.scp`` and ``utt2dur`` rebuilt). Beside it:

- ``.journal.jsonl``: one line per finished utterance (sha256 of its WAV, samples,
  the parameters it drew, the configuration hash, its input's identity), appended and synced as each
  one finishes. A rerun skips an utterance whose WAV exists and whose hash matches its
  journal line for the same configuration and the same input (docs/resume.md), so a ``kill -9`` loses nothing written:
  WAVs are written to a temporary file and renamed, and an utterance whose WAV landed
  but whose journal line did not is simply redone (bit-identically).
- ``<name>/<utt>.xvector``: per-utterance vectors a stage chose to keep (B1's pseudo
  speakers), raw little-endian float32 as SSL-SAS reads them.
- ``failures.tsv``: ``utt  stage  error`` for every utterance that failed; the rest of
  the set is still processed and the exit code says that something failed. A fault of the whole run
  (its models do not load, its device is missing or out of memory: :class:`RunFault`) is not an
  utterance's: the run stops at once with that one message (exit code 2), and ``run.json`` says so.
- ``run.json``: configuration, package versions, the backend and executor, timing and counts.
- ``.lock``: held while a run writes the set (:mod:`voxanon.data_prep.run_lock`); a second
  run into the same set fails at once, naming the first one's PID and host.

Every path built from an utterance id goes through :func:`voxanon.data_prep.paths.contained_path`,
so no id can make a run write outside its output folder.

Executors: a system whose stages all run on the CPU goes through a pool of worker processes forked from
this one once it has loaded the models (or this process alone, for one worker), each running whole
batches (:func:`process_jobs`); a system with a stage on another device goes through the streaming
executor (:mod:`voxanon.pipeline.execution.streaming`: CPU stages in a pool, the models in one device process).
Both call the same per-utterance functions (:func:`load_batch`, :func:`run_stages`, :func:`write_batch`),
as the Ray backend does.
"""
from __future__ import annotations

import copy
import json
import logging
import os
import platform
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Iterable

import soundfile
from tqdm import tqdm

from ..data_prep.atomic import atomic_write_text, remove_stale_temporaries
from ..data_prep.corpus import DataDir, DataDirError, write_anonymised_dir
from ..data_prep.digest import file_identity, same_input, unconfirmed_content
from ..data_prep.errors import VoxanonError
from ..data_prep.paths import contained_path
from ..data_prep.run_lock import run_lock
from .execution.batches import Job, Outcome, sha256_or_none
from .execution.local import EXECUTORS, LocalBackend
from .execution.memory_plan import fit_in_memory
from .execution.planning import DEFAULT_BATCH_SECONDS, batch_invariant, batches_to_run, plan_batches, pool_batches
from .execution.pool import NoWork
from .systems.stage import RunFault, one_line
from .systems.recipes import System, build_system, check_needs, config_hash


log = logging.getLogger(__name__)

JOURNAL = ".journal.jsonl"
FAILURES = "failures.tsv"
RUN_MANIFEST = "run.json"
REPORTED_PACKAGES = ("voxanon", "numpy", "scipy", "librosa", "soundfile", "soxr", "torch", "torchaudio")


@dataclass
class SetResult:
    name: str
    out_dir: Path
    total: int
    processed: int
    resumed: int
    failures: list[Outcome]
    wall_seconds: float
    audio_seconds: float

    @property
    def ok(self) -> bool:
        return not self.failures


def read_run_identity(out_dir: Path) -> dict | None:
    """``system``, ``config_hash`` and ``status`` from an output set's run.json; None when it has none
    (an original set); a VoxanonError naming the file when it is unreadable."""
    manifest = Path(out_dir) / RUN_MANIFEST
    if not manifest.is_file():
        return None
    try:
        run = json.loads(manifest.read_text(encoding="utf-8"))
        return {"system": run["system"], "config_hash": run["config_hash"], "status": run.get("status")}
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise VoxanonError(f"{manifest}: not a voxanon run manifest ({type(error).__name__}: {error})") from None


def read_journal(path: Path, current_hash: str) -> dict[str, dict]:
    """Journal entries of the current configuration; a torn last line (a kill) is ignored."""
    entries: dict[str, dict] = {}
    if not path.is_file():
        return entries
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("config") == current_hash:
            entries[entry["utt"]] = entry
    return entries


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in REPORTED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _write_failures(path: Path, failures: Iterable[Outcome]) -> None:
    lines = ["utt\tstage\terror\n"]
    lines += [f"{f.utt}\t{f.failed_stage}\t{' '.join(str(f.error).split())}\n" for f in failures]
    atomic_write_text(path, "".join(lines))


def _durations(data: DataDir, utterances: list[str]) -> dict[str, float | None]:
    """Each utterance's length in seconds: from ``utt2dur`` when it covers them all, else from each file's
    header (None for a pipe, 0 for a file that cannot be read: its job reports why)."""
    if all(utt in data.utt2dur for utt in utterances):
        return {utt: float(data.utt2dur[utt]) for utt in utterances}
    return {utt: None if data.is_pipe(utt) else _header_seconds(data.audio_path(utt)) for utt in utterances}


def _header_seconds(path) -> float:
    try:
        return float(soundfile.info(str(path)).duration)
    except (OSError, RuntimeError, soundfile.LibsndfileError):
        return 0.0


def prepare_set(system: System, data: DataDir, work_dir: Path, progress: bool = True) -> dict:
    """The system's configuration with every stage's set-level options (:meth:`Stage.prepare_set`) merged in."""
    config = copy.deepcopy(system.config)
    for stage in system.stages:
        options = stage.prepare_set(data, work_dir, progress)
        if options:
            config[stage.name] = {**(config.get(stage.name) or {}), **options}
    return config


def choose_executor(system: System, executor: str = "auto") -> str:
    """``streaming`` or ``pool`` for ``executor`` (``auto``: streaming when a stage runs on a device other
    than the CPU, which is where it pays; the forked pool is the fastest on CPUs alone)."""
    if executor not in EXECUTORS:
        raise VoxanonError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    on_device = any(stage.device != "cpu" for stage in system.stages)
    if executor == "auto":
        return "streaming" if on_device else "pool"
    if executor == "pool" and on_device:
        log.warning("--executor pool with a stage on a device: each worker runs padded batches of its own, so the "
                    "output (to float rounding) depends on the worker count and on resumes; the streaming "
                    "executor (the default) plans batches from the set alone")
    return executor


def run_hash(config: dict, executor: str) -> str:
    """The journal's configuration hash: the system's, and, where batching changes the output (a stage on
    another device than the CPU: :func:`batch_invariant`), how the executor batches (the streaming
    executor's ``batch_seconds``; the pool's ``batch_size`` is in the configuration already)."""
    if batch_invariant(config):
        return config_hash(config)
    batching = {"kind": executor}
    if executor == "streaming":
        batching["batch_seconds"] = float(config.get("batch_seconds", DEFAULT_BATCH_SECONDS))
    return config_hash({**config, "executor": batching})


def warn_random_model_sets(system: System) -> None:
    """The random-weights warning for each model set the system uses, once for the run: its workers,
    which load the sets again, stay quiet (:func:`voxanon.models.checkpoints.registry.quiet_random_warnings`)."""
    from ..models.checkpoints.registry import warn_if_random

    for need in system.needs:
        kind, _, name = need.partition(":")
        if kind == "checkpoint":
            warn_if_random(name)


def anonymise_set(data: DataDir, config: dict, out_dir: Path, *, workers: int = 1, resume: bool = True,
                  allow_pipes: bool = False, progress: bool = True, backend=None, executor: str = "auto",
                  queue_seconds: float | None = None, device_processes: int | None = None,
                  input_digest: bool = False, started: float | None = None) -> SetResult:
    """Anonymise one data set into ``out_dir`` (see the module doc for what lands there).

    ``backend`` runs the batches and yields their outcomes (default ``LocalBackend(workers)``;
    :class:`voxanon.pipeline.execution.ray.RayBackend` for a cluster); whichever it is, this
    process alone writes the journal, ``failures.tsv``, ``run.json`` and the metadata.
    ``executor`` (:func:`choose_executor`) picks the streaming executor or the pool; ``queue_seconds``
    caps the audio the streaming executor holds and ``device_processes`` sets how many device processes it
    runs locally (default one per GPU: :class:`voxanon.pipeline.execution.streaming.StreamingOptions`).
    ``input_digest`` adds each input's sha256 to what a resumed run compares (:func:`input_identities`); a journal
    line without one is redone, its content being unconfirmed (:func:`voxanon.data_prep.digest.unconfirmed_content`).
    ``started``: when the run's clock started (``time.time()``; default: this call), which run.json's wall time
    and the device's first batch count from (the anonymise command passes its own start: interpreter, imports,
    set preparation).
    """
    started = time.time() if started is None else started
    backend = backend if backend is not None else LocalBackend(workers)
    system = build_system(config)
    check_needs(system)
    streaming = choose_executor(system, executor) == "streaming"
    problems = [p for p in data.validate(check_files=False, need_gender=system.needs_gender)]
    if problems:
        raise DataDirError(str(data.path or data.name), problems)
    backend_info = backend.describe()    # joins a cluster before anything is written
    backend.check_devices(system, streaming)
    warn_random_model_sets(system)
    out_dir = Path(out_dir)
    with run_lock(out_dir):  # a second run into the same set fails at once, naming this one
        return _anonymise_locked(data, system, out_dir, backend, backend_info, resume, allow_pipes, progress,
                                 streaming, queue_seconds, device_processes, input_digest, started)


def _anonymise_locked(data: DataDir, system: System, out_dir: Path, backend, backend_info: dict, resume: bool,
                      allow_pipes: bool, progress: bool, streaming: bool, queue_seconds: float | None,
                      device_processes: int | None, input_digest: bool, started: float) -> SetResult:
    from .execution.streaming import StreamingOptions

    config = prepare_set(system, data, out_dir / ".prepared", progress)
    system = build_system(config)
    wav_dir = out_dir / "wav"
    wav_dir.mkdir(parents=True, exist_ok=True)
    stale = remove_stale_temporaries(out_dir)  # a killed run's: this run holds the set's lock
    if stale:
        log.info("%s: removed %d temporary file(s) a killed run left, e.g. %s", out_dir, len(stale), stale[0])
    executor = "streaming" if streaming else "pool"
    current_hash = run_hash(config, executor)
    journal_path = out_dir / JOURNAL
    if not resume and journal_path.exists():
        journal_path.unlink()
    journal = read_journal(journal_path, current_hash)
    inputs = input_identities(data, input_digest)
    finished = {utt: entry for utt, entry in journal.items()
                if utt in data.wav and sha256_or_none(contained_path(wav_dir, f"{utt}.wav")) == entry["sha256"]}
    changed = sorted(utt for utt, entry in finished.items() if not same_input(entry.get("input"), inputs[utt]))
    if changed:
        log.info("%s: %d utterance(s) redone, their input changed since they were made, e.g. %s", data.name,
                 len(changed), changed[0])
        for utt in changed:
            del finished[utt]
    undigested = sorted(utt for utt, entry in finished.items()
                        if unconfirmed_content(entry.get("input"), inputs[utt]))
    if undigested:
        log.info("%s: %d utterance(s) redone, their journal lines have no input digest (made without --input-digest), "
                 "so a change of content could not be ruled out, e.g. %s", data.name, len(undigested), undigested[0])
        for utt in undigested:
            del finished[utt]
    options = None
    if streaming:
        options = StreamingOptions(float(config.get("batch_seconds", DEFAULT_BATCH_SECONDS)), queue_seconds, started,
                                   device_processes)
        plan = plan_batches(_jobs(data, data.utterances, wav_dir), options.batch_seconds)
        batches = batches_to_run(plan, set(finished), with_companions=not batch_invariant(config))
        jobs = [job for batch in batches for job in batch if not job.companion]
    else:
        todo = [utt for utt in data.utterances if utt not in finished]
        parallel = backend_info["workers"] > 1
        jobs = _jobs(data, todo, wav_dir)
        batches = pool_batches(jobs, system.batch_size, parallel)
    if isinstance(backend, LocalBackend):  # a cluster's workers have memory of their own
        batches = fit_in_memory(system, jobs, batches, backend_info["workers"],
                                options.queue_cap if streaming else None)
    manifest = {
        "system": system.name, "config": config, "config_hash": current_hash,
        "data": str(data.path.resolve()) if data.path else data.name, "out": str(out_dir.resolve()),
        "workers": backend_info["workers"], "backend": backend_info, "executor": {"kind": executor},
        "versions": package_versions(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)), "status": "running",
    }
    atomic_write_text(out_dir / RUN_MANIFEST, json.dumps(manifest, indent=2) + "\n")
    if finished:
        log.info("%s: resuming, %d of %d utterances already done", data.name, len(finished), len(data.wav))

    failures: list[Outcome] = []
    audio_seconds = 0.0
    outcomes = None
    try:
        # The backend starts its processes (nothing to start, no models to load, for a finished set) before
        # the progress bar starts a thread.
        with backend.outcomes(system, batches, allow_pipes, wav_dir, options) if batches else NoWork() as outcomes:
            audio_seconds = _journal_outcomes(outcomes, jobs, backend, journal_path, current_hash, inputs,
                                              finished, failures, data, system, progress, started)
            if hasattr(outcomes, "stats"):
                manifest["executor"] = outcomes.stats()
    except BaseException as error:
        # What stopped the run, in run.json: Ctrl-C (or a SystemExit) leaves "interrupted", a fault "failed".
        stopped = isinstance(error, (KeyboardInterrupt, SystemExit))
        if stopped and hasattr(outcomes, "stats"):
            manifest["executor"] = outcomes.stats()  # what the executor did until the stop (a benchmark's time limit)
        manifest.update({"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                         "status": "interrupted" if stopped else "failed",
                         "error": (f"interrupted ({type(error).__name__})" if stopped
                                   else str(error) if isinstance(error, RunFault) else one_line(error))})
        atomic_write_text(out_dir / RUN_MANIFEST, json.dumps(manifest, indent=2) + "\n")
        raise

    wall = time.time() - started
    _write_failures(out_dir / FAILURES, failures)
    produced = {utt: entry["samples"] / system.sample_rate for utt, entry in finished.items()}
    write_anonymised_dir(data, out_dir, produced)
    manifest.update({
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "wall_seconds": round(wall, 3),
        "audio_seconds_processed": round(audio_seconds, 3),
        "real_time_factor": round(wall / audio_seconds, 5) if audio_seconds else None,
        "counts": {"total": len(data.wav), "processed": len(jobs) - len(failures),
                   "resumed": len(data.wav) - len(jobs), "failed": len(failures)},
        "status": "complete" if not failures else "failures",
    })
    atomic_write_text(out_dir / RUN_MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return SetResult(data.name, out_dir, len(data.wav), len(jobs) - len(failures), len(data.wav) - len(jobs),
                     failures, wall, audio_seconds)


def input_identities(data: DataDir, content_digest: bool = False) -> dict[str, dict | None]:
    """Each utterance's input as its journal line records it, taken before any worker reads it (an input that
    changes during the run is redone by the next): a file's size and modification time, with ``content_digest``
    its sha256 too (:func:`voxanon.data_prep.digest.file_identity`); a pipe's command."""
    return {utt: {"command": data.wav[utt]} if data.is_pipe(utt) else file_identity(data.audio_path(utt), content_digest)
            for utt in data.utterances}


def _jobs(data: DataDir, utterances: list[str], wav_dir: Path) -> list[Job]:
    """The utterances' jobs, with their lengths (which the memory check needs, and the parallel pool's order)."""
    seconds = _durations(data, utterances)
    return [Job(utt, data.utt2spk[utt], data.spk2gender.get(data.utt2spk[utt]),
                data.wav[utt] if data.is_pipe(utt) else str(data.audio_path(utt)),
                str(contained_path(wav_dir, f"{utt}.wav")), seconds.get(utt))
            for utt in utterances]


def _journal_outcomes(outcomes: Iterable[list[Outcome]], jobs: list[Job], backend, journal_path: Path,
                      current_hash: str, inputs: dict[str, dict | None], finished: dict, failures: list[Outcome], data: DataDir, system: System,
                      progress: bool, started: float) -> float:
    """Journals each batch of outcomes as it comes (one fsync per batch), collects the failures, shows
    progress; returns the audio seconds processed. A backend must report each job once: an outcome of an
    utterance it was not given, or given back already, or a job left without one is a bug, not a result."""
    expected = {job.utt for job in jobs}
    audio_seconds = 0.0
    bar = tqdm(total=len(data.wav), initial=len(finished), unit="utt", desc=f"{system.name} {data.name}",
               disable=not progress, dynamic_ncols=True)
    with bar, open(journal_path, "a", encoding="utf-8") as journal_file:
        for batch in outcomes:
            for outcome in batch:
                if outcome.utt not in expected:
                    raise RuntimeError(f"backend {backend.name!r} returned an outcome for {outcome.utt!r}, which "
                                       "it was not given or has returned before")
                expected.discard(outcome.utt)
                if outcome.error is not None:
                    failures.append(outcome)
                    bar.write(f"FAILED {outcome.utt} ({data.wav[outcome.utt]}) [{outcome.failed_stage}]: "
                              f"{outcome.error}")
                else:
                    for note in outcome.notes:
                        log.info("%s: %s", outcome.utt, note)
                    entry = {"utt": outcome.utt, "sha256": outcome.sha256, "samples": outcome.n_samples,
                             "config": current_hash, "record": outcome.record, "input": inputs[outcome.utt]}
                    journal_file.write(json.dumps(entry) + "\n")
                    finished[outcome.utt] = entry
                    audio_seconds += outcome.input_seconds
            journal_file.flush()
            os.fsync(journal_file.fileno())
            bar.update(len(batch))
            elapsed = time.time() - started
            if elapsed > 0:
                bar.set_postfix_str(f"{audio_seconds / elapsed:.1f} s audio/s", refresh=False)
    if expected:
        raise RuntimeError(f"backend {backend.name!r} returned no outcome for {len(expected)} utterance(s), e.g. "
                           f"{sorted(expected)[:3]}")
    return audio_seconds
