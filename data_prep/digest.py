"""Content identity of files: sha256, read in blocks so large files need little memory."""
from __future__ import annotations

import hashlib
import os


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_identity(path: str | os.PathLike, content_digest: bool = False) -> dict | None:
    """What a resumed run compares to tell whether an input file changed since its output was made: its size and
    modification time (ns), and with ``content_digest`` its sha256 (which a copy or a ``touch`` keeps, and a
    same-size rewrite within the file system's time resolution does not); None when the file cannot be read."""
    try:
        status = os.stat(path)
        identity = {"size": status.st_size, "mtime_ns": status.st_mtime_ns}
        if content_digest:
            identity["sha256"] = sha256_file(path)
    except OSError:
        return None
    return identity


def same_input(recorded: dict | None, current: dict | None) -> bool:
    """Whether an input recorded by :func:`file_identity` (or as a pipe's ``command``) is the one there now: the
    same size and content digest where both have a digest, else the same size and modification time. An entry
    of a journal older than these records (``recorded`` None) is taken as is."""
    if recorded is None:
        return True
    if current is None:
        return False
    if "command" in recorded or "command" in current:
        return recorded.get("command") == current.get("command")
    if "sha256" in recorded and "sha256" in current:
        return (recorded["size"], recorded["sha256"]) == (current["size"], current["sha256"])
    return (recorded.get("size"), recorded.get("mtime_ns")) == (current["size"], current["mtime_ns"])


def unconfirmed_content(recorded: dict | None, current: dict | None) -> bool:
    """Whether a run that compares content (``current`` carries a sha256) cannot confirm the content of the input
    ``recorded``: a file recorded without a digest (a run without ``--input-digest``), or not recorded at all (a
    journal older than these records). Its size and modification time may match while its content changed (a
    same-size rewrite within the file system's time resolution), so only redoing it can tell."""
    return current is not None and "sha256" in current and (recorded is None or "sha256" not in recorded)
