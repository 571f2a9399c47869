"""The device process (``pipeline/execution/device_process.py``): its main thread runs the tasks while a receiver
stages the next one and a sender returns the last one's result; a load fault and a death reach the driver."""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from voxanon.pipeline.execution.device_process import DeviceProcess, RemoteTraceback

_staged: set[int] = set()   # in the device process: the tasks its receiver has staged


def _nothing() -> None:
    pass


def _fail_to_load() -> None:
    raise RuntimeError("no such device")


def _stage(number: int, last: bool) -> tuple:
    _staged.add(number)
    return number, last, threading.current_thread().name


def _task(number: int, last: bool, staged_by: str) -> dict:
    """Waits (up to 10 s) for the next task to be staged: with a receiver beside the main thread it is, at once."""
    deadline = time.monotonic() + 10
    while not last and number + 1 not in _staged and time.monotonic() < deadline:
        time.sleep(0.001)
    return {"number": number, "next_staged_meanwhile": last or number + 1 in _staged, "staged_by": staged_by,
            "ran_on_main_thread": threading.current_thread() is threading.main_thread()}


def _finish(result: dict) -> dict:
    return {**result, "finished_by": threading.current_thread().name}


def _die(number: int, last: bool, staged_by: str) -> None:
    os._exit(3)


def test_the_next_task_is_staged_while_one_runs_and_results_are_sent_by_another_thread():
    device = DeviceProcess(_nothing, (), _task, _stage, _finish)
    try:
        assert device.listen().result(timeout=60) is None
        futures = [device.submit(number, number == 3) for number in range(4)]
        results = [future.result(timeout=60) for future in futures]
    finally:
        device.close()
    assert [result["number"] for result in results] == [0, 1, 2, 3]
    for result in results:
        assert result["next_staged_meanwhile"], result
        assert result["ran_on_main_thread"] and result["staged_by"] == "receiver" and result["finished_by"] == "sender"


def _raise(number: int, last: bool, staged_by: str) -> None:
    raise ValueError(f"task {number} cannot run")


def test_a_load_fault_a_task_fault_and_a_death_reach_the_driver():
    device = DeviceProcess(_fail_to_load, (), _task, _stage, _finish)
    try:
        with pytest.raises(RuntimeError, match="no such device") as fault:
            device.listen().result(timeout=60)
    finally:
        device.close()
    # Where it was raised, in the device process, comes with it.
    assert isinstance(fault.value.__cause__, RemoteTraceback) and "in _fail_to_load" in str(fault.value.__cause__)
    device = DeviceProcess(_nothing, (), _raise, _stage, _finish)
    try:
        device.listen().result(timeout=60)
        with pytest.raises(ValueError, match="task 0 cannot run") as fault:
            device.submit(0, False).result(timeout=60)
        assert "in _raise" in str(fault.value.__cause__)
        # The process serves on after a task's fault.
        with pytest.raises(ValueError, match="task 1 cannot run"):
            device.submit(1, True).result(timeout=60)
    finally:
        device.close()
    device = DeviceProcess(_nothing, (), _die, _stage, _finish)
    try:
        device.listen().result(timeout=60)
        with pytest.raises(BrokenProcessPool, match="exit code 3"):
            device.submit(0, True).result(timeout=60)
    finally:
        device.close()
