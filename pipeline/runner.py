"""The batch runner: anonymise every utterance of a set, in parallel, resumably.

Output goes to ``<out>/<set><suffix>/`` in the VoicePrivacy layout (``wav/<utt>.wav``,
16-bit mono, plus the set's metadata with ``wav.scp`` and ``utt2dur`` rebuilt). Beside it:

- ``.journal.jsonl``: one line per finished utterance (sha256 of its WAV, samples,
  the parameters it drew, the configuration hash), appended and synced as each one
  finishes. A rerun skips an utterance whose WAV exists and whose hash matches its
  journal line for the same configuration, so a ``kill -9`` loses nothing written:
  WAVs are written to a temporary file and renamed, and an utterance whose WAV landed
  but whose journal line did not is simply redone (bit-identically).
- ``<name>/<utt>.xvector``: per-utterance vectors a stage chose to keep (B1's pseudo
  speakers), raw little-endian float32 as SSL-SAS reads them.
- ``failures.tsv``: ``utt  stage  error`` for every utterance that failed; the rest of
  the set is still processed and the exit code says that something failed.
- ``run.json``: configuration, package versions, timing and counts.
- ``.lock``: held while a run writes the set (:mod:`voxanon.data_prep.run_lock`); a second
  run into the same set fails at once, naming the first one's PID and host.

Every path built from an utterance id goes through :func:`voxanon.data_prep.paths.contained_path`,
so no id can make a run write outside its output folder.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import logging
import os
import platform
import queue
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from importlib import metadata
from multiprocessing import get_context
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import soundfile
from tqdm import tqdm

from voxanon.data_prep.atomic import atomic_write_bytes, atomic_write_text
from voxanon.data_prep.audio import AudioError, load_audio, to_pcm16
from voxanon.data_prep.corpus import DataDir, DataDirError, write_anonymised_dir
from voxanon.data_prep.digest import sha256_file
from voxanon.data_prep.errors import VoxanonError
from voxanon.data_prep.paths import contained_path
from voxanon.data_prep.run_lock import run_lock
from voxanon.pipeline.stages import Utterance
from voxanon.pipeline.systems import System, build_system, check_needs, config_hash

log = logging.getLogger(__name__)

JOURNAL = ".journal.jsonl"
FAILURES = "failures.tsv"
RUN_MANIFEST = "run.json"
REPORTED_PACKAGES = ("voxanon", "numpy", "scipy", "librosa", "soundfile", "soxr", "torch", "torchaudio")


@dataclass(frozen=True)
class Job:
    utt: str
    speaker: str
    gender: str | None
    source: str
    out_path: str


@dataclass
class Outcome:
    utt: str
    sha256: str | None = None
    n_samples: int = 0
    input_seconds: float = 0.0
    record: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed_stage: str | None = None
    error: str | None = None


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


def _wav_bytes(samples, sample_rate: int) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, to_pcm16(samples), sample_rate, subtype="PCM_16", format="WAV")
    return buffer.getvalue()


def _sha256_or_none(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None


@dataclass
class Prepared:
    """A job's utterance as loaded and taken through its system's first ``stages_done`` stages elsewhere
    (by the head start: :class:`_HeadStart`), with what loading it reported."""
    utterance: Utterance
    stages_done: int
    input_seconds: float
    notes: list[str]


def _load(system: System, job: Job, allow_pipes: bool) -> Prepared:
    """``job``'s audio as a fresh utterance of ``system``; raises :class:`AudioError`."""
    audio = load_audio(job.source, system.sample_rate, max_seconds=system.max_seconds, allow_pipe=allow_pipes)
    return Prepared(system.new_utterance(job.utt, job.speaker, job.gender, audio.samples), 0, audio.seconds,
                    audio.notes())


