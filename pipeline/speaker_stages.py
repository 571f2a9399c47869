"""Speaker-vector transforms: B1's pool pseudo-speaker and the global average vector."""
from __future__ import annotations

SPEAKER_STAGES: tuple = ()
