"""Ids that become file names, and paths that must stay inside their output folder.

Utterance and speaker ids are file names (``wav/<utt>.wav``, ``<name>/<utt>.xvector``, ...),
so an id is usable only if it is one plain path component: no ``/`` or ``\\``, no NUL or
other control character, not ``.`` or ``..``. Readers refuse other ids naming the file and
line (:func:`id_problem`); independently, every writer builds its paths with
:func:`contained_path`, which refuses any path that would leave its folder, so a hostile id
that reached a writer some other way still cannot write outside the output.
"""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from .errors import VoxanonError

# Every control character (Unicode category Cc: U+0000-U+001F, U+007F-U+009F) and the line and
# paragraph separators (Zl, Zp); one regular expression keeps reading a large corpus fast.
_CONTROL = "\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029"
_CONTROL_CHARACTER = re.compile(f"[{_CONTROL}]")
_REFUSED_CHARACTER = re.compile(f"[/\\\\{_CONTROL}]")


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an utterance or speaker id, or None when it can."""
    found = _REFUSED_CHARACTER.search(value)
    if found is None:
        return f"is {value!r}" if value in (".", "..") else None
    character = found.group()
    if character in "/\\":
        return f"contains {character!r}"
    return f"contains a control character (U+{ord(character):04X})"


# Bytes an ASCII text may hold without any word holding a refused character: every ASCII byte but the
# control characters that str.split() does not treat as white space (those cannot be inside a word).
_ASCII_WITHOUT_REFUSED = bytes(c for c in range(128) if not (c <= 0x08 or 0x0e <= c <= 0x1b or c == 0x7f)
                               and chr(c) not in "/\\")


def text_may_hold_refused_character(text: str) -> bool:
    """A fast screen over a whole file (10^6 lines in about 10 ms): False means no whitespace-separated
    word of ``text`` contains a character :func:`id_problem` refuses; True calls for the per-id check."""
    if text.isascii():
        return bool(text.encode("ascii").translate(None, _ASCII_WITHOUT_REFUSED))
    return any(_REFUSED_CHARACTER.search(word) for word in text.split())


def id_message(kind: str, value: str, problem: str) -> str:
    """One reader message for a refused id (the caller prefixes the file and line)."""
    return (f"{kind} id {value!r} {problem}; ids become file names, so they may not contain '/', '\\', "
            "NUL or other control characters, nor be '.' or '..'")


def contained_path(root: str | os.PathLike, *parts: str) -> Path:
    """``root`` joined with ``parts``, refused (:class:`VoxanonError`) unless it lies strictly inside ``root``.

    The check is on the normalised path (``..`` folded, an absolute part caught), not on
    symbolic links: a folder the user linked elsewhere (``wav`` on another disk) stays usable.
    """
    root = Path(root)
    joined = os.path.join(root, *parts)
    for part in parts:
        bad = _CONTROL_CHARACTER.search(part)
        if bad is not None:
            raise VoxanonError(f"unsafe path {joined!r}: it contains a control character "
                               f"(U+{ord(bad.group()):04X})")
    base = os.path.normpath(os.path.abspath(root))
    target = os.path.normpath(os.path.abspath(joined))
    if os.path.commonpath([base, target]) != base or target == base:
        raise VoxanonError(f"unsafe path {joined!r}: it lies outside its folder {str(root)!r} "
                           "(an id or name with '..' or '/')")
    return Path(joined)


def named_folder(root: str | os.PathLike, name: str, what: str) -> Path:
    """``root/name`` for a folder whose name the user's options make (a set's name and ``--suffix``): one plain
    path component, refused as ids are (:func:`id_problem`), naming ``what`` made it."""
    problem = "is empty" if not name else id_problem(name)
    if problem is not None:
        raise VoxanonError(f"{what}: the folder name {name!r} {problem}; it must be one plain folder name "
                           "(no '/', '\\', NUL or other control characters, not '.' or '..')")
    return contained_path(root, name)


LINK_LOOP = "a loop of symbolic links (it never reaches a file or folder)"


def resolved(path: str | os.PathLike, what: str) -> Path:
    """``path`` made absolute with its symbolic links followed, as every input and output folder a command is given
    is compared; a loop of links (which Python 3.11's ``Path.resolve`` reports as a bare RuntimeError, later ones as
    an OSError) is one line naming ``what`` (the option) and the path."""
    try:
        return Path(path).resolve()
    except RuntimeError:
        raise VoxanonError(f"{what} {path}: {LINK_LOOP}") from None
    except OSError as error:
        reason = LINK_LOOP if error.errno == errno.ELOOP else (error.strerror or str(error))
        raise VoxanonError(f"{what} {path}: {reason}") from None


def link_loop(path: str | os.PathLike) -> bool:
    """Whether ``path`` is (or passes through) a loop of symbolic links, which ``is_file``/``is_dir`` call absent."""
    try:
        os.stat(path)
    except OSError as error:
        return error.errno == errno.ELOOP
    return False
