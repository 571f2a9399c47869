"""Written files follow the user's umask, as open() would: corpora and results are shared with colleagues."""
from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.atomic import atomic_path, atomic_write_bytes, atomic_write_text
from voxanon.models.checkpoints.fetch import extract
from voxanon.pipeline.runner import anonymise_set
from voxanon.pipeline.systems.recipes import load_system_config

UMASKS = [0o022, 0o027]


@pytest.fixture(params=UMASKS, ids=lambda mask: f"umask{mask:03o}")
def umask(request):
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_writes_follow_the_umask(tmp_path, umask):
    atomic_write_text(tmp_path / "a.txt", "text\n")
    atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    with atomic_path(tmp_path / "c.wav") as tmp:
        soundfile.write(tmp, np.zeros(16, dtype=np.float32), 16000, format="WAV")
    with atomic_path(tmp_path / "d.npy") as tmp, open(tmp, "wb") as handle:
        np.save(handle, np.zeros(3))
    with open(tmp_path / "plain.txt", "w") as handle:
        handle.write("as open() makes it\n")
    expected = 0o666 & ~umask
    assert _mode(tmp_path / "plain.txt") == expected
    assert {name: _mode(tmp_path / name) for name in ("a.txt", "b.bin", "c.wav", "d.npy")} == \
        dict.fromkeys(("a.txt", "b.bin", "c.wav", "d.npy"), expected)


def test_an_anonymised_set_is_readable_by_the_group(tmp_path, umask):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.3)
    out_dir = tmp_path / "out" / "toy_b2"
    assert anonymise_set(data, load_system_config("b2"), out_dir, progress=False).ok
    files = [p for p in out_dir.rglob("*") if p.is_file()]
    assert {"wav.scp", "utt2spk", "run.json", "failures.tsv"} <= {p.name for p in files}
    assert len([p for p in files if p.suffix == ".wav"]) == 2
    assert {str(p.relative_to(out_dir)): oct(_mode(p)) for p in files} == \
        {str(p.relative_to(out_dir)): oct(0o666 & ~umask) for p in files}
    folders = [out_dir, *(p for p in out_dir.rglob("*") if p.is_dir())]
    assert {oct(_mode(p)) for p in folders} == {oct(0o777 & ~umask)}


def test_an_extracted_model_folder_follows_the_umask(tmp_path, umask):
    archive = tmp_path / "models.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        member = tarfile.TarInfo("weights.bin")
        member.size, member.mode = 4, 0o644
        tar.addfile(member, io.BytesIO(b"1234"))
    folder = extract(archive)
    assert _mode(folder) == 0o777 & ~umask


def test_an_installed_model_set_follows_the_umask(tmp_path, umask):
    """Safetensors wrote each weights file 0600 beside a 0644 manifest, so a group could not read
    a model folder it shared."""
    import torch

    from voxanon.models.checkpoints.registry import write_model_set

    folder = write_model_set("shared", {"content": {"w": torch.zeros(2, 3)}}, {"content": {}}, source="test",
                             random=True, root=tmp_path / "models")
    files = sorted(p.name for p in folder.iterdir())
    assert "content.safetensors" in files
    assert {name: oct(_mode(folder / name)) for name in files} == dict.fromkeys(files, oct(0o666 & ~umask))
