"""Per-utterance model outputs (embeddings, transcripts) computed in batches and cached by audio content.

The cache key is sha256 of the audio file's bytes plus a model tag, so a rerun, or a
second evaluation that shares files, computes only what is new; a changed file is
recomputed, never served stale.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm import tqdm

from voxanon.data_prep.atomic import atomic_path, atomic_write_text
from voxanon.data_prep.audio import AudioError, load_audio, normalise_loudness
from voxanon.data_prep.digest import sha256_file
from voxanon.data_prep.paths import contained_path


@dataclass
class ContentCache:
    """Outputs keyed by (model tag, audio content): ``<root>/<tag>/<sha[:2]>/<sha>.npy|.txt``; no root, no cache."""

    root: Path | None

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


@dataclass
class CachedComputation:
    """``compute`` (a list of 16 kHz waves -> one output per wave) run in batches over files, cached.

    ``kind`` is ``"vector"`` (embeddings) or ``"text"`` (transcripts). Files whose audio
    cannot be used are collected in ``failures`` (key -> message), never dropped silently.
    With a ``backend`` (:class:`voxanon.pipeline.ray_backend.RayBackend`) the batches run on its
    workers, each holding its own copy of the computation (so a model loads once per worker);
    this process alone reads and writes the cache. The progress bar shows on a terminal unless
    ``progress`` is false.
    """

    tag: str
    compute: Callable[[list[np.ndarray]], list]
    kind: str = "vector"
    sample_rate: int = 16000
    batch_size: int = 16
    loudness_lufs: float | None = None
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

    def compute_batch(self, items: list[tuple[str, Path]]) -> list[tuple[str, object, str | None]]:
        """``(key, output, None)`` for each usable file of ``items``, ``(key, None, message)`` for the others."""
        waves, loaded, done = [], [], []
        for key, path in items:
            try:
                samples = load_audio(path, self.sample_rate).samples
            except AudioError as error:
                done.append((key, None, str(error)))
                continue
            if self.loudness_lufs is not None:
                samples = normalise_loudness(samples, self.sample_rate, self.loudness_lufs)
            waves.append(samples)
            loaded.append(key)
        outputs = self.compute(waves) if waves else []
        return done + [(key, value, None) for key, value in zip(loaded, outputs)]

    def _computed_batches(self, batches: list[list[tuple[str, Path]]]):
        if self.backend is None:
            yield from ((batch, self.compute_batch(batch)) for batch in batches)
            return
        worker_copy = replace(self, backend=None, failures={}, computed=0)
        make = functools.partial(_computation_worker, worker_copy)
        for batch, done, error in self.backend.map_batches(make, batches):
            yield batch, done if error is None else [(key, None, error) for key, _ in batch]

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
        batches = [[(key, files[key]) for key, _ in todo[start:start + self.batch_size]]
                   for start in range(0, len(todo), self.batch_size)]
        failed: dict[str, str] = {}
        with tqdm(total=len(todo), desc=desc, unit="utt", disable=None if todo and self.progress else True,
                  leave=False) as bar:
            for batch, done in self._computed_batches(batches):
                for key, value, error in done:
                    if error is not None:
                        failed[key] = error
                        continue
                    cache.put(self.cache_tag, digests[key], self.kind, value)
                    results[key] = value
                    self.computed += 1
                bar.update(len(batch))
        # In the files' order, whatever order the batches finished in.
        self.failures.update({key: failed[key] for key in files if key in failed})
        return {key: results[key] for key in files if key in results}


def _computation_worker(computation: CachedComputation):
    return computation.compute_batch
