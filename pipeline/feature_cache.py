"""Per-utterance model outputs (embeddings, transcripts) computed in batches and cached by audio content.

The cache key is sha256 of the audio file's bytes plus a model tag, so a rerun, or a
second evaluation that shares files, computes only what is new; a changed file is
recomputed, never served stale. Model files, which name the tags, are hashed once and their
digests remembered by path, size and modification time (:class:`FileDigests`).
"""
from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import soundfile
from tqdm import tqdm

from ..data_prep.atomic import atomic_path, atomic_write_text
from ..data_prep.audio import AudioError, load_audio, normalise_loudness
from ..data_prep.digest import sha256_file
from ..data_prep.paths import contained_path


@dataclass
class ContentCache:
    """Outputs keyed by (model tag, audio content): ``<root>/<tag>/<sha[:2]>/<sha>.npy|.txt``; no root, no cache."""

    root: Path | None

    @classmethod
    def from_option(cls, option: str | os.PathLike | None) -> "ContentCache":
        """The cache the ``--cache`` option names: a folder, ``none`` for no cache, or None for the default one."""
        from ..models.checkpoints.registry import default_cache_dir

        if option is not None and str(option).lower() == "none":
            return cls(None)
        return cls(Path(option) if option is not None else default_cache_dir())

    def path(self, tag: str, digest: str, kind: str) -> Path | None:
        extension = "npy" if kind == "vector" else "txt"
        return None if self.root is None else contained_path(self.root, tag, digest[:2], f"{digest}.{extension}")

    def get(self, tag: str, digest: str, kind: str):
        path = self.path(tag, digest, kind)
        if path is None or not path.is_file():
            return None
        return np.load(path) if kind == "vector" else path.read_text(encoding="utf-8")

    def put(self, tag: str, digest: str, kind: str, value) -> None:
        path = self.path(tag, digest, kind)
        if path is None:
            return
        if kind == "vector":
            with atomic_path(path) as tmp, open(tmp, "wb") as handle:
                # A file object: given a name, np.save would append ".npy" to the temporary name.
                np.save(handle, np.asarray(value))
        else:
            atomic_write_text(path, value)


