"""``--backend ray``: the runner's batches (and evaluation's feature batches) on a Ray cluster.

Design (see also the README's "Scaling out"): a pool of Ray *actors*, each building the
system once (the runner's own ``_init_worker``) and then calling the runner's
``process_jobs`` on one batch per task, so an utterance goes through exactly the code the
local backend runs and its bytes are the same. The driver (this process) keeps the only
journal, ``failures.tsv``, ``run.json`` and Kaldi metadata; workers write only their
utterances' WAVs and vectors, atomically, into the output folder, which must therefore be
on storage every node sees (NFS, Lustre, or a local disk for a one-machine cluster).

Fault tolerance is the driver's: actors restart in place after their process or node dies
(``max_restarts=-1``, placed wherever the cluster has room) and a task lost with its actor
is not retried by Ray (``max_task_retries=0``) but handed back to the queue, so it goes to
the next free actor at once instead of waiting for the dead one's restart. A batch lost
``ATTEMPTS`` times is split into single utterances; an utterance lost ``ATTEMPTS`` times is
a failure (stage ``worker``), never a stopped job. The runner drops any outcome of an
utterance it has already journaled, so nothing is written twice.

``ray`` is imported only here, inside the functions that run a job.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator

from voxanon.data_prep.errors import VoxanonError

log = logging.getLogger(__name__)

BACKENDS = ("local", "ray")
# The driver's settings a worker must share: where models live, offline hubs.
SHARED_ENVIRONMENT = ("VOXANON_HOME", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM")
ATTEMPTS = 3
IN_FLIGHT = 2          # batches queued on one actor at a time
CONNECT_TIMEOUT_S = 10.0


def add_backend_arguments(parser: argparse.ArgumentParser, workers_help: str) -> None:
    """The execution options: ``--backend``, ``--ray-address``, ``--workers``, ``--cpus-per-worker``,
    ``--gpus-per-worker`` and ``--batch-size``."""
    group = parser.add_argument_group("execution backend")
    group.add_argument("--backend", choices=BACKENDS, default="local",
                       help="where the per-utterance work runs: this machine (default) or a Ray cluster")
    group.add_argument("--ray-address", metavar="HOST:PORT",
                       help="Ray cluster to join (default: $RAY_ADDRESS if set, else a Ray instance started on "
                            "this machine); inputs and outputs must be on a path every node sees")
    group.add_argument("--workers", type=int, metavar="N", help=workers_help)
    group.add_argument("--cpus-per-worker", type=float, default=1.0, metavar="C",
                       help="CPUs reserved by each Ray worker (default 1)")
    group.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G",
                       help="GPUs reserved by each Ray worker; a fraction (e.g. 0.25) fits several on one GPU "
                            "(default 0)")
    group.add_argument("--batch-size", type=int, metavar="N",
                       help="utterances per batch, i.e. per worker task (default: the recipe's or protocol's)")


def backend_from_args(args: argparse.Namespace):
    """The backend the options name: ``None`` for local, else a :class:`RayBackend` (not yet connected)."""
    for name in ("workers", "batch_size"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise VoxanonError(f"--{name.replace('_', '-')} must be at least 1, not {value}")
    if args.backend == "local":
        return None
    if args.cpus_per_worker < 0 or args.gpus_per_worker < 0:
        raise VoxanonError("--cpus-per-worker and --gpus-per-worker cannot be negative")
    return RayBackend(RayOptions(address=args.ray_address or os.environ.get("RAY_ADDRESS") or None,
                                 workers=args.workers, cpus_per_worker=args.cpus_per_worker,
                                 gpus_per_worker=args.gpus_per_worker))


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None          # None: start a Ray instance on this machine
    workers: int | None = None          # None: as many as the cluster's CPUs (or GPUs) hold
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0


def _check_reachable(address: str) -> None:
    """Fail fast, in one line, when nothing listens at ``host:port`` (ray.init would retry for minutes)."""
    if address in ("auto", "local") or "://" in address:
        return
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit():
        raise VoxanonError(f"--ray-address {address!r}: expected HOST:PORT (e.g. 10.0.0.1:6379)")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as error:
        raise VoxanonError(f"cannot reach a Ray cluster at {address}: {error.strerror or error} (start one with "
                           "'ray start --head', or leave out --ray-address for a local instance)") from None


class _Worker:
    """One Ray actor: builds its work function once (``make()``), then runs it on one batch per task."""

    def __init__(self, make: Callable[[], Callable[[list], list]]):
        self._work = make()

    def ready(self, shared_path: str | None) -> dict:
        import ray

        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "sees_shared_path": shared_path is None or os.path.isdir(shared_path)}

    def work(self, batch: list) -> list:
        return self._work(batch)


def _system_worker(config: dict, allow_pipes: bool) -> Callable[[list], list]:
    from voxanon.pipeline import runner

    runner.load_worker(config, allow_pipes)
    return runner._worker_process


@dataclass
class _Task:
    batch: list
    attempts: int = 0


class RayBackend:
    """Batches on Ray actors (see the module doc). Connects on first use; the connection is kept."""

    name = "ray"

    def __init__(self, options: RayOptions = RayOptions()):
        self.options = options
        self.connect_seconds = None   # how long joining (or starting, when local) the cluster took

    def connect(self) -> None:
        import ray

        if ray.is_initialized():
            return
        if self.options.address is not None:
            _check_reachable(self.options.address)
        else:
            # Ray runs its workers at nice 15 by default; the local backend's processes run at the
            # user's priority, and so do the workers of the instance started here.
            os.environ.setdefault("RAY_worker_niceness", "0")
        started = time.time()
        try:
            # "local" starts a new instance even where another one runs on this machine (plain ray.init()
            # would join the last cluster started here).
            ray.init(address=self.options.address or "local", include_dashboard=False, logging_level=logging.WARNING,
                     log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as error:
            message = " ".join(str(error).split())
            raise VoxanonError(f"cannot join the Ray cluster at {self.options.address or 'local'}: "
                               f"{message[:300]}") from None
        self.connect_seconds = round(time.time() - started, 3)

    def describe(self) -> dict:
        """What run.json records: the backend, its options and the cluster's resources (connects)."""
        import ray

        self.connect()
        resources = ray.cluster_resources()
        return {"name": self.name, "address": ray.get_runtime_context().gcs_address,
                "workers": self._worker_count(1 << 30), "cpus_per_worker": self.options.cpus_per_worker,
                "gpus_per_worker": self.options.gpus_per_worker,
                "nodes": sum(1 for node in ray.nodes() if node.get("Alive")), "connect_seconds": self.connect_seconds,
                "resources": {key: resources[key] for key in ("CPU", "GPU", "memory", "object_store_memory")
                              if key in resources}}

    def _worker_count(self, batches: int) -> int:
        import ray

        if self.options.workers is not None:
            return max(1, min(self.options.workers, batches))
        resources = ray.cluster_resources()
        fits = []
        if self.options.cpus_per_worker > 0:
            fits.append(int(resources.get("CPU", 0) // self.options.cpus_per_worker))
        if self.options.gpus_per_worker > 0:
            fits.append(int(resources.get("GPU", 0) // self.options.gpus_per_worker))
        return max(1, min(min(fits) if fits else 1, batches))

    def check_devices(self, system, streaming: bool) -> None:
        """Before anything is written: a stage on a CUDA device needs a cluster with GPUs."""

    def close(self) -> None:
        """Ends the actors this backend started."""

    def outcomes(self, system, batches: list[list], allow_pipes: bool, output_dir, streaming=None):
        """The runner's outcomes of ``batches``, a list per batch (any order); a batch lost too often comes
        back as failures."""
        return contextlib.closing(self._outcomes(system.config, batches, allow_pipes, output_dir))

    def _outcomes(self, config: dict, batches: list[list], allow_pipes: bool, output_dir) -> Iterator:
        from voxanon.pipeline.runner import Outcome, _parallel_batches

        self.connect()
        # Split as the local pool does, so that no actor idles while another runs a small set's last batch.
        batches = _parallel_batches(batches, self._worker_count(len(batches)), config)
        make = functools.partial(_system_worker, config, allow_pipes)
        for batch, results, error in self.map_batches(make, batches, str(output_dir)):
            if error is None:
                yield results
            else:
                yield [Outcome(job.utt, failed_stage="worker", error=error) for job in batch]

    def map_batches(self, make: Callable[[], Callable[[list], list]], batches: list[list],
                    shared_path: str | None = None) -> Iterator[tuple[list, list | None, str | None]]:
        """``(batch, make()(batch), None)`` for each batch, run on actors that each call ``make`` once;
        ``(batch, None, message)`` for a batch whose workers died ``ATTEMPTS`` times. Completion order."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError, WorkerCrashedError

        if not batches:
            return
        self.connect()
        # As the local pool's processes: parallelism from workers, BLAS threads only as many as reserved
        # CPUs, torch's big buffers on huge pages.
        threads = str(max(1, int(self.options.cpus_per_worker)))
        env_vars = {"OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
                    "THP_MEM_ALLOC_ENABLE": "1",
                    **{name: os.environ[name] for name in SHARED_ENVIRONMENT if name in os.environ}}
        actor_class = ray.remote(_Worker).options(
            num_cpus=self.options.cpus_per_worker, num_gpus=self.options.gpus_per_worker,
            max_restarts=-1, max_task_retries=0, runtime_env={"env_vars": env_vars})
        # ``make`` goes by value (small: a configuration), so a restarted actor never misses it.
        created = time.time()
        actors = [actor_class.remote(make) for _ in range(self._worker_count(len(batches)))]
        started_once: set[int] = set()
        probes = {actor.ready.remote(shared_path): actor for actor in actors}
        probe_failures = {id(actor): 0 for actor in actors}
        start_error = ""
        ready: dict[int, object] = {}                    # actors up, by id
        in_flight = {id(actor): 0 for actor in actors}
        running: dict = {}
        queue = deque(_Task(batch) for batch in batches)

        def dispatch() -> None:
            # A second batch queued on a busy actor hides the driver's round trip; near the end of the
            # queue only idle actors get work, so no batch waits behind another while an actor idles.
            while queue:
                free = [actor for key, actor in ready.items() if in_flight[key] < IN_FLIGHT]
                if not free:
                    return
                actor = min(free, key=lambda candidate: in_flight[id(candidate)])
                if in_flight[id(actor)] and len(queue) <= len(ready):
                    return
                task = queue.popleft()
                running[actor.work.remote(task.batch)] = (actor, task)
                in_flight[id(actor)] += 1

        def probe(actor) -> None:
            ready.pop(id(actor), None)
            if actor not in probes.values():
                probes[actor.ready.remote(shared_path)] = actor

        try:
            while queue or running:
                dispatch()
                if not running and not probes:
                    raise VoxanonError(f"every Ray worker failed to start ({len(queue)} batch(es) left): "
                                       f"{start_error}")
                (ref,), _ = ray.wait(list(running) + list(probes), num_returns=1)
                if ref in probes:
                    actor = probes.pop(ref)
                    try:
                        info = ray.get(ref)
                    except (RayActorError, RayTaskError) as error:
                        probe_failures[id(actor)] += 1
                        if probe_failures[id(actor)] < ATTEMPTS:
                            probe(actor)
                        else:
                            start_error = _first_line(error)
                            log.warning("a Ray worker could not start: %s", start_error)
                        continue
                    if not info["sees_shared_path"]:
                        raise VoxanonError(f"Ray node {info['node']} does not see {shared_path}: inputs and outputs "
                                           "must be on storage every node mounts at the same path")
                    probe_failures[id(actor)] = 0
                    ready[id(actor)] = actor
                    if id(actor) not in started_once:
                        started_once.add(id(actor))
                        if len(started_once) == len(actors):
                            log.info("%d Ray worker(s) up after %.1f s", len(actors), time.time() - created)
                    continue
                actor, task = running.pop(ref)
                in_flight[id(actor)] = max(0, in_flight[id(actor)] - 1)
                try:
                    results = ray.get(ref)
                except (RayActorError, WorkerCrashedError, RayTaskError) as error:
                    task.attempts += 1
                    message = _first_line(error)
                    log.warning("Ray worker lost a batch of %d (attempt %d): %s", len(task.batch), task.attempts,
                                message)
                    if not isinstance(error, RayTaskError):   # else the actor lives; the batch itself failed
                        probe(actor)                          # back once restarted
                    if task.attempts < ATTEMPTS:
                        queue.appendleft(task)
                    elif len(task.batch) > 1:
                        queue.extendleft(_Task([item]) for item in reversed(task.batch))
                    else:
                        yield task.batch, None, f"worker lost it {task.attempts} times: {message}"
                    continue
                yield task.batch, results, None
        finally:
            for actor in actors:
                ray.kill(actor, no_restart=True)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]