def process_jobs(system: System, jobs: list[Job], allow_pipes: bool,
                 prepared: dict[str, Prepared] | None = None) -> list[Outcome]:
    """Load, transform and write one batch; every failure is caught and attributed to a stage. An utterance
    in ``prepared`` starts where its preparation stopped."""
    outcomes = {job.utt: Outcome(job.utt) for job in jobs}
    ready: list[Prepared] = []
    for job in jobs:
        try:
            ready.append(prepared[job.utt] if prepared and job.utt in prepared else _load(system, job, allow_pipes))
        except AudioError as error:
            outcomes[job.utt].failed_stage, outcomes[job.utt].error = "load", error.reason
            continue
        outcomes[job.utt].input_seconds = ready[-1].input_seconds
        outcomes[job.utt].notes = ready[-1].notes
    utterances = [item.utterance for item in ready]
    stages_done = {item.utterance.utt_id: item.stages_done for item in ready}
    for index, stage in enumerate(system.stages):
        batch = [utt for utt in utterances if stages_done[utt.utt_id] <= index]
        try:
            stage.process_batch(batch)
        except Exception:
            # Isolate the utterance at fault: rerun the batch's members one at a time.
            for utt in batch:
                try:
                    stage.process_batch([utt])
                except Exception as error:
                    outcomes[utt.utt_id].failed_stage = stage.name
                    outcomes[utt.utt_id].error = f"{type(error).__name__}: {error}"
            utterances = [utt for utt in utterances if outcomes[utt.utt_id].error is None]
    by_id = {job.utt: job for job in jobs}
    for utt in utterances:
        outcome = outcomes[utt.utt_id]
        out_path = Path(by_id[utt.utt_id].out_path)
        try:
            # Vectors first: a WAV whose journal line landed implies its vectors did too.
            for name, vector in utt.vectors.items():
                path = contained_path(out_path.parent.parent, name, f"{utt.utt_id}.xvector")
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(path, np.asarray(vector, dtype="<f4").tobytes())
            data = _wav_bytes(utt.audio, system.sample_rate)
            atomic_write_bytes(out_path, data)
        except Exception as error:
            outcome.failed_stage, outcome.error = "write", f"{type(error).__name__}: {error}"
            continue
        outcome.sha256 = hashlib.sha256(data).hexdigest()
        outcome.n_samples = len(utt.audio)
        outcome.record = utt.record
    return [outcomes[job.utt] for job in jobs]


_worker_state: dict = {}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _reuse_freed_memory(single_threaded: bool = False) -> None:
    """glibc: serve allocations up to 32 MB from the heap and keep freed memory there for reuse; in a
    ``single_threaded`` process (a forked pool worker), every allocation, however large.

    By default glibc maps each allocation of more than a few MB afresh and unmaps it when freed, so every
    large tensor (HuBERT's first activations, 50 MB for 8 s, the vocoder's) costs page faults and zeroing on
    every utterance: an out-of-place GELU over a 50 MB tensor took 36 ms, in place 10 ms. Measured on one
    core, 6-10 s utterances: content about 10 % and vocoder about 5 % faster, for about 300 MB more resident
    memory (the peak working set stays mapped). 32 MB is glibc's largest threshold, and blocks above it must
    stay mappable where threads allocate (their arenas cannot grow past 64 MB); a process of one thread can
    do without mappings. Set once per process that runs batches; elsewhere than glibc nothing changes."""
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return
    import ctypes

    libc = ctypes.CDLL(None)
    libc.mallopt(-3, 32 << 20)     # M_MMAP_THRESHOLD (fixed, no longer adjusted as blocks are freed)
    libc.mallopt(-1, 2**31 - 1)    # M_TRIM_THRESHOLD: never give the heap's free top back
    if single_threaded:
        libc.mallopt(-4, 0)        # M_MMAP_MAX: no mappings at all


def _init_worker(config: dict, allow_pipes: bool, head_start_jobs: list[Job] | None = None) -> "_HeadStart | None":
    """Set up a process that runs batches (a spawned pool worker, a Ray actor, or the parent of forked
    workers): its system, with every stage's models loaded now rather than on its first batch.

    Given ``head_start_jobs`` (the parent of forked workers, in the order they will be taken), and a
    system that opens with model-free stages and then loads models, it starts a :class:`_HeadStart`
    on them once the model-free stages are loaded, and returns it."""
    _reuse_freed_memory()
    system = build_system(config)
    model_free = next((i for i, stage in enumerate(system.stages) if not stage.model_free), len(system.stages))
    for stage in system.stages[:model_free]:
        stage.load_models()
    head_start = (_HeadStart(system, model_free, head_start_jobs, allow_pipes)
                  if head_start_jobs and 0 < model_free < len(system.stages) else None)
    for stage in system.stages[model_free:]:
        stage.load_models()
    _worker_state["system"] = system
    _worker_state["allow_pipes"] = allow_pipes
    return head_start


def _die_with_parent() -> None:
    """Ask the kernel to kill this forked process when its parent dies (``PR_SET_PDEATHSIG``): it holds
    copies of the parent's files, the output lock's among them, and must not keep them (or the models'
    memory) after a killed run."""
    import ctypes
    import signal

    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


