"""The stage-timing loop of benchmarks/pipeline.py (CPU) and benchmarks/gpu.py (CUDA): each stage's seconds
over a set of utterances run as the runner runs a batch, every stage in turn."""
from __future__ import annotations

import time
from typing import Callable, Iterable

import numpy as np


def utterance_batches(system, waves: list[np.ndarray], batch_size: int,
                      features: list[dict] | None = None) -> Iterable[list]:
    """``waves`` as the system's utterances ``u0``, ``u1``, ... in batches of ``batch_size``, each given a copy
    of its entry of ``features`` (what earlier stages computed, e.g. F0 computed once for every run)."""
    for start in range(0, len(waves), batch_size):
        batch = []
        for i in range(start, min(start + batch_size, len(waves))):
            utt = system.new_utterance(f"u{i}", "spk", None, waves[i])
            if features is not None:
                utt.features.update({key: np.array(value, copy=True) for key, value in features[i].items()})
            batch.append(utt)
        yield batch


def stage_seconds(stages, batches: Iterable[list],
                  synchronise: Callable[[], None] = lambda: None) -> tuple[dict[str, float], list]:
    """Wall seconds each of ``stages`` spent over ``batches`` and the processed utterances. ``synchronise``
    (a GPU's) runs before each clock reading, so that work queued on a device counts for the stage that
    queued it."""
    seconds = {stage.name: 0.0 for stage in stages}
    done = []
    for batch in batches:
        for stage in stages:
            synchronise()
            began = time.perf_counter()
            stage.process_batch(batch)
            synchronise()
            seconds[stage.name] += time.perf_counter() - began
        done += batch
    return seconds, done
