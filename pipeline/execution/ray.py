"""``--backend ray``: the runner's batches (and evaluation's feature batches) on a Ray cluster.

Design (see also the README's "Scaling out"): pools of Ray *actors*, one pool per resource shape (CPUs
and GPUs per actor), kept for the backend's life, so for the whole command: ``evaluate`` and
``benchmark`` call :meth:`RayBackend.map_batches` once per set and side, and the same actors serve each
call. An actor builds each *work function* it is given once (``make()``: the runner's system with its
models loaded, an embedder) and keeps the last few, by the digest of ``make``; a call with a work
function the actors already hold reloads nothing. Under the pool executor an actor calls the runner's
``process_jobs`` on one batch per task; under the streaming executor (:mod:`voxanon.pipeline.execution.streaming`)
CPU actors load, prepare (F0) and write, and one device actor per GPU runs the model stages; both call
the runner's per-utterance functions, so an utterance goes through exactly the code the local backend
runs and its bytes are the same. The driver (this process) keeps the only journal, ``failures.tsv``,
``run.json`` and Kaldi metadata; workers write only their utterances' WAVs and vectors, atomically,
into the output folder, which must therefore be on storage every node sees (NFS, Lustre, or a local disk
for a one-machine cluster).

Fault tolerance is the driver's: actors restart in place after their process or node dies
(``max_restarts=-1``, placed wherever the cluster has room) and a task lost with its actor
is not retried by Ray (``max_task_retries=0``) but handed back to the queue, so it goes to
the next free actor at once instead of waiting for the dead one's restart. A batch lost
``ATTEMPTS`` times is split into single utterances; an utterance lost ``ATTEMPTS`` times is
a failure (stage ``worker``), never a stopped job. A work function that cannot be built (models
that do not load, a missing device) is the run's fault: one message, no retry.

``ray`` is imported only here, inside the functions that run a job.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import socket
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ...data_prep.errors import VoxanonError
from ..systems.stage import RunFault, one_line


log = logging.getLogger(__name__)

# The driver's settings a worker must share: where models live, offline hubs.
SHARED_ENVIRONMENT = ("VOXANON_HOME", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM")
ATTEMPTS = 3
IN_FLIGHT = 2          # tasks queued on one actor at a time
CONNECT_TIMEOUT_S = 10.0
WORKS_KEPT = 2         # work functions an actor keeps built (evaluate alternates an embedder and a transcriber)


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
    """One Ray actor: builds each work function it is sent once (``make()``, kept by key, the last
    ``WORKS_KEPT``) and runs it on one task's arguments."""

    def __init__(self):
        self._works: OrderedDict[str, Callable] = OrderedDict()
        self._paths_seen: set[str] = set()

    def ready(self) -> dict:
        import ray

        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}

    def work(self, key: str, make_holder: list, shared_path: str | None, *args):
        """``make()(*args)``, ``make`` coming as the only item of ``make_holder`` (an object reference, fetched
        only when this actor has not built the work function yet)."""
        if shared_path is not None and shared_path not in self._paths_seen:
            if not os.path.isdir(shared_path):
                import ray

                raise RunFault(f"Ray node {ray.get_runtime_context().get_node_id()} does not see {shared_path}: "
                               "inputs and outputs must be on storage every node mounts at the same path")
            self._paths_seen.add(shared_path)
        if key not in self._works:
            import ray

            make = ray.get(make_holder[0])
            try:
                self._works[key] = make()
            except RunFault:
                raise
            except Exception as error:
                raise RunFault(f"a Ray worker could not set up its work: {one_line(error)}") from None
            while len(self._works) > WORKS_KEPT:
                self._works.popitem(last=False)
        self._works.move_to_end(key)
        return self._works[key](*args)


def _system_worker(config: dict, allow_pipes: bool) -> Callable[[list], list]:
    """The pool executor's work function: the runner's ``process_jobs`` on this actor's system."""
    from . import batches, workers

    workers.load_worker(config, allow_pipes)
    return functools.partial(batches.process_jobs, workers.worker_system(), allow_pipes=allow_pipes)


def _lane_worker(config: dict, allow_pipes: bool, start: int, stop: int) -> Callable:
    """A streaming lane's work function: the system with the models of its stages ``start`` to ``stop``
    loaded; then, per task, ``prepare`` (load and the CPU stages), ``device`` (the device stages on one
    planned batch) or ``write``."""
    from . import streaming, workers

    workers.load_worker(config, allow_pipes, (start, stop))
    system = workers.worker_system()

    def work(step: str, *args):
        if step == "prepare":
            return streaming.prepare(system, args[0], allow_pipes, stop)
        if step == "device":
            return streaming.run_device(system, args[0], start, list(args[1:]))
        return streaming.write(system, args[0])
    return work


