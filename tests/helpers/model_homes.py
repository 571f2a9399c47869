"""Model homes for tests: a ``VOXANON_HOME`` holding a tiny random set, written by the CLI as a user would."""
from __future__ import annotations

from pathlib import Path

import pytest

from voxanon.pipeline.cli import main


def import_random_set(home: Path, release: str) -> Path:
    """``home`` with ``voxanon models import RELEASE --random-init --size tiny`` installed in it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(home))
        assert main(["models", "import", release, "--random-init", "--size", "tiny"]) == 0
    return home
