"""An evaluation's outputs: results.json/.csv/.md, the plots and report.html, and the table printed to the terminal.

A figure is drawn again only when what it shows changed: each one's inputs (labels, scores, matrices), the
sources of ``eval/`` (the plots and the metrics they draw) and matplotlib's version are hashed into
``plots/<stem>.inputs``; a rerun whose hash matches, with every format of the figure in place, keeps the files
(drawing is most of a cached rerun's time)."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ...data_prep.atomic import atomic_write_text
from ...data_prep.paths import contained_path

if TYPE_CHECKING:
    from ...eval.results import Result
    from .attackers import SemiInformed
    from .evaluate import Evaluation

log = logging.getLogger(__name__)


def write_outputs(out_dir: Path, evaluation: Evaluation, title: str, notes: dict[str, str]) -> Path:
    """results.json/.csv/.md, plots/ and report.html; returns the report's path."""
    from ...eval.plots import det_figure, ece_profile_figure, similarity_figure, zoo_figure
    from ...eval.report import write_report

    plots = out_dir / "plots"
    figures: list[tuple[str, Path]] = []
    for set_name in sorted({s.set_name for s in evaluation.scores}):
        systems = [(f"{s.system} {s.condition}", s.tar, s.non) for s in evaluation.scores
                   if s.set_name == set_name and len(s.tar) and len(s.non)]
        if systems:
            figures.append((f"{set_name}: ECE / ZEBRA profile per condition",
                            _figure(plots, f"{set_name}_ece_profile", ece_profile_figure, systems)))
            figures.append((f"{set_name}: DET curves per condition",
                            _figure(plots, f"{set_name}_det", det_figure, systems)))
    for set_name, matrices in sorted(evaluation.similarity.items()):
        stem = set_name.replace(" ", "_")
        figures.append((f"{set_name}: voice similarity matrices M_OO, M_OP, M_PP",
                        _figure(plots, f"{stem}_similarity", similarity_figure, matrices)))
        for setting, matrix in (("OO", matrices.oo), ("PP", matrices.pp)):
            figures.append((f"{set_name}: zoo plot in the {setting} setting",
                            _figure(plots, f"{stem}_zoo_{setting}", zoo_figure, matrix.zoo(),
                                    title=f"{set_name} {setting}")))
    for remark in evaluation.remarks:
        log.warning("%s", remark)
    return write_report(out_dir, evaluation.results, figures, title, notes=notes, remarks=evaluation.remarks)


def _figure(plots: Path, stem: str, draw: Callable, data, **options) -> Path:
    """``draw(data, **options)`` saved as ``plots/<stem>.<format>``, unless the files there show these inputs
    already; returns the PNG's path."""
    from ...eval.plots import FIGURE_FORMATS, save_figure

    target = contained_path(plots, stem)
    record = Path(f"{target}.inputs")
    key = _figure_inputs_digest(draw, data, options)
    paths = [Path(f"{target}.{extension}") for extension in FIGURE_FORMATS]
    try:
        if record.read_text(encoding="utf-8") == key and all(path.is_file() for path in paths):
            return paths[0]
    except OSError:
        pass
    paths = save_figure(draw(data, **options), target)
    # Written after the figures: a run killed while drawing leaves no record, so the next one draws again.
    atomic_write_text(record, key)
    return paths[0]


def _figure_inputs_digest(draw: Callable, data, options: dict) -> str:
    import inspect

    import matplotlib
    import numpy as np

    digest = hashlib.sha256()

    def feed(value) -> None:
        if isinstance(value, np.ndarray):
            array = np.ascontiguousarray(value)
            digest.update(f"array {array.dtype.str} {array.shape}:".encode())
            digest.update(array.tobytes())
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            digest.update(f"{type(value).__qualname__}(".encode())
            for field in dataclasses.fields(value):
                digest.update(f"{field.name}=".encode())
                feed(getattr(value, field.name))
            digest.update(b")")
        elif isinstance(value, (list, tuple)):
            digest.update(f"{type(value).__name__}[{len(value)}](".encode())
            for item in value:
                feed(item)
            digest.update(b")")
        elif isinstance(value, dict):
            digest.update(f"dict[{len(value)}](".encode())
            for name in sorted(value):
                feed(name)
                feed(value[name])
            digest.update(b")")
        elif value is None or isinstance(value, (str, int, float, bool)):
            digest.update(f"{type(value).__name__} {value!r};".encode())
        elif isinstance(value, np.generic):
            feed(value.item())
        else:
            raise TypeError(f"figure input of type {type(value).__name__} has no digest")

    feed(draw.__qualname__)
    feed(matplotlib.__version__)
    feed(_package_source_digest(Path(inspect.getfile(draw)).parent))
    feed(data)
    feed(options)
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def _package_source_digest(package: Path) -> str:
    """The sources of the plotting code's package (``eval/``: the figures draw curves its metrics compute), so
    that a change to any of them draws every figure again."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(f"{path.relative_to(package)}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


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