class FileDigests:
    """sha256 of files, remembered by (path, size, modification time): a model file is hashed once, not on every
    run. Kept in ``<root>/file-digests.json`` beside the content cache (no root: for this process only); a file
    whose size or time changed is hashed again."""

    FILE = "file-digests.json"

    def __init__(self, root: Path | None):
        self.path = None if root is None else Path(root) / self.FILE
        self._known: dict[str, list] | None = None

    def _entries(self) -> dict[str, list]:
        if self._known is None:
            self._known = {}
            if self.path is not None and self.path.is_file():
                try:
                    loaded = json.loads(self.path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    loaded = {}  # a damaged cache file is rebuilt, never trusted
                self._known = loaded if isinstance(loaded, dict) else {}
        return self._known

    def __call__(self, path: str | os.PathLike) -> str:
        resolved = str(Path(path).resolve())
        stat = os.stat(resolved)
        entries = self._entries()
        known = entries.get(resolved)
        if isinstance(known, list) and known[:2] == [stat.st_size, stat.st_mtime_ns]:
            return str(known[2])
        digest = sha256_file(resolved)
        entries[resolved] = [stat.st_size, stat.st_mtime_ns, digest]
        if self.path is not None:
            atomic_write_text(self.path, json.dumps(entries, indent=1, sort_keys=True) + "\n")
        return digest


@dataclass
class CachedComputation:
    """``compute`` (a list of 16 kHz waves -> one output per wave) run in batches over files, cached.

    ``kind`` is ``"vector"`` (embeddings) or ``"text"`` (transcripts). Files whose audio
    cannot be used are collected in ``failures`` (key -> message), never dropped silently.
    With a ``backend`` (:class:`voxanon.pipeline.execution.ray.RayBackend`) the batches run on its
    workers, each holding its own copy of the computation (so a model loads once per worker);
    this process alone reads and writes the cache. Unless ``progress`` is false, a progress bar on stderr
    counts utterances and audio seconds per second (terminal or not, as the anonymisation's bar does).
    """

    tag: str
    compute: Callable[[list[np.ndarray]], list]
    kind: str = "vector"
    sample_rate: int = 16000
    batch_size: int = 16
    loudness_lufs: float | None = None
    bytes_per_sample: float = 0.0
    """What ``compute`` takes at its peak per sample of a batch's audio, beyond the loaded audio (measured:
    benchmarks/stage_memory.py --computations)."""
    failures: dict[str, str] = field(default_factory=dict)
    computed: int = 0
    backend: object | None = None
    progress: bool = True

    def take_failures(self, prefix: str) -> dict[str, str]:
        """The failures so far, keys prefixed (e.g. with the set and side), and forget them."""
        taken = {f"{prefix}{key}": message for key, message in self.failures.items()}
        self.failures.clear()
        return taken

    @property
    def cache_tag(self) -> str:
        return self.tag if self.loudness_lufs is None else f"{self.tag}-lufs{self.loudness_lufs:g}"

    def compute_batch(self, items: list[tuple[str, Path]]) -> list[tuple[str, object, str | None, float]]:
        """``(key, output, None, audio seconds)`` for each usable file of ``items``, ``(key, None, message, 0)``
        for the others."""
        waves, loaded, done = [], [], []
        for key, path in items:
            try:
                samples = load_audio(path, self.sample_rate).samples
            except AudioError as error:
                done.append((key, None, str(error), 0.0))
                continue
            if self.loudness_lufs is not None:
                samples = normalise_loudness(samples, self.sample_rate, self.loudness_lufs)
            waves.append(samples)
            loaded.append(key)
        outputs = self.compute(waves) if waves else []
        return done + [(key, value, None, len(wave) / self.sample_rate)
                       for key, value, wave in zip(loaded, outputs, waves)]

    def _batches(self, items: list[tuple[str, Path]], seconds: dict[str, float]) -> list[list[tuple[str, Path]]]:
        """``items`` (longest first) in batches of ``batch_size``, cut smaller where a batch's audio would not fit in
        the memory left (:func:`~voxanon.pipeline.execution.memory_plan.evaluation_batches`; loaded as 16 kHz
        float32 plus ``bytes_per_sample`` to compute); under a cluster's ``backend``, whose workers have memory of
        their own, by ``batch_size`` alone."""
        if self.backend is not None:
            return [items[start:start + self.batch_size] for start in range(0, len(items), self.batch_size)]
        from .execution.memory_plan import LOAD_BYTES_PER_SAMPLE, evaluation_batches

        return evaluation_batches(items, [int(seconds[key] * self.sample_rate) for key, _ in items], self.sample_rate,
                                  LOAD_BYTES_PER_SAMPLE + self.bytes_per_sample, self.batch_size,
                                  source=lambda item: item[1])

    def _computed_batches(self, batches: list[list[tuple[str, Path]]]):
        if self.backend is None:
            yield from ((batch, self.compute_batch(batch)) for batch in batches)
            return
        worker_copy = replace(self, backend=None, failures={}, computed=0)
        make = functools.partial(_computation_worker, worker_copy)
        for batch, done, error in self.backend.map_batches(make, batches):
            yield batch, done if error is None else [(key, None, error, 0.0) for key, _ in batch]

    def run(self, files: dict[str, Path], cache: ContentCache, desc: str) -> dict[str, object]:
        results: dict[str, object] = {}
        todo: list[tuple[str, str]] = []
        for key, path in files.items():
            try:
                digest = sha256_file(path)
            except OSError as error:
                self.failures[key] = f"{path}: {error.strerror or error}"
                continue
            cached = cache.get(self.cache_tag, digest, self.kind)
            if cached is None:
                todo.append((key, digest))
            else:
                results[key] = cached
        digests = dict(todo)
        # Longest first, so each batch holds utterances of similar length: padded batches on a device waste little,
        # and Whisper's windows of one batch end their beam searches together.
        seconds = {key: _seconds(files[key]) for key, _ in todo}
        todo.sort(key=lambda item: -seconds[item[0]])
        batches = self._batches([(key, files[key]) for key, _ in todo], seconds)
        failed: dict[str, str] = {}
        audio_seconds, started = 0.0, time.monotonic()
        with tqdm(total=len(todo), desc=desc, unit="utt", disable=not (todo and self.progress), leave=False,
                  dynamic_ncols=True) as bar:
            for batch, done in self._computed_batches(batches):
                for key, value, error, seconds in done:
                    if error is not None:
                        failed[key] = error
                        continue
                    cache.put(self.cache_tag, digests[key], self.kind, value)
                    results[key] = value
                    self.computed += 1
                    audio_seconds += seconds
                bar.set_postfix_str(f"{audio_seconds / max(time.monotonic() - started, 1e-9):.1f} s audio/s",
                                    refresh=False)
                bar.update(len(batch))
            bar.refresh()  # the final count and rate, whenever the last update came (updates redraw at most every 0.1 s)
        # In the files' order, whatever order the batches finished in.
        self.failures.update({key: failed[key] for key in files if key in failed})
        return {key: results[key] for key in files if key in results}


def _seconds(path: Path) -> float:
    """The file's duration from its header; 0 when it has none (loading it then reports why)."""
    try:
        info = soundfile.info(str(path))
    except (RuntimeError, OSError):
        return 0.0
    return info.frames / info.samplerate if info.samplerate else 0.0


def _computation_worker(computation: CachedComputation):
    return computation.compute_batch


