"""An evaluation's outputs: results.json/.csv/.md, the plots and report.html, and the table printed to the terminal."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ...data_prep.paths import contained_path

if TYPE_CHECKING:
    from ...eval.results import Result
    from .attackers import SemiInformed
    from .evaluate import Evaluation

log = logging.getLogger(__name__)


def write_outputs(out_dir: Path, evaluation: Evaluation, title: str, notes: dict[str, str]) -> Path:
    """results.json/.csv/.md, plots/ and report.html; returns the report's path."""
    from ...eval.plots import det_figure, ece_profile_figure, save_figure, similarity_figure, zoo_figure
    from ...eval.report import write_report

    plots = out_dir / "plots"
    figures: list[tuple[str, Path]] = []
    for set_name in sorted({s.set_name for s in evaluation.scores}):
        systems = [(f"{s.system} {s.condition}", s.tar, s.non) for s in evaluation.scores
                   if s.set_name == set_name and len(s.tar) and len(s.non)]
        if systems:
            paths = save_figure(ece_profile_figure(systems), contained_path(plots, f"{set_name}_ece_profile"))
            figures.append((f"{set_name}: ECE / ZEBRA profile per condition", paths[0]))
            paths = save_figure(det_figure(systems), contained_path(plots, f"{set_name}_det"))
            figures.append((f"{set_name}: DET curves per condition", paths[0]))
    for set_name, matrices in sorted(evaluation.similarity.items()):
        stem = set_name.replace(" ", "_")
        paths = save_figure(similarity_figure(matrices), contained_path(plots, f"{stem}_similarity"))
        figures.append((f"{set_name}: voice similarity matrices M_OO, M_OP, M_PP", paths[0]))
        for setting, matrix in (("OO", matrices.oo), ("PP", matrices.pp)):
            paths = save_figure(zoo_figure(matrix.zoo(), title=f"{set_name} {setting}"),
                                contained_path(plots, f"{stem}_zoo_{setting}"))
            figures.append((f"{set_name}: zoo plot in the {setting} setting", paths[0]))
    for remark in evaluation.remarks:
        log.warning("%s", remark)
    return write_report(out_dir, evaluation.results, figures, title, notes=notes, remarks=evaluation.remarks)


def attacker_notes(semi_informed: SemiInformed, warnings: list[str]) -> dict[str, str]:
    """Report notes naming the semi-informed attacker's model and any warning about its training data."""
    notes = {"semi-informed attacker": f"a-a scored with {semi_informed.model} (cosine scoring)"}
    if semi_informed.training is not None:
        notes["semi-informed attacker training"] = semi_informed.training["line"]
    notes.update({f"warning {k}" if len(warnings) > 1 else "warning": w for k, w in enumerate(warnings, 1)})
    return notes


def print_table(results: list[Result]) -> None:
    from ...eval.tables import markdown_tables_by_condition
    print(markdown_tables_by_condition(results))
