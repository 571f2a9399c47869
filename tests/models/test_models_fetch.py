"""``voxanon models fetch``: resumable, verified downloads from a loopback HTTP server and file:// URLs."""
from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from voxanon.data_prep.errors import VoxanonError
from voxanon.models.checkpoints import fetch as fetch_module
from voxanon.models.checkpoints.fetch import DownloadError, UnsafeArchiveError, download, extract, fetch, zenodo_files
from voxanon.models.checkpoints.catalogue import RemoteFile
from voxanon.models.nets.flow import load_flow
from voxanon.models.checkpoints.registry import load_model_set
from voxanon.pipeline.cli import main

PAYLOAD = np.random.default_rng(0).bytes(300_000)
PAYLOAD_SHA256 = hashlib.sha256(PAYLOAD).hexdigest()


class LoopbackServer:
    """Serves ``files`` by path with Range support; can drop a transfer or ignore Range, and logs requests."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.drop_after: dict[str, int] = {}
        self.ignore_range: set[str] = set()
        self.wrong_range: set[str] = set()
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                range_header = self.headers.get("Range")
                server.requests.append((self.path, range_header))
                if self.path not in server.files:
                    self.send_error(404)
                    return
                data = server.files[self.path]
                start = 0
                if range_header and self.path not in server.ignore_range:
                    start = int(range_header.removeprefix("bytes=").split("-")[0])
                    if self.path in server.wrong_range:
                        start = 0
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                body = data[start:]
                if self.path in server.drop_after:
                    # Announce the whole body, send part of it, then close: a dropped transfer.
                    body = body[:server.drop_after.pop(self.path) - start]
                self.wfile.write(body)
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    with LoopbackServer() as running:
        yield running


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_unverified_download_records_and_prints_its_sha256(server, home, capsys, caplog):
    server.files["/mirror/hubert_base_ls960.pt"] = PAYLOAD
    assert main(["models", "fetch", "hubert-base", "--url", f"{server.url}/mirror/hubert_base_ls960.pt"]) == 0
    target = home / "downloads" / "hubert-base" / "hubert_base_ls960.pt"
    assert target.read_bytes() == PAYLOAD
    assert (home / "downloads" / "hubert-base" / "hubert_base_ls960.pt.sha256").read_text() == \
        f"{PAYLOAD_SHA256}  hubert_base_ls960.pt\n"
    assert f"sha256 {PAYLOAD_SHA256}" in capsys.readouterr().out
    assert "could not be verified" in caplog.text and f"--sha256 {PAYLOAD_SHA256}" in caplog.text
    assert not list(target.parent.glob("*.part"))
    # Already there: checked again (here against the pin), not downloaded again.
    requests = len(server.requests)
    assert main(["models", "fetch", "hubert-base", "--url", f"{server.url}/mirror/hubert_base_ls960.pt",
                 "--sha256", PAYLOAD_SHA256.upper()]) == 0
    assert len(server.requests) == requests


def test_checksum_mismatch_deletes_the_part_and_names_both_digests(server, home, capsys):
    server.files["/hubert-soft-35d9f29f.pt"] = PAYLOAD
    assert main(["models", "fetch", "hubert-soft", "--url", f"{server.url}/hubert-soft-35d9f29f.pt"]) == 2
    err = capsys.readouterr().err
    assert "hubert-soft-35d9f29f.pt: sha256 prefix mismatch" in err
    assert "expected 35d9f29f" in err and f"got {PAYLOAD_SHA256}" in err
    folder = home / "downloads" / "hubert-soft"
    assert sorted(p.name for p in folder.iterdir()) == []
    with pytest.raises(DownloadError, match=rf"x.bin: sha256 mismatch .*expected {'0' * 64}, got {PAYLOAD_SHA256}"):
        download(RemoteFile(f"{server.url}/hubert-soft-35d9f29f.pt", "x.bin", sha256="0" * 64), folder, progress=False)
    assert not (folder / "x.bin.part").exists() and not (folder / "x.bin").exists()


def test_dropped_transfer_resumes_with_a_range_request(server, tmp_path):
    server.files["/big.bin"] = PAYLOAD
    server.drop_after["/big.bin"] = 120_000
    path = download(RemoteFile(f"{server.url}/big.bin", "big.bin", sha256=PAYLOAD_SHA256), tmp_path, progress=False)
    assert path.read_bytes() == PAYLOAD
    assert server.requests == [("/big.bin", None), ("/big.bin", "bytes=120000-")]


def test_interrupted_run_leaves_a_part_that_the_next_run_resumes(server, tmp_path):
    server.files["/big.bin"] = PAYLOAD
    server.drop_after["/big.bin"] = 70_000
    remote = RemoteFile(f"{server.url}/big.bin", "big.bin", sha256=PAYLOAD_SHA256, size=len(PAYLOAD))
    with pytest.raises(DownloadError, match=r"70000 bytes kept in .*big.bin.part, run the same command again"):
        download(remote, tmp_path, attempts=1, progress=False)
    assert (tmp_path / "big.bin.part").stat().st_size == 70_000 and not (tmp_path / "big.bin").exists()
    download(remote, tmp_path, attempts=1, progress=False)
    assert (tmp_path / "big.bin").read_bytes() == PAYLOAD
    assert server.requests[-1] == ("/big.bin", "bytes=70000-")


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    server.files["/big.bin"] = PAYLOAD
    server.ignore_range.add("/big.bin")
    (tmp_path / "big.bin.part").write_bytes(b"stale bytes from another file")
    download(RemoteFile(f"{server.url}/big.bin", "big.bin", sha256=PAYLOAD_SHA256), tmp_path, progress=False)
    assert (tmp_path / "big.bin").read_bytes() == PAYLOAD
    assert server.requests == [("/big.bin", "bytes=29-")]


def test_a_range_other_than_the_one_asked_for_is_discarded(server, tmp_path):
    server.files["/big.bin"] = PAYLOAD
    server.wrong_range.add("/big.bin")
    (tmp_path / "big.bin.part").write_bytes(PAYLOAD[:5000])
    download(RemoteFile(f"{server.url}/big.bin", "big.bin", sha256=PAYLOAD_SHA256), tmp_path, progress=False)
    assert (tmp_path / "big.bin").read_bytes() == PAYLOAD
    assert server.requests == [("/big.bin", "bytes=5000-"), ("/big.bin", None)]


def test_a_part_past_the_end_is_discarded(server, tmp_path):
    server.files["/small.bin"] = PAYLOAD[:1000]
    (tmp_path / "small.bin.part").write_bytes(bytes(2000))
    download(RemoteFile(f"{server.url}/small.bin", "small.bin"), tmp_path, progress=False)
    assert (tmp_path / "small.bin").read_bytes() == PAYLOAD[:1000]
    assert server.requests == [("/small.bin", "bytes=2000-"), ("/small.bin", None)]


def test_a_whole_part_is_kept_when_the_server_says_so(server, tmp_path):
    server.files["/small.bin"] = PAYLOAD[:1000]
    (tmp_path / "small.bin.part").write_bytes(PAYLOAD[:1000])
    download(RemoteFile(f"{server.url}/small.bin", "small.bin"), tmp_path, progress=False)
    assert (tmp_path / "small.bin").read_bytes() == PAYLOAD[:1000]
    assert server.requests == [("/small.bin", "bytes=1000-")]


def test_missing_file_is_a_clear_error_without_retries(server, tmp_path):
    with pytest.raises(DownloadError, match=r"/nothing.bin: HTTP 404"):
        download(RemoteFile(f"{server.url}/nothing.bin", "nothing.bin"), tmp_path, progress=False)
    assert len(server.requests) == 1
    with pytest.raises(DownloadError, match="nowhere.bin"):
        download(RemoteFile((tmp_path / "nowhere.bin").as_uri(), "nowhere.bin"), tmp_path / "out", progress=False)


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"x", **fields) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if info.isfile() else None)


@pytest.mark.parametrize("name, fields", [
    ("../escape.txt", {}),
    ("/absolute.txt", {}),
    ("inner/../../escape.txt", {}),
    ("inner/link", {"type": tarfile.SYMTYPE, "linkname": "../../outside"}),
    ("inner/abs-link", {"type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}),
    ("hard", {"type": tarfile.LNKTYPE, "linkname": "../outside"}),
    ("fifo", {"type": tarfile.FIFOTYPE}),
])
def test_unsafe_tar_members_are_refused_before_writing(tmp_path, name, fields):
    archive = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        _add(tar, "fine.txt")
        _add(tar, name, b"" if fields else b"evil", **fields)
    with pytest.raises(UnsafeArchiveError, match=r"bad.tar.gz: .*(outside|device or pipe)"):
        extract(archive)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tar.gz"]


def test_unsafe_zip_members_are_refused_and_links_inside_are_kept(tmp_path):
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as bundle:
        bundle.writestr("../escape.txt", "evil")
    with pytest.raises(UnsafeArchiveError, match="'../escape.txt'"):
        extract(tmp_path / "bad.zip")
    with tarfile.open(tmp_path / "good.tgz", "w:gz") as tar:
        _add(tar, "pkg/data.txt", b"payload")
        _add(tar, "pkg/alias", type=tarfile.SYMTYPE, linkname="data.txt")
    folder = extract(tmp_path / "good.tgz")
    assert folder == tmp_path / "good" and (folder / "pkg" / "alias").read_bytes() == b"payload"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.zip", "good", "good.tgz"]


def _release_archive(root: Path, vocoder_subdir: str, archive: Path) -> None:
    """Everything under ``root`` (a release written there in the published layout) as a .zip or .tar.gz."""
    from tests.helpers.ssl_sas_release import write_release

    write_release(root / "pretrained_models_anon_xv", vocoder_subdir=vocoder_subdir)
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive, "w") as bundle:
            for path in sorted(root.rglob("*")):
                bundle.write(path, path.relative_to(root).as_posix())
    else:
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(root / "pretrained_models_anon_xv", arcname="pretrained_models_anon_xv")


@pytest.mark.usefixtures("one_torch_thread")
def test_fetch_import_from_a_file_url_installs_ssl_sas(tmp_path, home, capsys):
    archive = tmp_path / "mirror" / "pretrained_models_anon_xv.tar.gz"
    archive.parent.mkdir()
    _release_archive(tmp_path / "build", "libri_tts_clean_100_fbank_xv_ssl_freeze", archive)
    assert main(["models", "fetch", "ssl-sas", "--url", archive.as_uri(), "--import"]) == 0
    out = capsys.readouterr().out
    unpacked = home / "downloads" / "ssl-sas" / "pretrained_models_anon_xv"
    assert f"unpacked {unpacked}" in out and "installed ssl-sas" in out
    assert (unpacked / "pretrained_models_anon_xv" / "HiFi-GAN").is_dir()
    assert load_model_set("ssl-sas").manifest["source"] == \
        f"SSL-SAS release {unpacked / 'pretrained_models_anon_xv'}"


def test_zenodo_record_is_listed_with_sizes_and_md5(server):
    md5 = hashlib.md5(PAYLOAD).hexdigest()
    record = {"files": [{"key": "models.zip", "size": len(PAYLOAD), "checksum": f"md5:{md5}",
                         "links": {"self": f"{server.url}/files/models.zip/content"}}]}
    server.files["/api/records/1"] = json.dumps(record).encode()
    legacy = {"files": [{"filename": "models.zip", "filesize": 5, "checksum": "md5:ab",
                         "links": {"download": f"{server.url}/legacy"}}]}
    server.files["/api/records/2"] = json.dumps(legacy).encode()
    assert zenodo_files(f"{server.url}/api/records/1") == (
        RemoteFile(f"{server.url}/files/models.zip/content", "models.zip", md5=md5, size=len(PAYLOAD)),)
    assert zenodo_files(f"{server.url}/api/records/2") == (
        RemoteFile(f"{server.url}/legacy", "models.zip", md5="ab", size=5),)
    server.files["/api/records/3"] = json.dumps({"files": [{"key": "../x", "links": {"self": "u"}}]}).encode()
    with pytest.raises(DownloadError, match="unexpected file entry"):
        zenodo_files(f"{server.url}/api/records/3")
    with pytest.raises(DownloadError, match="could not list the Zenodo record"):
        zenodo_files(f"{server.url}/api/records/404")


@pytest.mark.usefixtures("one_torch_thread")
def test_fetch_zllr_vc_from_its_zenodo_record(server, tmp_path, home, monkeypatch, capsys, reference_module):
    torch.manual_seed(0)
    (tmp_path / "build" / "xv_disentanglement_model").mkdir(parents=True)
    torch.save(reference_module.RealNVP(6, 12), tmp_path / "build" / "xv_disentanglement_model" / "model.pt")
    archive = tmp_path / "release.zip"
    _release_archive(tmp_path / "build", "some_model", archive)
    data = archive.read_bytes()
    record = {"files": [{"key": "release.zip", "size": len(data), "checksum": f"md5:{hashlib.md5(data).hexdigest()}",
                         "links": {"self": f"{server.url}/files/release.zip/content"}}]}
    server.files["/api/records/7347685"] = json.dumps(record).encode()
    server.files["/files/release.zip/content"] = data
    monkeypatch.setattr(fetch_module, "ZENODO_API", server.url + "/api/records/{record}")
    assert main(["models", "fetch", "zllr-vc", "--import"]) == 0
    out = capsys.readouterr().out
    assert "installed zllr-vc" in out and "as flow 'sex'" in out
    assert load_model_set("zllr-vc").config["layout"]["standardise_content"] is True
    assert load_flow(home / "flows" / "sex").config.dim == 6
    # A sex flow already installed (perhaps trained by the user) is kept.
    assert main(["models", "fetch", "zllr-vc", "--import"]) == 0
    assert "flows/sex exists and is kept" in capsys.readouterr().out
    # md5 from the record is checked: a corrupted copy is refused.
    server.files["/files/release.zip/content"] = data[:-1] + bytes([data[-1] ^ 1])
    (home / "downloads" / "zllr-vc" / "release.zip").unlink()
    with pytest.raises(DownloadError, match="release.zip: md5 mismatch"):
        fetch("zllr-vc", progress=False)


def test_import_of_a_plain_download_and_unknown_names_are_refused(home, capsys):
    assert main(["models", "fetch", "ssl-sas-pool", "--import"]) == 2
    assert "nothing to --import" in capsys.readouterr().err
    with pytest.raises(VoxanonError, match="known: ssl-sas, hubert-base"):
        fetch("nope")
    with pytest.raises(VoxanonError, match="64 hex digits"):
        fetch("hubert-base", url="file:///x/hubert_base_ls960.pt", sha256="abc")
