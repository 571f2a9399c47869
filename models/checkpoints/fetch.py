"""Downloading the published releases: a catalogue, resumable verified downloads, safe archive extraction.

For users with internet; everything else in voxanon reads local files. Files go to
``$VOXANON_HOME/downloads/<entry>/``: a download grows in ``<file>.part`` and is resumed
with an HTTP ``Range`` request (from byte 0 again when the server answers 200, i.e.
ignores the range), is checked (size, sha256, Zenodo's md5), and only then renamed onto
``<file>``. Its sha256 is always written to ``<file>.sha256`` (``sha256sum`` format);
when no checksum is published the download cannot be verified, which is said loudly,
with the sha256 to pin (``--sha256``). Archives are unpacked beside the file, refusing
absolute paths, ``..`` and links that leave the target folder. Only the standard
library's ``urllib`` is used.

Checksums: none of the releases publishes a sha256, so the catalogue has none;
bshall names his files after the torch.hub convention (``<name>-<first 8 hex digits of
the sha256>.pt``), which is checked. Zenodo records are listed through the Zenodo REST
API at fetch time, which gives each file's name, size and md5.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tarfile
import time
import urllib.parse
import zipfile
import dataclasses
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ...data_prep.atomic import atomic_write_text, staging_dir
from ...data_prep.errors import VoxanonError
from .catalogue import Release, RemoteFile, release

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60.0
USER_AGENT = "voxanon-fetch (urllib)"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz", ".zip")
COMPLETE_MARKER = ".voxanon-extracted"


class DownloadError(VoxanonError):
    """A download failed, or its checksum or size does not match."""


class UnsafeArchiveError(VoxanonError):
    """An archive member would be written (or link) outside the extraction folder."""


ZENODO_API = "https://zenodo.org/api/records/{record}"


def downloads_dir() -> Path:
    from .registry import voxanon_home

    return voxanon_home() / "downloads"


def _open(url: str, headers: dict[str, str] | None = None):
    # The HTTP and TLS modules load when something is downloaded, not with the command line.
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **(headers or {})})
    return urllib.request.urlopen(request, timeout=TIMEOUT_S)


def zenodo_files(api_url: str) -> tuple[RemoteFile, ...]:
    """The files of a Zenodo record, from its API JSON (current and legacy field names)."""
    import urllib.error

    try:
        with _open(api_url, {"Accept": "application/json"}) as response:
            record = json.loads(response.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise DownloadError(f"could not list the Zenodo record at {api_url}: {error}") from None
    files = []
    for item in record.get("files") or []:
        name = item.get("key") or item.get("filename")
        links = item.get("links") or {}
        url = links.get("self") or links.get("content") or links.get("download")
        if not name or not url or PurePosixPath(name).name != name:
            raise DownloadError(f"{api_url}: unexpected file entry {item!r}")
        checksum = str(item.get("checksum") or "")
        md5 = checksum.split(":", 1)[1] if checksum.startswith("md5:") else None
        size = item.get("size", item.get("filesize"))
        files.append(RemoteFile(url, name, md5=md5, size=int(size) if size is not None else None))
    if not files:
        raise DownloadError(f"{api_url}: the Zenodo record lists no files")
    return tuple(files)


def filename_from_url(url: str) -> str:
    name = PurePosixPath(urllib.parse.urlparse(url).path).name
    if not name or name in (".", ".."):
        raise VoxanonError(f"cannot tell a file name from the URL {url!r}")
    return name


def remote_files(entry: Release, url: str | None = None, sha256: str | None = None) -> tuple[RemoteFile, ...]:
    """What fetching ``entry`` downloads.

    ``url`` (a mirror) replaces the catalogue's URL; a single-file entry keeps its file name and
    checks (a mirror serves the same file), a Zenodo record becomes the one file at ``url``.
    """
    if url is not None and len(entry.files) == 1:
        files = (dataclasses.replace(entry.files[0], url=url),)
    elif url is not None:
        files = (RemoteFile(url, filename_from_url(url)),)
    elif entry.zenodo_record is not None:
        files = zenodo_files(ZENODO_API.format(record=entry.zenodo_record))
    else:
        files = entry.files
    if sha256 is not None:
        if len(files) != 1:
            raise VoxanonError(f"--sha256 pins one file, but {entry.name} has {len(files)}: "
                               f"{', '.join(f.filename for f in files)}")
        files = (dataclasses.replace(files[0], sha256=normalise_sha256(sha256)),)
    return files


def normalise_sha256(text: str) -> str:
    value = text.strip().lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise VoxanonError(f"a sha256 is 64 hex digits, got {text!r}")
    return value


def _digests(path: Path) -> tuple[str, str]:
    sha256, md5 = hashlib.sha256(), hashlib.md5()
    with open(path, "rb") as stream:
        while chunk := stream.read(CHUNK_BYTES):
            sha256.update(chunk)
            md5.update(chunk)
    return sha256.hexdigest(), md5.hexdigest()


def _check(path: Path, remote: RemoteFile) -> str:
    """The file's sha256 after checking size and every known checksum; raises DownloadError on a mismatch."""
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        raise DownloadError(f"{remote.filename}: expected {remote.size} bytes, got {size} (from {remote.url})")
    sha256, md5 = _digests(path)
    expected = [("sha256", remote.sha256, sha256, sha256 == remote.sha256),
                ("sha256 prefix", remote.sha256_prefix, sha256, sha256.startswith(remote.sha256_prefix or "")),
                ("md5", remote.md5, md5, md5 == (remote.md5 or "").lower())]
    for kind, wanted, got, matches in expected:
        if wanted is not None and not matches:
            raise DownloadError(f"{remote.filename}: {kind} mismatch (from {remote.url}): expected {wanted}, "
                                f"got {got}")
    return sha256