class _HeadStart:
    """A system's leading model-free stages (loading, peak normalisation, pYAAPT's F0) run over the jobs
    the pool will take last, in a process forked before the models load, while this process loads them.

    Loading the neural chain's models takes this process about 2 s (torch's import, the weights, the
    vocoder's plans) on one core, and the other core would idle until the workers start: there, it
    prepares the utterances at the end of the queue (the shortest, longest first): 9-10 of 20, about
    40 % of the F0 work of a 160 s set. Each batch takes the preparations ready when it is submitted
    (:meth:`take`); its worker starts those utterances after their prepared stages, with the same
    values (the stages are deterministic and the utterance's seeds travel with it). An utterance the
    head start could not prepare (bad audio, a stage's error) is left to its worker, which reports it.
    It takes no new job once the workers run (:meth:`stop`) and is ended with the run (:meth:`close`).
    (At the lowest priority it prepared a quarter fewer utterances, and the run was no faster.)"""

    def __init__(self, system: System, stages: int, jobs: list[Job], allow_pipes: bool):
        context = get_context("fork")
        # A queue, not a bare pipe: its feeder thread holds what this process has not read yet, so the
        # head start never waits for it (this process reads only when it submits a batch).
        self._results = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(target=_head_start, daemon=True,
                                        args=(system, stages, jobs[::-1], allow_pipes, self._results, self._stop))
        self._process.start()
        self._ready: dict[str, Prepared] = {}

    def take(self, jobs: list[Job]) -> dict[str, Prepared]:
        """The preparations of ``jobs`` that have arrived (each handed out once)."""
        while True:
            try:
                prepared = self._results.get_nowait()
            except queue.Empty:
                break
            self._ready[prepared.utterance.utt_id] = prepared
        return {job.utt: self._ready.pop(job.utt) for job in jobs if job.utt in self._ready}

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Ends the head start, whatever it still holds: every job has been submitted."""
        self._process.kill()
        self._process.join()
        self._results.close()


def _head_start(system: System, stages: int, jobs: list[Job], allow_pipes: bool, results, stop) -> None:
    _die_with_parent()
    for job in jobs:
        if stop.is_set():
            break
        try:
            prepared = _load(system, job, allow_pipes)
            for stage in system.stages[:stages]:
                stage.process_batch([prepared.utterance])
        except Exception:  # the job's worker meets the same failure and reports it
            continue
        prepared.stages_done = stages
        results.put(prepared)


def _init_forked_worker() -> None:
    """A forked worker: one torch thread (the pool gives the parallelism), and gone with its parent."""
    _die_with_parent()
    os.environ.update({name: "1" for name in THREAD_VARIABLES})
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    _reuse_freed_memory(single_threaded=True)


def _worker_process(jobs: list[Job], prepared: dict[str, Prepared] | None = None) -> list[Outcome]:
    return process_jobs(_worker_state["system"], jobs, _worker_state["allow_pipes"], prepared)


def batch_invariant(config: dict) -> bool:
    """Whether the system's output is the same however its utterances are batched: on the CPU every stage
    processes an utterance on its own; on another device the neural stages run padded batches, equal to
    one at a time only to float rounding."""
    return all(str((config.get(stage) or {}).get("device", "cpu")) == "cpu" for stage in config.get("stages", []))


def _parallel_batches(batches: list[list[Job]], workers: int, config: dict) -> list[list[Job]]:
    """The batches split so that each worker gets at least eight: a small set's last batch must not run
    alone while the other workers idle (20 utterances in batches of 4 on 2 workers: 3 batches for one,
    2 for the other, which then idled a third of the run). Only where the output does not depend on the
    batching (:func:`batch_invariant`), so that it never depends on the worker count or the backend."""
    if not batch_invariant(config):
        return batches
    jobs = [job for batch in batches for job in batch]
    size = max(1, min(max(map(len, batches), default=1), len(jobs) // (8 * workers)))
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


def _run_parallel(config: dict, batches: list[list[Job]], workers: int,
                  allow_pipes: bool) -> Iterator[Outcome]:
    """Outcomes of ``batches`` from a pool of ``workers`` processes, one torch thread each.

    On Linux the models are loaded once, here, and the workers are forked from this process:
    they share the loaded weights (copy-on-write) and start at once, where spawned workers each
    imported torch and loaded every model again (about 12 s of both cores for the neural chain).
    The pool starts now, before the caller's progress bar starts a thread. Elsewhere, or when this
    process already runs other threads (a forked child inherits their locks as they were, held or not),
    workers are spawned and each loads the system itself.
    """
    batches = _parallel_batches(batches, workers, config)
    if sys.platform == "linux" and threading.active_count() == 1:
        # Not THP_MEM_ALLOC_ENABLE here: forked workers keep every block on their heap
        # (_reuse_freed_memory), so huge pages only slow the first touch of each block; measured on the
        # neural chain, each worker's first two utterances took 0.3-0.4 s longer in HuBERT, and the set
        # 0.8 s longer, with them.
        head_start = _init_worker(config, allow_pipes, [job for batch in batches for job in batch])
        pool = ProcessPoolExecutor(workers, mp_context=get_context("fork"), initializer=_init_forked_worker)
        return _pool_outcomes(pool, batches, workers, head_start)
    # One thread per worker process (torch reads OMP_NUM_THREADS at import); THP_MEM_ALLOC_ENABLE puts
    # torch's large CPU buffers on huge pages, which spawned workers map afresh for each block above 32 MB
    # (2-8 % faster neural chains, measured). The workers start with the first batches, submitted before
    # this returns.
    with _environment({name: "1" for name in (*THREAD_VARIABLES, "THP_MEM_ALLOC_ENABLE")}):
        pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init_worker,
                                   initargs=(config, allow_pipes))
        return _pool_outcomes(pool, batches, workers)


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` for the block (for what is imported or started in it), then as before."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _pool_outcomes(pool: ProcessPoolExecutor, batches: list[list[Job]], workers: int,
                   head_start: _HeadStart | None = None) -> Iterator[Outcome]:
    """Submits the first batches now (which starts the pool's processes) and yields outcomes as they come;
    each batch goes with what ``head_start`` has prepared of it by then."""
    queue = iter(batches)

    def submit(batch: list[Job]):
        return pool.submit(_worker_process, batch, head_start.take(batch) if head_start else None)

    pending = {submit(batch) for _, batch in zip(range(workers * 3), queue)}
    if head_start:
        head_start.stop()

    def outcomes() -> Iterator[Outcome]:
        nonlocal pending
        try:
            with pool:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        yield from future.result()
                        batch = next(queue, None)
                        if batch is not None:
                            pending.add(submit(batch))
        finally:
            if head_start:
                head_start.close()
    return outcomes()


class LocalBackend:
    """Batches in this process (one worker) or in a pool of ``workers`` local processes."""

    name = "local"

    def __init__(self, workers: int = 1):
        self.workers = max(1, workers)

    def describe(self) -> dict:
        return {"name": self.name, "workers": self.workers, "cpus": os.cpu_count()}

    def outcomes(self, config: dict, batches: list[list[Job]], allow_pipes: bool, output_dir: Path
                 ) -> Iterator[Outcome]:
        if self.workers > 1 and len(batches) > 1:
            return _run_parallel(config, batches, self.workers, allow_pipes)
        _reuse_freed_memory()
        system = build_system(config)
        return (o for batch in batches for o in process_jobs(system, batch, allow_pipes))


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


def _longest_first(jobs: list[Job], data: DataDir) -> list[Job]:
    """``jobs`` longest first (ties in set order), so that parallel workers finish together: in set order a
    long utterance met last runs alone while the other workers idle (20 utterances of 6-10 s on 2 workers:
    4.5 s of one idle core in a 50 s run). Lengths from ``utt2dur`` when it covers every job, else the
    files' sizes; a pipe's length is unknown and goes last. The output never depends on the order."""
    if all(job.utt in data.utt2dur for job in jobs):
        length = {job.utt: data.utt2dur[job.utt] for job in jobs}
    else:
        length = {job.utt: 0 if data.is_pipe(job.utt) else _size_or_zero(job.source) for job in jobs}
    return sorted(jobs, key=lambda job: -length[job.utt])


def _size_or_zero(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # reported as a load failure when the job runs


def prepare_set(system: System, data: DataDir, work_dir: Path, progress: bool = True) -> dict:
    """The system's configuration with every stage's set-level options (:meth:`Stage.prepare_set`) merged in."""
    config = copy.deepcopy(system.config)
    for stage in system.stages:
        options = stage.prepare_set(data, work_dir, progress)
        if options:
            config[stage.name] = {**(config.get(stage.name) or {}), **options}
    return config


def anonymise_set(data: DataDir, config: dict, out_dir: Path, *, workers: int = 1, resume: bool = True,
                  allow_pipes: bool = False, progress: bool = True, backend=None) -> SetResult:
    """Anonymise one data set into ``out_dir`` (see the module doc for what lands there).

    ``backend`` runs the batches and yields their outcomes (default ``LocalBackend(workers)``;
    :class:`voxanon.pipeline.ray_backend.RayBackend` for a cluster); whichever it is, this
    process alone writes the journal, ``failures.tsv``, ``run.json`` and the metadata.
    """
    backend = backend if backend is not None else LocalBackend(workers)
    system = build_system(config)
    check_needs(system)
    problems = [p for p in data.validate(check_files=False, need_gender=system.needs_gender)]
    if problems:
        raise DataDirError(str(data.path or data.name), problems)
    backend_info = backend.describe()    # joins a cluster before anything is written
    out_dir = Path(out_dir)
    with run_lock(out_dir):  # a second run into the same set fails at once, naming this one
        return _anonymise_locked(data, system, out_dir, backend, backend_info, resume, allow_pipes, progress)


def _anonymise_locked(data: DataDir, system: System, out_dir: Path, backend, backend_info: dict, resume: bool,
                      allow_pipes: bool, progress: bool) -> SetResult:
    config = prepare_set(system, data, out_dir / ".prepared", progress)
    system = build_system(config)
    wav_dir = out_dir / "wav"
    wav_dir.mkdir(parents=True, exist_ok=True)
    current_hash = config_hash(config)
    journal_path = out_dir / JOURNAL
    if not resume and journal_path.exists():
        journal_path.unlink()
    journal = read_journal(journal_path, current_hash)
    finished = {utt: entry for utt, entry in journal.items()
                if utt in data.wav and _sha256_or_none(contained_path(wav_dir, f"{utt}.wav")) == entry["sha256"]}
    jobs = [Job(utt, data.utt2spk[utt], data.spk2gender.get(data.utt2spk[utt]),
                data.wav[utt] if data.is_pipe(utt) else str(data.audio_path(utt)),
                str(contained_path(wav_dir, f"{utt}.wav")))
            for utt in data.utterances if utt not in finished]
    if backend_info["workers"] > 1:
        jobs = _longest_first(jobs, data)
    batches = [jobs[i:i + system.batch_size] for i in range(0, len(jobs), system.batch_size)]
    started = time.time()
    manifest = {
        "system": system.name, "config": config, "config_hash": current_hash,
        "data": str(data.path.resolve()) if data.path else data.name, "out": str(out_dir.resolve()),
        "workers": backend_info["workers"], "backend": backend_info, "versions": package_versions(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)), "status": "running",
    }
    atomic_write_text(out_dir / RUN_MANIFEST, json.dumps(manifest, indent=2) + "\n")
    if finished:
        log.info("%s: resuming, %d of %d utterances already done", data.name, len(finished), len(data.wav))

    failures: list[Outcome] = []
    audio_seconds = 0.0
    outcomes = backend.outcomes(config, batches, allow_pipes, wav_dir)
    reported: set[str] = set()
    bar = tqdm(total=len(data.wav), initial=len(finished), unit="utt", desc=f"{system.name} {data.name}",
               disable=not progress, dynamic_ncols=True)
    with open(journal_path, "a", encoding="utf-8") as journal_file:
        for outcome in outcomes:
            # A batch a lost worker had partly done may come back twice: the first report counts.
            if outcome.utt in reported:
                continue
            reported.add(outcome.utt)
            if outcome.error is not None:
                failures.append(outcome)
                bar.write(f"FAILED {outcome.utt} [{outcome.failed_stage}]: {outcome.error}")
            else:
                for note in outcome.notes:
                    log.info("%s: %s", outcome.utt, note)
                entry = {"utt": outcome.utt, "sha256": outcome.sha256, "samples": outcome.n_samples,
                         "config": current_hash, "record": outcome.record}
                journal_file.write(json.dumps(entry) + "\n")
                journal_file.flush()
                os.fsync(journal_file.fileno())
                finished[outcome.utt] = entry
                audio_seconds += outcome.input_seconds
            bar.update(1)
            elapsed = time.time() - started
            if elapsed > 0:
                bar.set_postfix_str(f"{audio_seconds / elapsed:.1f} s audio/s", refresh=False)
    bar.close()

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
