"""Published challenge figures, shipped as data, to show beside a user's own numbers.

``recipes/published/<name>.yaml`` (package ``voxanon.recipes``) holds the figures a challenge
printed for its baselines, with their source (repository, commit, file per baseline). They
become :class:`~voxanon.eval.results.Result` records whose system names start with the
file's ``label`` (e.g. ``published (VPC 2024) B2``), so every table says they are published
figures and not the user's. Only sets the user evaluated get rows.

Columns: ``eer_oo`` goes under ``EER speechbrain o-o``; ``eer_aa`` is the semi-informed
attacker's (attacker ``semi-informed``), so it lands in the ``EER speechbrain a-a semi-informed``
column beside the user's own semi-informed figures, not under the lazy-informed a-a; WER and
UAR name the challenge's models as their variant. Each row's ``model`` names the challenge's.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from importlib import resources
from typing import Iterable, Mapping

from ..data_prep.errors import VoxanonError
from .results import Result

# figure key in the file -> (condition, metric, variant, attacker, model); every figure is a percentage.
FIGURE_COLUMNS = {
    "eer_oo": ("o-o", "eer", "speechbrain", "", "challenge ASV_eval (ECAPA, original LibriSpeech)"),
    "eer_aa": ("a-a", "eer", "speechbrain", "semi-informed",
               "challenge ASV_eval^anon (ECAPA, anonymised train-clean-360)"),
    "wer": ("asr", "wer", "asr-wav2vec2-librispeech", "", "challenge ASR_eval"),
    "uar": ("ser", "uar", "fold-mean", "", "challenge SER_eval (wav2vec2 IEMOCAP, mean over folds)"),
}
SIDES = ("original", "anonymised")


@dataclass(frozen=True)
class PublishedFigures:
    label: str                          # e.g. "published (VPC 2024)"
    source: Mapping[str, str]           # repository, commit, licence
    files: Mapping[str, str]            # baseline -> file in that repository
    results: tuple[Result, ...]


def load_published(name: str = "vpc2024") -> PublishedFigures:
    """The figures of ``recipes/published/<name>.yaml`` as labelled results."""
    import yaml

    resource = resources.files("voxanon.recipes") / "published" / f"{name}.yaml"
    if not resource.is_file():
        raise VoxanonError(f"no published figures named {name!r} ({resource} not found)")
    data = yaml.safe_load(resource.read_text(encoding="utf-8"))
    try:
        return _figures(data)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise VoxanonError(f"{resource}: malformed published figures ({type(error).__name__}: {error})") from None


def _figures(data: dict) -> PublishedFigures:
    label = str(data["label"])
    source = {key: str(value) for key, value in data["source"].items()}
    systems = data["systems"]
    results: list[Result] = []
    # Figures on original speech repeat in every baseline's file: one row per distinct value,
    # under "<label> original", or "<label> original (<baseline> run)" where a file differs.
    original_values: dict[tuple[str, str], Counter] = {}
    original_systems: dict[tuple[str, str, float], list[str]] = {}
    for baseline, entry in systems.items():
        for figure, by_set in entry["original"].items():
            for set_name, value in by_set.items():
                original_values.setdefault((figure, set_name), Counter())[float(value)] += 1
                original_systems.setdefault((figure, set_name, float(value)), []).append(str(baseline))
        for figure, by_set in entry["anonymised"].items():
            condition, metric, variant, attacker, model = FIGURE_COLUMNS[figure]
            results += [Result(str(set_name), f"{label} {baseline}", condition, metric, variant, float(value), "%",
                               attacker, model) for set_name, value in by_set.items()]
    for (figure, set_name), counts in original_values.items():
        condition, metric, variant, attacker, model = FIGURE_COLUMNS[figure]
        for rank, (value, _) in enumerate(counts.most_common()):
            runs = original_systems[(figure, set_name, value)]
            system = f"{label} original" if rank == 0 else f"{label} original ({', '.join(runs)} run)"
            results.append(Result(str(set_name), system, condition, metric, variant, value, "%", attacker, model))
    files = {str(baseline): str(entry["file"]) for baseline, entry in systems.items()}
    return PublishedFigures(label, source, files, tuple(results))


def published_beside(results: Iterable[Result], published: PublishedFigures) -> list[Result]:
    """The published rows for the sets that ``results`` has (none when no set matches)."""
    sets = {result.set for result in results}
    return [row for row in published.results if row.set in sets]


def source_note(published: PublishedFigures) -> str:
    """One line naming where the figures come from, for report notes."""
    return (f"{published.source['repository']} at {published.source['commit']}, files "
            + ", ".join(f"{baseline}: {path}" for baseline, path in published.files.items()))
