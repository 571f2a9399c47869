"""Sex-attribute protection stages: zero-LLR flow on the speaker vector, F0 to neutral targets, TD-PSOLA."""
from __future__ import annotations

PROTECTION_STAGES: tuple = ()
