"""The semi-informed attacker's training settings the challenge tests give: a tiny ECAPA-TDNN trained for two
epochs, as ``--train-set`` options."""
from __future__ import annotations

import json

TINY = {"channels": [16, 16, 16, 16, 48], "lin_neurons": 16, "attention_channels": 8, "se_channels": 8,
        "sentence_len": 0.5, "batch_size": 8, "step_size": 10, "valid_ratio": 0, "number_of_epochs": 2}
TINY_SET = [option for key, value in TINY.items() for option in ("--train-set", f"{key}={json.dumps(value)}")]
