"""Evaluation results as labelled records: every number carries its metric variant and condition.

One :class:`Result` is one number (or tag) for one evaluation set, system and attack
condition. Tables, CSV, JSON and the HTML report are all views of a list of them.

ASV records also name the attacker (:data:`ATTACKERS`) and the model that scored them,
because one condition can be attacked with several models: a-a with the evaluation model
is the lazy-informed attacker, a-a with a model trained on anonymised speech the
semi-informed one. Records written before these fields existed read back with them empty.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Iterable

CONDITIONS = {
    "o-o": "original enrolment, original trials",
    "o-a": "original enrolment, anonymised trials (ignorant attacker)",
    "a-a": "anonymised enrolment, anonymised trials (lazy-informed attacker)",
    "asr": "speech recognition",
}
# The attacker of each ASV condition when scored with the evaluation model (o-o has none). The
# semi-informed attacker also scores a-a, with a model trained on anonymised speech.
ATTACKERS = {"o-a": "ignorant", "a-a": "lazy-informed"}
SEMI_INFORMED = "semi-informed"


@dataclass(frozen=True)
class Result:
    set: str            # evaluation set, e.g. "libri_dev_trials_f"
    system: str         # anonymisation system; "original" for unprotected speech
    condition: str      # "o-o", "o-a", "a-a", "asr", "sex-ignorant", ...
    metric: str         # "eer", "cllr", "min_cllr", "zebra_dece", "wer", "deid", ...
    variant: str        # how it was computed, e.g. "rocch", "kaldi", "ge2e-cosine"; "" when unique
    value: float | str  # a number, or a tag such as a ZEBRA category
    unit: str           # "%", "bits", "log10", "dB", "" (dimensionless)
    attacker: str = ""  # "ignorant", "lazy-informed", "semi-informed"; "" where no attacker applies (o-o, WER)
    model: str = ""     # the model that produced the number, e.g. "ge2e", "ecapa:asv_b2 (sha256 1f2e...)"
    note: str = ""      # what makes the number less certain, or why it is NaN (not estimable); "" when nothing

    @property
    def label(self) -> str:
        variant = f" ({self.variant})" if self.variant else ""
        attacker = f", {self.attacker}" if self.attacker else ""
        return f"{self.metric}{variant} [{self.condition}{attacker}]"

    def formatted(self, digits: int = 3) -> str:
        if isinstance(self.value, str):
            return self.value
        if math.isnan(self.value):
            return "nan"
        unit = "" if not self.unit else (self.unit if self.unit == "%" else f" {self.unit}")
        return f"{self.value:.{digits}f}{unit}"


COLUMNS = tuple(f.name for f in fields(Result))


def to_json(results: Iterable[Result]) -> str:
    return json.dumps([asdict(r) for r in results], indent=2, allow_nan=True) + "\n"


def from_json(text: str) -> list[Result]:
    return [Result(**row) for row in json.loads(text)]


def to_csv(results: Iterable[Result]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for result in results:
        writer.writerow([getattr(result, column) for column in COLUMNS])
    return buffer.getvalue()