@dataclass
class _Call:
    """A task for a pool: which work function, its arguments, and what the caller tags it with."""
    work: tuple[str, list]          # (key, make holder)
    args: tuple
    tag: Any
    shared_path: str | None = None
    num_returns: int = 1
    attempts: int = 0


@dataclass
class _Done:
    call: _Call
    value: Any = None               # the result (the timing, for two returns: then ``payload`` is a reference)
    payload: Any = None
    error: str | None = None        # lost with its actor, or failed in it: the call may be tried again


@dataclass
class _ActorPool:
    """Actors of one resource shape, started as needed (up to the cluster's room) and kept until closed."""
    cpus: float
    gpus: float
    env_vars: dict
    actors: list = field(default_factory=list)
    ready: dict = field(default_factory=dict)          # id -> actor, up
    probes: dict = field(default_factory=dict)         # probe reference -> actor
    probe_failures: dict = field(default_factory=dict)
    in_flight: dict = field(default_factory=dict)
    queue: deque = field(default_factory=deque)
    running: dict = field(default_factory=dict)        # reference waited on -> (actor, call, payload reference)
    start_error: str = ""
    created: float = 0.0

    def grow(self, count: int) -> None:
        import ray

        actor_class = ray.remote(_Worker).options(num_cpus=self.cpus, num_gpus=self.gpus, max_restarts=-1,
                                                  max_task_retries=0, runtime_env={"env_vars": self.env_vars})
        self.created = self.created or time.time()
        while len(self.actors) < count:
            actor = actor_class.remote()
            self.actors.append(actor)
            self.in_flight[id(actor)] = self.probe_failures[id(actor)] = 0
            self._probe(actor)

    def _probe(self, actor) -> None:
        self.ready.pop(id(actor), None)
        if actor not in self.probes.values():
            self.probes[actor.ready.remote()] = actor

    def submit(self, call: _Call) -> None:
        self.queue.append(call)
        self.dispatch()

    def dispatch(self) -> None:
        # A second task queued on a busy actor hides the driver's round trip; near the end of the queue
        # only idle actors get work, so no task waits behind another while an actor idles.
        while self.queue:
            free = [actor for key, actor in self.ready.items() if self.in_flight[key] < IN_FLIGHT]
            if not free:
                return
            actor = min(free, key=lambda candidate: self.in_flight[id(candidate)])
            if self.in_flight[id(actor)] and len(self.queue) <= len(self.ready):
                return
            call = self.queue.popleft()
            refs = actor.work.options(num_returns=call.num_returns).remote(*call.work, call.shared_path, *call.args)
            if call.num_returns == 1:
                self.running[refs] = (actor, call, None)
            else:
                self.running[refs[1]] = (actor, call, refs[0])
            self.in_flight[id(actor)] += 1

    def cancel(self, tags: set) -> None:
        """Drops the queued calls of ``tags`` (those running finish; their results are not waited for)."""
        self.queue = deque(call for call in self.queue if call.tag not in tags)
        for ref, (_, call, _) in list(self.running.items()):
            if call.tag in tags:
                self.running[ref] = (self.running[ref][0], None, None)

    def refs(self) -> list:
        if self.queue and not self.running and not self.probes and not self.ready:
            raise VoxanonError(f"every Ray worker failed to start ({len(self.queue)} task(s) left): "
                               f"{self.start_error}")
        return [*self.running, *self.probes]

    def handle(self, ref) -> _Done | None:
        """What became of ``ref``: a finished or lost call, or None (an actor's start, or a call no one waits
        for any longer). A :class:`RunFault` in the actor is raised here."""
        import ray
        from ray.exceptions import RayError, RayTaskError

        if ref in self.probes:
            actor = self.probes.pop(ref)
            try:
                ray.get(ref)
            except RayError as error:
                self.probe_failures[id(actor)] += 1
                if self.probe_failures[id(actor)] < ATTEMPTS:
                    self._probe(actor)
                else:
                    self.start_error = _first_line(error)
                    log.warning("a Ray worker could not start: %s", self.start_error)
                return None
            self.probe_failures[id(actor)] = 0
            self.ready[id(actor)] = actor
            if len(self.ready) == len(self.actors):
                log.info("%d Ray worker(s) up after %.1f s", len(self.actors), time.time() - self.created)
            self.dispatch()
            return None
        actor, call, payload = self.running.pop(ref)
        self.in_flight[id(actor)] = max(0, self.in_flight[id(actor)] - 1)
        try:
            value = ray.get(ref)
        except RayError as error:
            cause = getattr(error, "cause", None)
            if isinstance(error, RayTaskError) and isinstance(cause, RunFault):
                raise RunFault(str(cause)) from None
            if not isinstance(error, RayTaskError):   # else the actor lives; the call itself failed
                self._probe(actor)                     # back once restarted
            self.dispatch()
            return None if call is None else _Done(call, error=_first_line(error))
        self.dispatch()
        return None if call is None else _Done(call, value, payload)

    def kill(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors.clear()
        self.ready.clear()
        self.probes.clear()
        self.running.clear()
        self.queue.clear()


def _wait(pools: list[_ActorPool]) -> tuple[_ActorPool, Any]:
    """The pool and reference of the next thing to finish among ``pools``' tasks and actor starts."""
    import ray

    owners = {ref: pool for pool in pools for ref in pool.refs()}
    (ref,), _ = ray.wait(list(owners), num_returns=1)
    return owners[ref], ref


class RayBackend:
    """Batches on Ray actors (see the module doc). Connects on first use; the connection, and the actors,
    are kept until :meth:`close` (or the end of a ``with`` block, or of the process)."""

    name = "ray"

    def __init__(self, options: RayOptions = RayOptions()):
        self.options = options
        self.connect_seconds = None   # how long joining (or starting, when local) the cluster took
        self._pools: dict[tuple[float, float], _ActorPool] = {}
        self._works: dict[str, list] = {}

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
        if self.options.address is None:
            # The instance started here is this process's: if it is killed, its agents and workers would wait
            # minutes for the raylet; the reaper ends them within seconds.
            from .orphan_reaper import start_reaper

            start_reaper()

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
        """Before anything is written: a stage on a CUDA device needs a cluster with a GPU (each actor that
        runs it checks its own before taking work)."""
        import ray

        if any(stage.device.startswith("cuda") for stage in system.stages):
            self.connect()
            if ray.cluster_resources().get("GPU", 0) <= 0:
                raise VoxanonError(f"--device {next(s.device for s in system.stages if s.device.startswith('cuda'))}"
                                   f": the Ray cluster at {ray.get_runtime_context().gcs_address} has no GPU")

    def _pool(self, cpus: float, gpus: float, count: int) -> _ActorPool:
        """The pool of actors of this shape, grown to ``count`` actors."""
        key = (float(cpus), float(gpus))
        if key not in self._pools:
            from .workers import THREAD_VARIABLES

            # As the local pool's processes: parallelism from workers, one CPU thread each whatever the CPUs
            # reserved (workers.one_cpu_thread: the bytes must not depend on the thread count), torch's big
            # buffers on huge pages.
            env_vars = {**{name: "1" for name in THREAD_VARIABLES}, "THP_MEM_ALLOC_ENABLE": "1",
                        **{name: os.environ[name] for name in SHARED_ENVIRONMENT if name in os.environ}}
            self._pools[key] = _ActorPool(cpus, gpus, env_vars)
        self._pools[key].grow(count)
        return self._pools[key]

    def _work(self, make: Callable) -> tuple[str, list]:
        """``make``'s key (the digest of its pickle: equal work functions share one) and its holder (a list
        around its object reference, which Ray passes to the actor unresolved)."""
        import ray
        from ray import cloudpickle

        key = hashlib.sha256(cloudpickle.dumps(make)).hexdigest()
        if key not in self._works:
            self._works[key] = [ray.put(make)]
        return key, self._works[key]

    def close(self) -> None:
        """Ends the actors this backend started (they also end with this process)."""
        for pool in self._pools.values():
            pool.kill()
        self._pools.clear()
        self._works.clear()

    def __enter__(self) -> "RayBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def outcomes(self, system, batches: list[list], allow_pipes: bool, output_dir, streaming=None):
        """The runner's outcomes of ``batches``, a list per batch (any order), from an object to close once
        read; a batch lost too often comes back as failures. With ``streaming``
        (:class:`~voxanon.pipeline.execution.streaming.StreamingOptions`), the streaming executor on CPU and device
        actors (:class:`RayLanes`)."""
        self.connect()
        if streaming is not None:
            from .streaming import StreamingRun

            return StreamingRun(RayLanes(self, system, allow_pipes, str(output_dir)), batches, streaming)
        return contextlib.closing(self._outcomes(system.config, batches, allow_pipes, output_dir))

    def _outcomes(self, config: dict, batches: list[list], allow_pipes: bool, output_dir) -> Iterator:
        from .batches import Outcome
        from .pool import parallel_batches

        # Split as the local pool does, so that no actor idles while another runs a small set's last batch.
        batches = parallel_batches(batches, self._worker_count(len(batches)), config)
        make = functools.partial(_system_worker, config, allow_pipes)
        for batch, results, error in self.map_batches(make, batches, str(output_dir)):
            if error is None:
                yield results
            else:
                yield [Outcome(job.utt, failed_stage="worker", error=error) for job in batch]

    def map_batches(self, make: Callable[[], Callable[[list], list]], batches: list[list],
                    shared_path: str | None = None) -> Iterator[tuple[list, list | None, str | None]]:
        """``(batch, make()(batch), None)`` for each batch, run on this backend's actors, each of which builds
        ``make()`` once for the command; ``(batch, None, message)`` for a batch whose workers died
        ``ATTEMPTS`` times. Completion order. A :class:`RunFault` (``make()`` failed) is raised."""
        if not batches:
            return
        self.connect()
        pool = self._pool(self.options.cpus_per_worker, self.options.gpus_per_worker,
                          self._worker_count(len(batches)))
        work = self._work(make)
        tags = set(range(len(batches)))
        for index, batch in enumerate(batches):
            pool.submit(_Call(work, (batch,), index, shared_path))
        left = len(batches)
        try:
            while left:
                done = pool.handle(_wait([pool])[1])
                if done is None:
                    continue
                batch = done.call.args[0]
                if done.error is None:
                    left -= 1
                    yield batch, done.value, None
                    continue
                done.call.attempts += 1
                log.warning("Ray worker lost a batch of %d (attempt %d): %s", len(batch), done.call.attempts,
                            done.error)
                if done.call.attempts < ATTEMPTS:
                    pool.queue.appendleft(done.call)
                elif len(batch) > 1:
                    left += len(batch) - 1
                    pool.queue.extendleft(_Call(work, ([item],), done.call.tag, shared_path)
                                          for item in reversed(batch))
                else:
                    left -= 1
                    yield batch, None, f"worker lost it {done.call.attempts} times: {done.error}"
                pool.dispatch()
        finally:
            pool.cancel(tags)


class RayLanes:
    """The streaming executor's lanes on Ray: CPU actors (the backend's pool of ``--cpus-per-worker``
    actors) load, prepare and write; device actors, one per GPU of the cluster (one on the CPU for a
    ``cpu:N`` device), run the model stages. Payloads go from actor to actor through Ray's object store;
    this process handles their references and the outcomes only."""

    def __init__(self, backend: RayBackend, system, allow_pipes: bool, shared_path: str):
        import ray

        from .streaming import cpu_stage_count

        config, stages = system.config, len(system.stages)
        self.start, self.shared_path = cpu_stage_count(system), shared_path
        self.max_seconds = system.max_seconds or 120.0
        on_gpu = any(stage.device.startswith("cuda") for stage in system.stages) or (
            any(stage.device == "auto" for stage in system.stages) and ray.cluster_resources().get("GPU", 0) > 0)
        self.device_workers = max(1, int(ray.cluster_resources().get("GPU", 0))) if on_gpu else 1
        # The CPU lane's actors reserve CPUs only (--gpus-per-worker sizes nothing here: the device actors take
        # the GPUs): as many as --workers, or as the cluster's CPUs hold.
        cpus, per_actor = ray.cluster_resources().get("CPU", 0), backend.options.cpus_per_worker
        self.cpu_workers = max(1, backend.options.workers or int(cpus // per_actor if per_actor > 0 else cpus))
        self._cpu = backend._pool(backend.options.cpus_per_worker, 0.0, self.cpu_workers)
        # A device actor takes a whole GPU and no CPU reservation: the CPU actors have the cores.
        self._device = backend._pool(0.0, 1.0 if on_gpu else 0.0, self.device_workers)
        self._cpu_work = backend._work(functools.partial(_lane_worker, config, allow_pipes, 0, self.start))
        self._device_work = backend._work(functools.partial(_lane_worker, config, allow_pipes, self.start, stages))
        self._tags: set = set()

    def _submit(self, pool: _ActorPool, work, tag, *args) -> None:
        self._tags.add(tag)
        pool.submit(_Call(work, args, tag, self.shared_path, num_returns=2))

    def prepare(self, tag, jobs: list) -> None:
        self._submit(self._cpu, self._cpu_work, tag, "prepare", jobs)

    def device(self, tag, jobs: list, parts: list) -> None:
        self._submit(self._device, self._device_work, tag, "device", jobs, *parts)

    def write(self, tag, batch) -> None:
        self._submit(self._cpu, self._cpu_work, tag, "write", batch)

    def completed(self) -> list:
        """The next finished task: ``(tag, payload reference (the outcomes, for a write), timing, None)``, or
        ``(tag, None, None, Lost)`` for a task lost with its worker; a :class:`RunFault` is raised."""
        import ray

        from .streaming import Lost

        pool, ref = _wait([self._cpu, self._device])
        done = pool.handle(ref)
        if done is None:
            return []
        self._tags.discard(done.call.tag)
        if done.error is not None:
            return [(done.call.tag, None, None, Lost(done.error))]
        payload = ray.get(done.payload) if done.call.tag.step == "write" else done.payload
        return [(done.call.tag, payload, done.value, None)]

    def close(self) -> None:
        """Stops waiting for this run's tasks; the actors stay for the command's next run."""
        for pool in (self._cpu, self._device):
            pool.cancel(self._tags)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]
