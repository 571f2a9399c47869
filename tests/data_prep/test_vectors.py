import os

import kaldiio
import numpy as np
import pytest

from voxanon.data_prep.errors import VoxanonError
from voxanon.data_prep.vectors import Vectors, l2_normalise, read_vectors, speaker_means, write_vectors


@pytest.fixture
def vectors():
    rng = np.random.default_rng(0)
    ids = ("spkA-utt1", "spkA-utt2", "spkB-utt1")
    return Vectors(ids, rng.normal(size=(3, 5)).astype(np.float32))


@pytest.mark.parametrize("name,text", [("v.ark", False), ("v.ark", True), ("v.scp", False),
                                       ("v.scp", True), ("v.npy", False)])
def test_round_trip(tmp_path, vectors, name, text):
    write_vectors(tmp_path / name, vectors, text=text)
    back = read_vectors(tmp_path / name)
    assert back.ids == vectors.ids
    np.testing.assert_allclose(back.matrix, vectors.matrix, rtol=1e-6)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_binary_and_text_archives_differ_on_disk(tmp_path, vectors):
    write_vectors(tmp_path / "b.ark", vectors)
    write_vectors(tmp_path / "t.ark", vectors, text=True)
    assert (tmp_path / "b.ark").read_bytes().split(b" ", 1)[1].startswith(b"\0B")
    assert b"[" in (tmp_path / "t.ark").read_bytes()


def test_reads_archives_written_by_kaldiio_with_scp(tmp_path, vectors):
    values = {key: row.astype(np.float32) for key, row in zip(vectors.ids, vectors.matrix)}
    kaldiio.save_ark(str(tmp_path / "x.ark"), values, scp=str(tmp_path / "x.scp"))
    np.testing.assert_allclose(read_vectors(tmp_path / "x.scp").matrix, vectors.matrix, rtol=1e-6)
    np.testing.assert_allclose(read_vectors(tmp_path / "x.ark").matrix, vectors.matrix, rtol=1e-6)


def test_scp_with_relative_ark_path_resolves_against_its_folder(tmp_path, vectors, monkeypatch):
    folder = tmp_path / "exp"
    folder.mkdir()
    write_vectors(folder / "v.ark", vectors)
    scp_lines = (tmp_path / "ref.scp")
    write_vectors(scp_lines, vectors)
    offsets = [line.split(":")[-1] for line in scp_lines.read_text().splitlines()]
    (folder / "v.scp").write_text("".join(f"{key} v.ark:{offset}\n" for key, offset in zip(vectors.ids, offsets)))
    monkeypatch.chdir(tmp_path)
    assert read_vectors(folder / "v.scp").ids == vectors.ids


def test_one_row_matrices_count_as_vectors(tmp_path):
    kaldiio.save_ark(str(tmp_path / "m.ark"), {"u1": np.ones((1, 4), np.float32)})
    assert read_vectors(tmp_path / "m.ark").matrix.shape == (1, 4)


def test_speaker_means_average_by_speaker(vectors):
    utt2spk = {"spkA-utt1": "A", "spkA-utt2": "A", "spkB-utt1": "B"}
    means = speaker_means(vectors, utt2spk)
    assert means.ids == ("A", "B")
    np.testing.assert_allclose(means.matrix[0], vectors.matrix[:2].mean(axis=0))
    np.testing.assert_allclose(means.matrix[1], vectors.matrix[2])


def test_speaker_means_name_utterances_without_speaker(vectors):
    with pytest.raises(VoxanonError, match="spkB-utt1"):
        speaker_means(vectors, {"spkA-utt1": "A", "spkA-utt2": "A"})


def test_select_orders_and_reports_missing(vectors):
    assert vectors.select(["spkB-utt1", "spkA-utt1"]).ids == ("spkB-utt1", "spkA-utt1")
    with pytest.raises(VoxanonError, match="nope"):
        vectors.select(["nope"], what="test vectors")


def test_l2_normalise():
    normalised = l2_normalise(np.array([[3.0, 4.0], [0.0, 2.0]]))
    np.testing.assert_allclose(normalised, [[0.6, 0.8], [0.0, 1.0]])
    with pytest.raises(VoxanonError):
        l2_normalise(np.zeros((1, 3)))


def test_errors_name_the_file(tmp_path, vectors):
    np.save(tmp_path / "a.npy", vectors.matrix)
    with pytest.raises(VoxanonError, match="a.ids"):
        read_vectors(tmp_path / "a.npy")
    (tmp_path / "a.ids").write_text("one\ntwo\n")
    with pytest.raises(VoxanonError, match="does not match"):
        read_vectors(tmp_path / "a.npy")
    (tmp_path / "a.ids").write_text("one\none\ntwo\n")
    with pytest.raises(VoxanonError, match=r"a\.npy.*duplicate.*one"):
        read_vectors(tmp_path / "a.npy")
    (tmp_path / "bad.ark").write_bytes(b"garbage without structure")
    with pytest.raises(VoxanonError, match="bad.ark"):
        read_vectors(tmp_path / "bad.ark")
    (tmp_path / "p.scp").write_text("u1 cat something |\n")
    with pytest.raises(VoxanonError, match="command"):
        read_vectors(tmp_path / "p.scp")
    with pytest.raises(VoxanonError, match="unknown vector file type"):
        write_vectors(tmp_path / "v.txt", vectors)
    with pytest.raises(VoxanonError, match="no such"):
        read_vectors(tmp_path / "missing.ark")


def test_non_finite_and_mixed_sizes_rejected(tmp_path):
    kaldiio.save_ark(str(tmp_path / "n.ark"), {"u1": np.array([1.0, np.nan], np.float32)})
    with pytest.raises(VoxanonError, match="non-finite.*u1"):
        read_vectors(tmp_path / "n.ark")
    kaldiio.save_ark(str(tmp_path / "s.ark"), {"u1": np.ones(2, np.float32), "u2": np.ones(3, np.float32)})
    with pytest.raises(VoxanonError, match="different sizes"):
        read_vectors(tmp_path / "s.ark")


def test_ids_with_spaces_cannot_go_to_kaldi(tmp_path):
    with pytest.raises(VoxanonError, match="white space"):
        write_vectors(tmp_path / "v.ark", Vectors(("a b",), np.ones((1, 2))))
    assert not os.listdir(tmp_path)