def _receive(remote: RemoteFile, part: Path, progress: bool) -> None:
    """One request: append to ``part`` from its current size (or restart it); raises on a short body."""
    import urllib.error

    from tqdm import tqdm

    offset = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    try:
        response = _open(remote.url, headers)
    except urllib.error.HTTPError as error:
        if error.code != 416 or not offset:
            raise
        # The range starts at or past the end: the part is already whole (the server says how long
        # the file is: "bytes */N"), or stale; then start over.
        if (error.headers or {}).get("Content-Range", "") == f"bytes */{offset}":
            return
        part.unlink()
        response = _open(remote.url)
        offset = 0
    with response:
        partial = getattr(response, "status", None) == 206
        resumed = bool(offset) and partial and response.headers.get("Content-Range", "").startswith(f"bytes {offset}-")
        if partial and not resumed:
            part.unlink(missing_ok=True)
            raise ConnectionError(f"asked for bytes {offset}- and got {response.headers.get('Content-Range')!r}; "
                                  "starting over")
        if offset and not resumed:
            log.info("%s: the server ignored the range request; downloading from the start", remote.url)
            offset = 0
        length = response.headers.get("Content-Length")
        expected_bytes = int(length) if length is not None else None
        total = offset + expected_bytes if expected_bytes is not None else remote.size
        received = 0
        with open(part, "ab" if resumed else "wb") as stream, \
                tqdm(total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024,
                     desc=remote.filename, disable=not progress, leave=False) as bar:
            while chunk := response.read(CHUNK_BYTES):
                stream.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
    if expected_bytes is not None and received < expected_bytes:
        raise ConnectionError(f"connection closed after {offset + received} of {offset + expected_bytes} bytes")


