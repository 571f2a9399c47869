"""Atomic file writes: write to a temporary file beside the target, then rename.

A reader (or a run resumed after ``kill -9``) sees either the old file or the
complete new one, never a partial file.

Temporary files and folders are created with the modes ``open()`` and ``mkdir()`` use
(0666 and 0777 less the umask), not ``tempfile``'s private 0600/0700: the rename keeps
the mode, and corpora and model folders are shared, so outputs must be as readable as any file
the user creates (0644 under the usual umask 022), whatever mode the writing library gave the file.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Callable, Iterator

_ATTEMPTS = 100


def _create_unique(parent: Path, prefix: str, suffix: str, create: Callable[[Path], None]) -> Path:
    """``create`` (which must fail with FileExistsError on a taken name) at a fresh random name."""
    for _ in range(_ATTEMPTS):
        candidate = parent / f"{prefix}{secrets.token_hex(6)}{suffix}"
        try:
            create(candidate)
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"{parent}: no free temporary name {prefix}*{suffix} after {_ATTEMPTS} attempts")


def _create_file(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


def staging_dir(parent: str | os.PathLike, prefix: str) -> Path:
    """A new empty folder in ``parent`` (mode 0777 less the umask, as ``mkdir`` would), to be renamed
    onto its final name once complete."""
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    return _create_unique(parent, prefix, "", Path.mkdir)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto ``target`` on success.

    ``suffix`` defaults to the target's own suffix so that libraries which pick a
    format from the extension (soundfile, numpy, matplotlib) still do so.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = _create_unique(target.parent, f".{target.name}.",
                              (target.suffix if suffix is None else suffix) + ".tmp", _create_file)
    mode = stat.S_IMODE(os.stat(tmp_path).st_mode)
    try:
        yield tmp_path
        # Some writers replace the file with a private one of their own (safetensors' save_file leaves 0600):
        # the target gets the mode this file was created with.
        if stat.S_IMODE(os.stat(tmp_path).st_mode) != mode:
            os.chmod(tmp_path, mode)
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write_text(target: str | os.PathLike, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_bytes(target: str | os.PathLike, data: bytes) -> None:
    with atomic_path(target) as tmp:
        tmp.write_bytes(data)


# The names atomic_path gives its temporary files: ".<target name>.<12 hex digits><suffix>.tmp".
_TEMPORARY_NAME = re.compile(r"^\..+\.[0-9a-f]{12}[^/]*\.tmp$")


def remove_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Removes the temporary files that writes into ``folder`` (and its subfolders) left when their process was
    killed (``kill -9``: no ``finally`` ran); returns them. Only for a folder that no live process writes into,
    such as a run's output folder while the run holds its lock."""
    removed = []
    for parent, _, names in os.walk(folder):
        for name in names:
            if _TEMPORARY_NAME.match(name):
                path = Path(parent, name)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed.append(path)
    return removed


def ensure_writable_folder(folder: str | os.PathLike, option: str) -> Path:
    """``folder`` once a file could be created in it; else one :class:`VoxanonError` naming the option and the
    folder, before any work whose results would have nowhere to go. Folders made for the check are removed again,
    so a run refused later for another reason leaves nothing behind."""
    from .errors import VoxanonError

    folder = Path(folder)
    made = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _create_unique(folder, ".write-check.", ".tmp", _create_file).unlink()
    except OSError as error:
        raise VoxanonError(f"{option} {folder}: cannot write there ({error.strerror or error})") from None
    finally:
        for parent in made:  # deepest first
            with contextlib.suppress(OSError):
                parent.rmdir()
    return folder
