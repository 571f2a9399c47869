"""Where models run and which models this process holds: one rule for device names, one per-process cache.

Device names: ``cpu``, ``cuda``, ``auto`` (CUDA where the process running the model sees a GPU, else the CPU),
``cuda:N``, and ``cpu:N`` (the device code path, padded batches and the direct model form, run on the CPU: how
the GPU path is tested on machines without one). ``auto`` is resolved in the process that runs the model (a
worker, a Ray actor on a GPU node), not where the run was configured.

The cache holds installed model sets (checksums verified once per process) and the models built from them,
keyed by (models directory, set, component, precision, device). Stages, the evaluation's embedders, SER and
training all load through it, so a process builds each model once; the runner's forked workers share the CPU
models their parent loaded. torch is imported only when a model is.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
from typing import Any, Callable, Iterable, Iterator

from ..data_prep.errors import VoxanonError


log = logging.getLogger(__name__)

PRECISIONS = ("float32", "tf32", "bfloat16", "float16")
"""``tf32``: float32 weights and activations, CUDA's matrix products and convolutions in TF32; elsewhere
float32 (:func:`voxanon.models.nets.precision.float32_products`)."""
DEVICES = ("cpu", "cuda", "auto")
DEVICE_NAME = re.compile(r"(cpu|cuda|auto)|(cpu|cuda):\d+")

_loaded: dict[tuple, Any] = {}


def check_device_name(device: str, what: str = "device") -> str:
    """``device`` if it is a device name (see the module doc), else a ValueError naming ``what``."""
    if not DEVICE_NAME.fullmatch(str(device)):
        raise ValueError(f"{what} must be one of {', '.join(DEVICES)} (or cuda:N, or cpu:N: the device code path "
                         f"on the CPU), got {device!r}")
    return device


def check_precision(precision: str, what: str = "precision") -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"{what} must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def stage_precision(precision: str, what: str = "precision") -> tuple[str, bool]:
    """A stage's ``precision`` setting as (the dtype name of its weights, whether CUDA may compute its float32
    products in TF32)."""
    check_precision(precision, what)
    return ("float32", True) if precision == "tf32" else (precision, False)


def device_option(value: str) -> str:
    """An argparse ``type`` for ``--device``."""
    try:
        return check_device_name(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: expected cpu, cuda, auto, cuda:N or cpu:N") from None


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a CUDA device, else ``cpu``; other names unchanged."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device_available(device: str) -> None:
    """A :class:`VoxanonError` in one line unless this process can run models on ``device`` (``auto`` and the
    CPU always can)."""
    if not str(device).startswith("cuda"):
        return
    import torch

    index = int(device.partition(":")[2] or 0)
    if not torch.cuda.is_available():
        raise VoxanonError(f"device {device!r}: this process sees no CUDA device (torch {torch.__version__}, "
                           f"built for CUDA {torch.version.cuda or 'none'}; CUDA_VISIBLE_DEVICES="
                           f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); use --device cpu or auto")
    if index >= torch.cuda.device_count():
        raise VoxanonError(f"device {device!r}: this process sees only {torch.cuda.device_count()} CUDA device(s)")


def torch_device(device: str):
    """The ``torch.device`` a training loop runs on: ``auto`` resolved, ``cpu:N`` the CPU; a missing CUDA device is
    a :class:`VoxanonError`."""
    import torch

    try:
        check_device_name(device)
    except ValueError:
        raise VoxanonError(f"--device must be auto, cpu, cpu:N or cuda[:N], got {device!r}") from None
    resolved = resolve_device(device)
    if resolved.startswith("cuda") and not torch.cuda.is_available():
        raise VoxanonError(f"--device {device}: no CUDA device is available here")
    return torch.device("cpu" if resolved.startswith("cpu") else resolved)


def visible_gpus(driver_listing: str = "/proc/driver/nvidia/gpus") -> list[str]:
    """The GPUs this process may use, each as its CUDA_VISIBLE_DEVICES entry, found without starting CUDA
    (a CUDA context does not survive a fork): the entries of ``CUDA_VISIBLE_DEVICES`` where it is set, else one
    per GPU the NVIDIA driver lists."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip() and entry.strip() != "-1"]
    try:
        return [str(index) for index in range(len(os.listdir(driver_listing)))]
    except OSError:
        return []


