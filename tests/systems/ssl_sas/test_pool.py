"""``voxanon pool build|import|info`` and B1 end to end, on random tiny models."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.audio import load_audio
from voxanon.data_prep.corpus import read_data_dir, write_data_dir
from voxanon.data_prep.vectors import Vectors, write_vectors
from voxanon.models.speakers.pseudo_speaker import POOL_MANIFEST, load_pool
from voxanon.pipeline.cli import main


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A VOXANON_HOME with the tiny random SSL-SAS set, and a pool 'tiny' built from 8 speakers."""
    root = tmp_path_factory.mktemp("pool")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(root / "home"))
        patch.setenv("OMP_NUM_THREADS", "1")
        assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
        corpus = make_corpus(root, n_speakers=8, n_utts=2, seconds=0.5, name="poolsrc")
        assert main(["pool", "build", "--data", str(corpus.path), "--out", "tiny"]) == 0
        yield root, corpus


def test_build_writes_speaker_means_global_and_manifest_last(home, capsys):
    root, corpus = home
    folder = root / "home" / "pools" / "tiny"
    manifest = json.loads((folder / POOL_MANIFEST).read_text())
    assert manifest["speakers_per_sex"] == {"f": 4, "m": 4} and manifest["utterances"] == 16
    assert manifest["random_models"] is True and manifest["models"] == "ssl-sas" and manifest["dim"] == 192
    assert manifest["sources"] == [str(corpus.path.resolve())]
    assert all((folder / POOL_MANIFEST).stat().st_mtime_ns >= f.stat().st_mtime_ns for f in folder.iterdir())
    pool = load_pool(folder)
    utterances = pool.utterances
    # The stored utterance vectors are the set's ECAPA output on the file as read.
    from voxanon.pipeline.systems.ssl_sas.loader import load_ssl_sas_models

    first = utterances.ids[0]
    direct = load_ssl_sas_models("ssl-sas")[1].embed([load_audio(corpus.wav[first], 16000).samples])[0]
    np.testing.assert_allclose(utterances.matrix[0], direct, rtol=1e-5, atol=1e-6)
    for spk in pool.speakers.ids:
        rows = [i for i, u in enumerate(utterances.ids) if corpus.utt2spk[u] == spk]
        np.testing.assert_allclose(pool.speakers.select([spk]).matrix[0], utterances.matrix[rows].mean(axis=0),
                                   rtol=1e-5, atol=1e-6)
    unit = utterances.matrix / np.linalg.norm(utterances.matrix, axis=1, keepdims=True)
    per_speaker = {spk: unit[[i for i, u in enumerate(utterances.ids) if corpus.utt2spk[u] == spk]].mean(axis=0)
                   for spk in corpus.speakers}
    per_sex = [np.mean([v for spk, v in per_speaker.items() if corpus.spk2gender[spk] == s], axis=0) for s in "fm"]
    expected = (per_sex[0] + per_sex[1]) / 2
    np.testing.assert_allclose(pool.global_vector, expected / np.linalg.norm(expected), rtol=1e-5, atol=1e-6)
    assert main(["pool", "info", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "8 speakers (4 f, 4 m)" in out and "RANDOM WEIGHTS" in out


def test_build_reports_unusable_audio_and_missing_sex(home, tmp_path, capsys):
    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=0.5, name="broken")
    bad = Path(corpus.wav["spk1-001"])
    bad.write_bytes(b"RIFF not really a wave file")
    assert main(["pool", "build", "--data", str(corpus.path), "--out", str(tmp_path / "p1")]) == 2
    err = capsys.readouterr().err
    assert "1 utterance(s) could not be embedded" in err and "spk1-001" in err
    assert not (tmp_path / "p1" / POOL_MANIFEST).exists()
    assert main(["pool", "build", "--data", str(corpus.path), "--out", str(tmp_path / "p1"), "--allow-failures"]) == 0
    assert json.loads((tmp_path / "p1" / POOL_MANIFEST).read_text())["failed_utterances"] == ["spk1-001"]
    data = read_data_dir(corpus.path)
    data.spk2gender = {}
    write_data_dir(data, corpus.path)
    assert main(["pool", "build", "--data", str(corpus.path), "--out", str(tmp_path / "p2")]) == 2
    assert "spk2gender: speaker 'spk0' has no sex label" in capsys.readouterr().err


def test_import_kaldi_speaker_and_utterance_vectors(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path / "home"))
    rng = np.random.default_rng(0)
    release = tmp_path / "release" / "libritts_train_other_500_xvector"
    release.mkdir(parents=True)
    utt_ids = [f"{spk}_1000_00000{u}_000000" for spk in ("101", "102", "103", "104") for u in range(3)]
    utterances = Vectors(tuple(utt_ids), rng.standard_normal((12, 192)))
    write_vectors(release / "xvector.scp", utterances)
    spk2gender = tmp_path / "spk2gender"
    spk2gender.write_text("101 F\n102 m\n103 f\n104 M\n105 f\n")
    assert main(["pool", "import", str(tmp_path / "release"), "--spk2gender", str(spk2gender), "--out", "lib"]) == 2
    assert "give --utt2spk or --speaker-from-id" in capsys.readouterr().err
    assert main(["pool", "import", str(tmp_path / "release"), "--spk2gender", str(spk2gender),
                 "--speaker-from-id", "_", "--out", "lib"]) == 0
    pool = load_pool(tmp_path / "home" / "pools" / "lib")
    assert pool.speakers.ids == ("101", "102", "103", "104") and pool.sex["102"] == "m"
    np.testing.assert_allclose(pool.speakers.matrix[0], utterances.matrix[:3].mean(axis=0), atol=1e-6)
    assert len(pool.utterances) == 12
    speakers = Vectors(("101", "102", "103", "104"), rng.standard_normal((4, 192)))
    write_vectors(release / "spk_xvector.ark", speakers)
    assert main(["pool", "import", str(release / "spk_xvector.ark"), "--spk2gender", str(spk2gender),
                 "--out", str(tmp_path / "spk")]) == 0
    pool = load_pool(tmp_path / "spk")
    np.testing.assert_allclose(pool.speakers.matrix, speakers.matrix, atol=1e-6)
    assert pool.utterances is None and "speaker vectors" in pool.metadata["global"]
    spk2gender.write_text("101 f\n102 m\n")
    assert main(["pool", "import", str(release / "spk_xvector.ark"), "--spk2gender", str(spk2gender),
                 "--out", str(tmp_path / "spk")]) == 2
    assert "not speakers of" in capsys.readouterr().err