def download(remote: RemoteFile, folder: Path, *, attempts: int = 4, progress: bool = True) -> Path:
    """``folder/<filename>``, downloaded (resuming ``.part`` files across attempts and runs) and checked.

    A file already there is checked again instead of downloaded. A checksum mismatch deletes
    the partial file. Returns the path; its sha256 is in ``<path>.sha256``.
    """
    import http.client
    import urllib.error

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / remote.filename
    part = folder / f"{remote.filename}.part"
    if not target.exists():
        if urllib.parse.urlparse(remote.url).scheme == "file":
            attempts = 1
        for attempt in range(1, attempts + 1):
            before = part.stat().st_size if part.exists() else 0
            try:
                _receive(remote, part, progress)
                break
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as error:
                if isinstance(error, urllib.error.HTTPError) and error.code < 500:
                    raise DownloadError(f"{remote.url}: HTTP {error.code} {error.reason}") from None
                have = part.stat().st_size if part.exists() else 0
                if attempt == attempts:
                    kept = f"; {have} bytes kept in {part}, run the same command again to resume" if have else ""
                    raise DownloadError(f"{remote.url}: {getattr(error, 'reason', error)}{kept}") from None
                log.warning("%s: %s; resuming from byte %d (attempt %d of %d)", remote.url, error, have,
                            attempt + 1, attempts)
                if have == before:
                    # No progress: back off before asking again; a dropped transfer resumes at once.
                    time.sleep(min(2.0 ** attempt, 30.0))
        try:
            sha256 = _check(part, remote)
        except DownloadError:
            part.unlink()
            raise
        os.replace(part, target)
    else:
        sha256 = _check(target, remote)
    atomic_write_text(target.with_name(target.name + ".sha256"), f"{sha256}  {target.name}\n")
    if remote.sha256 is None and remote.md5 is None:
        log.warning("%s could not be verified: no published checksum. Its sha256 is %s; pin it with "
                    "--sha256 %s", target, sha256, sha256)
    return target


def is_archive(path: Path) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def archive_stem(path: Path) -> str:
    name = path.name
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[:-len(suffix)]
    return name


def _member_path(name: str, archive: Path) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise UnsafeArchiveError(f"{archive}: member {name!r} would be written outside the extraction folder")
    return path


def _escapes(path: PurePosixPath) -> bool:
    depth = 0
    for part in path.parts:
        depth += -1 if part == ".." else 0 if part == "." else 1
        if depth < 0:
            return True
    return False


def _check_tar_members(tar: tarfile.TarFile, archive: Path) -> None:
    for member in tar.getmembers():
        path = _member_path(member.name, archive)
        if member.issym() or member.islnk():
            link = PurePosixPath(member.linkname)
            resolved = (path.parent / link) if member.issym() else link
            if link.is_absolute() or _escapes(resolved):
                raise UnsafeArchiveError(f"{archive}: link {member.name!r} -> {member.linkname!r} points outside "
                                         "the extraction folder")
        elif not (member.isfile() or member.isdir()):
            raise UnsafeArchiveError(f"{archive}: member {member.name!r} is a device or pipe, refused")


def extract(archive: Path, destination: Path | None = None) -> Path:
    """Unpack a .tar[.gz|.bz2|.xz]/.tgz/.zip into ``destination`` (default: beside it, without the suffix).

    Every member is checked before anything is written; the folder appears complete or not at all.
    """
    destination = destination or archive.with_name(archive_stem(archive))
    if (destination / COMPLETE_MARKER).is_file():
        return destination
    staging = staging_dir(destination.parent, f".{destination.name}.")
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as bundle:
                for name in bundle.namelist():
                    _member_path(name, archive)
                bundle.extractall(staging)
        else:
            try:
                with tarfile.open(archive, "r:*") as tar:
                    _check_tar_members(tar, archive)
                    tar.extractall(staging, filter="data")
            except tarfile.TarError as error:
                raise VoxanonError(f"{archive}: not a readable tar archive ({error})") from None
        (staging / COMPLETE_MARKER).write_text(f"{archive.name}\n", encoding="utf-8")
        if destination.exists():
            shutil.rmtree(destination)
        os.replace(staging, destination)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return destination


@dataclass(frozen=True)
class Fetched:
    entry: Release
    files: tuple[Path, ...]
    folders: tuple[Path, ...]
    """Folders the archives among ``files`` were unpacked to."""


def fetch(name: str, *, url: str | None = None, sha256: str | None = None, progress: bool = True,
          attempts: int = 4) -> Fetched:
    """Download (and unpack) a catalogue entry into ``$VOXANON_HOME/downloads/<name>``."""
    entry = release(name)
    folder = downloads_dir() / entry.name
    files = tuple(download(remote, folder, attempts=attempts, progress=progress)
                  for remote in remote_files(entry, url, sha256))
    folders = tuple(extract(path) for path in files if is_archive(path))
    return Fetched(entry, files, folders)
