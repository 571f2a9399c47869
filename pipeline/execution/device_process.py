"""A device process whose main thread never waits for the host between tasks: the streaming executor's local
device lane (one per GPU).

Under a ``ProcessPoolExecutor`` of one process, the process got its next task only once the current one had
returned: it then unpickled the task, mapped its arrays from shared memory and faulted their pages in, and, after
the task, packed its result's arrays and pickled it, each time with the device idle. Here three threads share that
work, so that the main thread (on a GPU, the one that launches the kernels) only runs tasks, one after the other:

- a *receiver* takes each task as soon as the driver sends it and stages it (``stage``: for the streaming executor,
  its arrays copied from shared memory into the process's own memory, which costs no memory: the shared file is
  gone once mapped). It stages every task it is sent, so that the pipe never fills and the driver never waits
  to send; what the driver sends is bounded by its own back-pressure (the streaming executor's
  ``queue_seconds``);
- the *main thread* takes the staged tasks in order and runs them (``task``);
- a *sender* finishes each result (``finish``: its arrays written to shared memory) and sends it back, while the
  main thread runs the next task.

The staged arrays are plain NumPy arrays, not pinned tensors: the models copy each batch into one padded, pinned
host tensor for the device anyway (``models/nets/precision.py``), so pinning each utterance's arrays would add a
copy and remove none.

The process is spawned with two pipes, which starts no thread in the driver: it can start (and load torch and its
models) before the driver forks its CPU pool, which must happen while the driver has no other thread. The driver's
*listener* thread (:meth:`DeviceProcess.listen`, started once the pool is forked) turns the replies into futures;
a process that dies fails its pending futures with :class:`BrokenProcessPool`, as a pool's would.
"""
from __future__ import annotations

import queue
import threading
import traceback
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import connection, get_context
from typing import Any, Callable

READY = -1
"""The key of the reply that says the process has loaded (or of the fault that stopped it loading)."""


class DeviceProcess:
    """A spawned process that runs ``initializer(*initargs)`` (a failure is its ready reply's exception), then each
    task submitted, in order: ``task(*stage(*args))`` on its main thread, the result sent back as ``finish(result)``
    (see the module's doc)."""

    def __init__(self, initializer: Callable, initargs: tuple, task: Callable, stage: Callable, finish: Callable):
        context = get_context("spawn")
        tasks, self._tasks = context.Pipe(duplex=False)
        self._replies, replies = context.Pipe(duplex=False)
        self._process = context.Process(target=_serve, args=(initializer, initargs, task, stage, finish, tasks, replies),
                                        daemon=True)
        self._process.start()
        tasks.close()
        replies.close()
        self._futures: dict[int, Future] = {READY: Future()}
        self._lock = threading.Lock()
        self._next_key = 0
        self._ended: str | None = None   # why the process is gone, once its listener has seen it go
        self._listener: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self._process.pid

    def listen(self) -> Future:
        """Starts turning the process's replies into futures (a thread in this process: start it after any fork);
        the future of its ready reply."""
        self._listener = threading.Thread(target=self._listen, name=f"device-process-{self.pid}", daemon=True)
        self._listener.start()
        return self._futures[READY]

    def submit(self, *args) -> Future:
        future = Future()
        with self._lock:
            if self._ended is not None:
                future.set_exception(BrokenProcessPool(self._ended))
                return future
            key, self._next_key = self._next_key, self._next_key + 1
            self._futures[key] = future
        try:
            self._tasks.send((key, args))  # references: tens of kB; the receiver empties the pipe as tasks come
        except OSError:
            pass  # the process is gone: its listener fails the future
        return future

    def _listen(self) -> None:
        while True:
            try:
                ready = connection.wait([self._replies, self._process.sentinel])
                if self._replies not in ready:
                    break
                key, ok, value = self._replies.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future = self._futures.pop(key)
            (future.set_result if ok else future.set_exception)(value)
        self._process.join()
        with self._lock:
            self._ended = f"it ended with exit code {self._process.exitcode}"
            pending, self._futures = list(self._futures.values()), {}
        for future in pending:
            future.set_exception(BrokenProcessPool(self._ended))

    def close(self) -> None:
        """Ends the process now (its pending tasks are no longer wanted)."""
        self._process.kill()
        self._process.join()
        if self._listener is not None:
            self._listener.join()
        self._tasks.close()
        self._replies.close()


class RemoteTraceback(Exception):
    """Where in the device process an exception was raised: the cause of the exception the driver receives (a
    pickled exception keeps neither its traceback nor its cause), printed under it as a process pool's is."""

    def __str__(self) -> str:
        return f'\n"""\n{self.args[0]}"""'


class _Fault:
    """An exception to send to the driver with the traceback it had in the device process."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.text = "".join(traceback.format_exception(type(error), error, error.__traceback__))

    def __reduce__(self):
        return _rebuild_fault, (self.error, self.text)


def _rebuild_fault(error: BaseException, text: str) -> BaseException:
    error.__cause__ = RemoteTraceback(text)
    return error


def _serve(initializer: Callable, initargs: tuple, task: Callable, stage: Callable, finish: Callable,
           tasks: connection.Connection, replies: connection.Connection) -> None:
    """The device process's main thread."""
    try:
        initializer(*initargs)
    except BaseException as error:
        replies.send((READY, False, _Fault(error)))
        return
    replies.send((READY, True, None))
    staged: queue.Queue = queue.Queue()
    done: queue.Queue = queue.Queue()
    threading.Thread(target=_receive, args=(tasks, stage, staged), name="receiver", daemon=True).start()
    threading.Thread(target=_send, args=(done, finish, replies), name="sender", daemon=True).start()
    while True:
        key, args, error = staged.get()
        if error is None:
            try:
                done.put((key, True, task(*args)))
                continue
            except BaseException as caught:
                error = caught
        done.put((key, False, error))


def _receive(tasks: connection.Connection, stage: Callable, staged: queue.Queue) -> None:
    while True:
        try:
            key, args = tasks.recv()
        except EOFError:   # the driver is gone (this process dies with it)
            return
        try:
            item = (key, stage(*args), None)
        except BaseException as error:
            item = (key, None, error)
        staged.put(item)


def _send(done: queue.Queue, finish: Callable, replies: connection.Connection) -> None:
    while True:
        key, ok, value = done.get()
        if ok:
            try:
                value = finish(value)
            except BaseException as error:
                ok, value = False, error
        reply: Any = (key, ok, value if ok else _Fault(value))
        try:
            replies.send(reply)
        except Exception as error:  # a result or an exception that does not pickle
            replies.send((key, False, RuntimeError(f"the device process could not send its reply: {error!r} "
                                                   f"({value!r})"[:2000])))