def anonymise(corpus, out: Path, *extra: str) -> int:
    return main(["anonymise", "--system", "b1", "--data", str(corpus.path), "--out", str(out), "--workers", "1",
                 "--quiet", "--set", "pseudo_speaker.pool=tiny", "--set", "pseudo_speaker.world=3",
                 "--set", "pseudo_speaker.region=2", *extra])


def test_b1_end_to_end_writes_repeatable_pseudo_vectors(home, tmp_path, capsys):
    root, _ = home
    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=0.5, name="src")
    assert anonymise(corpus, tmp_path / "run1") == 0
    assert anonymise(corpus, tmp_path / "run2") == 0
    assert anonymise(corpus, tmp_path / "run3", "--set", "pseudo_speaker.level=utterance") == 0
    assert anonymise(corpus, tmp_path / "run4", "--set", "pseudo_speaker.world=5") == 2
    assert "4 speaker(s) of sex 'f' but the selection needs a world of 5" in capsys.readouterr().err
    pool = load_pool(root / "home" / "pools" / "tiny", with_utterances=False)
    runs = [tmp_path / name / "src_b1" for name in ("run1", "run2", "run3")]
    journals = [{e["utt"]: e for e in map(json.loads, (run / ".journal.jsonl").read_text().splitlines())}
                for run in runs]
    for utt, source in corpus.wav.items():
        first, second = (np.fromfile(run / "pseudo_xvectors" / f"{utt}.xvector", dtype="<f4") for run in runs[:2])
        assert first.shape == (192,) and np.array_equal(first, second)
        assert (runs[0] / "wav" / f"{utt}.wav").read_bytes() == (runs[1] / "wav" / f"{utt}.wav").read_bytes()
        record = journals[0][utt]["record"]["pseudo_speaker"]
        assert record["target_sex"] == corpus.spk2gender[corpus.utt2spk[utt]] and len(record["chosen"]) == 2
        expected = pool.speakers.select(record["chosen"]).matrix.mean(axis=0)
        np.testing.assert_allclose(first, expected, rtol=1e-5, atol=1e-6)
        assert all(pool.sex[spk] == record["target_sex"] for spk in record["chosen"])
        length = soundfile.info(source).frames // 320 * 320
        assert soundfile.info(runs[0] / "wav" / f"{utt}.wav").frames == length
    by_speaker = {}
    for utt in corpus.wav:
        by_speaker.setdefault(corpus.utt2spk[utt], set()).add(
            (runs[0] / "pseudo_xvectors" / f"{utt}.xvector").read_bytes())
    assert all(len(vectors) == 1 for vectors in by_speaker.values())
    assert all(journals[2][u]["record"]["pseudo_speaker"]["level"] == "utterance" for u in corpus.wav)


def test_global_system_end_to_end_is_deterministic(home, tmp_path):
    corpus = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.5, name="src")
    runs = [tmp_path / name for name in ("run1", "run2")]
    for run in runs:
        assert main(["anonymise", "--system", "global", "--data", str(corpus.path), "--out", str(run),
                     "--workers", "1", "--quiet", "--set", "global_speaker.pool=tiny",
                     "--set", "content.models=ssl-sas", "--set", "vocoder.models=ssl-sas"]) == 0
    for utt, source in corpus.wav.items():
        outputs = [run / "src_global" / "wav" / f"{utt}.wav" for run in runs]
        assert outputs[0].read_bytes() == outputs[1].read_bytes()
        assert soundfile.info(outputs[0]).frames == soundfile.info(source).frames // 320 * 320
    journal = [json.loads(line) for line in (runs[0] / "src_global" / ".journal.jsonl").read_text().splitlines()]
    assert all(entry["record"]["global_speaker"] == {"pool": "tiny"} for entry in journal)
    assert all("f0_source_mean_hz" in entry["record"] for entry in journal)
