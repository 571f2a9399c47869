"""``voxanon models check PATH``: which check a path gets, and the check of an installed model set.

A folder gets its release's check (the catalogue's :func:`~voxanon.models.checkpoints.catalogue.folder_check`), a
file the check of the checkpoint it holds (:func:`~voxanon.models.checkpoints.release_check.check_file`), the name
of an installed model set :func:`check_installed`: every file against its manifest's sha256, then every component
built as a run builds it (its release's ``set_loaders``: strictly, each key and shape against the set's config).
"""
from __future__ import annotations

import json
from pathlib import Path

from ...data_prep.digest import sha256_file
from ...data_prep.errors import VoxanonError
from .catalogue import folder_check, set_release
from .registry import MANIFEST, MODEL_SET_NAME, load_model_set, models_dir
from .release_check import CheckReport, FileReport, OnceReader, check_file, try_import


def check(path: str | Path) -> CheckReport:
    """Inspect an unpacked release folder or one checkpoint file (reading each file once), or an installed model
    set by its name (:func:`check_installed`)."""
    path = Path(path)
    if path.is_dir():
        return folder_check(path).run(path, OnceReader())
    if path.is_file():
        return check_file(path, OnceReader())
    if MODEL_SET_NAME.fullmatch(str(path)) and (models_dir() / str(path) / MANIFEST).is_file():
        return check_installed(str(path))
    raise VoxanonError(f"{path}: no such file or folder, nor an installed model set (voxanon models list)")


def check_installed(name: str, root: Path | None = None) -> CheckReport:
    """An installed model set: every file against its manifest's sha256, then every component built as a run
    builds it (its release's ``set_loaders``: strictly, each key and shape against the set's config)."""
    folder = (root or models_dir()) / name
    report = CheckReport(folder, action="load")
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = dict(manifest["files"])
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        report.problems.append(f"{folder / MANIFEST}: not a readable model set manifest ({type(error).__name__}: "
                               f"{error})")
        return report
    for filename, digest in sorted(files.items()):
        path = folder / filename
        file_report = FileReport(filename, "listed in the manifest", keyed=False)
        if not path.is_file():
            file_report.problems.append(f"{path}: missing")
        elif sha256_file(path) != digest:
            file_report.problems.append(f"{path}: does not match its manifest checksum (a partial copy or an edit)")
        else:
            file_report.notes.append("sha256 matches the manifest")
        report.files.append(file_report)
    if report.all_problems():
        report.problems.append(f"reinstall model set {name!r} (voxanon models import ...)")
        return report
    model_set = load_model_set(name, root, verify=False)
    for component, load in set_release(model_set.config).set_loaders(model_set).items():
        try_import(report, f"{component} ({model_set.weights_file(component).name})",
                   lambda load=load, component=component: {component: load().state_dict()})
    return report
