"""How a set's batches run: in this process, a local worker pool, the streaming CPU-to-device executor, or Ray.

Every executor calls the same per-utterance functions (:mod:`.batches`), so an utterance goes through exactly
the same code wherever it runs; the runner (:mod:`voxanon.pipeline.runner`) keeps the journal, the resume and
the failure report, and talks to an executor only through :class:`Executor`.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ContextManager, Iterable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .batches import Job, Outcome
    from .streaming import StreamingOptions
    from ..systems.recipes import System


@runtime_checkable
class Executor(Protocol):
    """What the runner needs of a backend (``LocalBackend``, ``RayBackend``)."""

    name: str

    def describe(self) -> dict:
        """What ``run.json`` records of it (kind, workers, cluster)."""

    def check_devices(self, system: System, streaming: bool) -> None:
        """Fail once, before any utterance, when a stage's device is not there."""

    def outcomes(self, system: System, batches: list[list[Job]], allow_pipes: bool, output_dir: Path,
                 streaming: StreamingOptions | None = None) -> ContextManager[Iterable[list[Outcome]]]:
        """Each batch's outcomes, a list per batch in any order, as they finish; a context (or an object to
        close) that stops the work when the run stops early. ``streaming``: run the system's CPU and device
        stages in the streaming executor's lanes."""