def models_home() -> str:
    from ..models.checkpoints.registry import models_dir

    return str(models_dir())


def model_set(name: str, release: str | None = None):
    """The installed set ``name``, its checksums verified once per process; with ``release``, a set that release's
    importer wrote (else a user fault naming how to install one). The runner verifies its sets ahead, beside other
    start-up work (:func:`model_sets_verified_meanwhile`)."""
    key = (models_home(), name)
    if key not in _loaded:
        from ..models.checkpoints.registry import load_model_set

        _loaded[key] = load_model_set(name)
    _check_release(name, _loaded[key].config, release)
    return _loaded[key]


@contextlib.contextmanager
def model_sets_verified_meanwhile(names: Iterable[str]) -> Iterator[None]:
    """The checksums of the installed sets ``names`` (those this process has not verified yet) computed in a
    thread while the body runs, and kept for :func:`model_set`: hashing releases the interpreter lock, so the
    SSL-SAS set's (about 0.5 CPU s) runs on another core beside the body's work (the runner's: the F0 tracker's
    imports and kernels, before any model loads). A set that fails its check (not installed, a damaged file) is
    not kept: :func:`model_set` checks it again and raises, where the stage that loads it names it. The thread
    has ended when the body has (nothing else runs when the runner forks next)."""
    home = models_home()
    todo = [name for name in dict.fromkeys(names) if (home, name) not in _loaded]
    if not todo:
        yield
        return
    from concurrent.futures import ThreadPoolExecutor

    from ..models.checkpoints.registry import load_model_set

    with ThreadPoolExecutor(1) as verifier:
        checks = {name: verifier.submit(load_model_set, name) for name in todo}
        yield
    for name, check in checks.items():
        if check.exception() is None:
            _loaded[(home, name)] = check.result()


def model_set_config(name: str, release: str | None = None) -> dict:
    """An installed set's config alone (no weights read, no checksum), for a check before any utterance; with
    ``release``, as :func:`model_set`."""
    import json

    from ..models.checkpoints.registry import CONFIG, ModelNotInstalledError, load_model_set, models_dir

    path = models_dir() / name / CONFIG
    if not path.is_file():
        load_model_set(name)  # raises the error that names the install command
        raise ModelNotInstalledError(f"model set {name!r}: {path} is missing")
    config = json.loads(path.read_text(encoding="utf-8"))
    _check_release(name, config, release)
    return config


def _check_release(name: str, config: dict, release: str | None) -> None:
    if release is not None and config.get("release") != release:
        from ..models.checkpoints.catalogue import release as catalogue_release

        raise VoxanonError(f"model set {name!r} was not made by voxanon models import {release}; install one with "
                           f"{catalogue_release(release).install_hint}")


def cached_model(name: str, component: str, precision: str, device: str, build: Callable[[], Any]):
    """The model ``build()`` makes for (set, component, precision, device), built once per process. ``device`` is
    resolved first (``auto`` becomes this process's device)."""
    device = resolve_device(device)
    key = ((models_home(), name, component) if (device, precision) == ("cpu", "float32")
           else (models_home(), name, component, precision, device))
    if key not in _loaded:
        _loaded[key] = build()
    return _loaded[key]


def cached_float32_model(name: str, component: str, device: str, load: Callable[[], Any], movable: bool = True):
    """The float32 network ``load()`` reads, once per process and device (:func:`cached_model`), moved to ``device``
    when ``movable``; ``cpu:N`` keeps it on the CPU (the device form's code path, the CPU's memory)."""
    device = resolve_device(device)

    def build():
        model = load()
        if movable and device != "cpu":
            model = model.to(device.partition(":")[0] if device.startswith("cpu:") else device)
        return model

    return cached_model(name, component, "float32", device, build)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, as taskset or a batch scheduler set it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine_workers(requested: int) -> int:
    """``requested`` local worker processes, at most one per usable CPU: more only share the same cores, each
    with its own copy of the models (200 workers were 203 processes for a set of 4 utterances)."""
    cpus = usable_cpus()
    if requested > cpus:
        log.info("--workers %d: this machine runs %d at a time (its usable CPUs); using %d workers",
                 requested, cpus, cpus)
    return min(requested, cpus)
