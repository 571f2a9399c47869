"""``voxanon anonymise --system b3`` on demo-corpus utterances with a tiny random B3 set (``models import sttts
--random-init --size tiny``): every output present, a rerun byte-identical, another seed other bytes, a bad file
in ``failures.tsv``, the GAN index and the prosody factors recorded per utterance; and (slow) the same bytes under
``--workers 2``, under ``--backend ray`` and in the streaming executor's device process (``--device cpu:0``)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import soundfile

from tests.helpers.model_homes import import_random_set
from voxanon.data_prep.corpus import read_data_dir, write_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.pipeline.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def home_and_data(tmp_path_factory):
    """A tiny random B3 set, and three demo utterances of two speakers (their first second) plus a file that is not
    audio."""
    home = import_random_set(tmp_path_factory.mktemp("home"), "sttts")
    demo = read_data_dir(demo_corpus_dir())
    chosen = sorted(demo.spk2utt["slt"])[:2] + sorted(demo.spk2utt["awb"])[:1]
    folder = tmp_path_factory.mktemp("data")
    wav = {}
    for utt in chosen:
        audio, rate = soundfile.read(demo.audio_path(utt), dtype="float32")
        wav[utt] = str(folder / f"{utt}.wav")
        soundfile.write(wav[utt], audio[:rate], rate, subtype="PCM_16")
    broken = folder / "broken.wav"
    broken.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot audio")
    data = dataclasses.replace(demo.subset(chosen), wav={**wav, "slt-broken": str(broken)},
                               utt2spk={**{u: demo.utt2spk[u] for u in chosen}, "slt-broken": "slt"}, name="demo",
                               path=None, text={}, utt2dur={}, enrolls=[], trials=[])
    write_data_dir(data, folder / "demo")
    return home, read_data_dir(folder / "demo"), chosen


def anonymise(data, out, *options) -> int:
    return main(["anonymise", "--system", "b3", "--data", str(data.path), "--out", str(out), "--quiet",
                 *(options if "--workers" in options or "--backend" in options else ("--workers", "1", *options))])


def outputs(out) -> dict[str, bytes]:
    folder = next(p for p in out.iterdir() if p.is_dir())
    return {p.stem: p.read_bytes() for p in sorted((folder / "wav").glob("*.wav"))}


def journal(out) -> dict[str, dict]:
    folder = next(p for p in out.iterdir() if p.is_dir())
    return {e["utt"]: e["record"] for e in map(json.loads, (folder / ".journal.jsonl").read_text().splitlines())}


def failures(out) -> dict[str, str]:
    folder = next(p for p in out.iterdir() if p.is_dir())
    return dict(line.split("\t")[:2] for line in (folder / "failures.tsv").read_text().splitlines()[1:])


def test_anonymise_b3_outputs_records_and_rerun(home_and_data, tmp_path, monkeypatch):
    home, data, chosen = home_and_data
    monkeypatch.setenv("VOXANON_HOME", str(home))
    first, second = tmp_path / "first", tmp_path / "second"
    assert anonymise(data, first) == 1  # the broken file fails, by name
    assert failures(first) == {"slt-broken": "load"}
    produced = outputs(first)
    assert sorted(produced) == sorted(chosen)
    folder = next(p for p in first.iterdir() if p.is_dir())
    for utt in chosen:
        wave, rate = soundfile.read(folder / "wav" / f"{utt}.wav")
        assert rate == 16000 and len(wave) > 0 and np.all(np.isfinite(wave))
    records = journal(first)
    indices = [records[utt]["gan_index"] for utt in chosen]
    assert len(set(indices)) == len(chosen) and all(0 <= i < 5000 for i in indices)  # unused vectors: distinct
    for utt in chosen:
        factors = records[utt]["prosody_factors"]
        assert set(factors) == {"pitch", "energy"}
        assert all(60 <= f < 140 for key in factors for f in factors[key])
    assert anonymise(data, second) == 1
    assert outputs(second) == produced
    assert journal(second) == records
    assert anonymise(data, tmp_path / "seed", "--seed", "3") == 1
    assert outputs(tmp_path / "seed") != produced


@pytest.mark.slow
def test_b3_bytes_do_not_depend_on_workers_backend_or_executor(home_and_data, tmp_path, monkeypatch):
    """Two workers, Ray's one-thread actors (a local two-node cluster) and the streaming executor with every model
    stage on ``cpu:0`` (its device process) give the one-worker run's bytes: every draw comes from the seeds, and
    the GAN deal is computed from the whole set in every process alike."""
    import ray
    from ray.cluster_utils import Cluster

    home, data, chosen = home_and_data
    monkeypatch.setenv("VOXANON_HOME", str(home))
    assert anonymise(data, tmp_path / "local") == 1
    local = outputs(tmp_path / "local")
    assert sorted(local) == sorted(chosen)
    assert anonymise(data, tmp_path / "workers", "--workers", "2") == 1
    assert outputs(tmp_path / "workers") == local
    devices = [f"--set=sttts_{stage}.device=cpu:0" for stage in ("recognise", "prosody", "synthesise")]
    assert anonymise(data, tmp_path / "device", *devices) == 1
    assert outputs(tmp_path / "device") == local
    with monkeypatch.context() as patch:
        patch.setenv("RAY_worker_niceness", "0")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, env_vars={"RAY_worker_niceness": "0"})
        cluster.wait_for_nodes()
        assert anonymise(data, tmp_path / "ray", "--backend", "ray", "--ray-address", cluster.address,
                         "--workers", "2") == 1
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert outputs(tmp_path / "ray") == local
    assert failures(tmp_path / "ray") == {"slt-broken": "load"}


def test_a_model_set_of_another_release_is_refused_before_any_utterance(home_and_data, tmp_path, monkeypatch, capsys):
    home, data, _ = home_and_data
    monkeypatch.setenv("VOXANON_HOME", str(home))
    assert main(["models", "import", "hubert-soft", "--random-init", "--size", "tiny"]) == 0
    capsys.readouterr()
    assert anonymise(data, tmp_path / "wrong", *[f"--set=sttts_{stage}.models=hubert-soft" for stage in
                                                 ("recognise", "speaker", "prosody", "synthesise")]) == 2
    assert "voxanon models import sttts" in capsys.readouterr().err


@pytest.mark.slow
def test_the_batched_synthesis_gives_the_one_at_a_time_output(home_and_data, tmp_path, monkeypatch):
    """The GPU path of ``sttts_synthesise`` (the runner's batch as one padded batch), here on ``cpu:0`` in this
    process (``--executor pool``, one worker), against the one-at-a-time run: the same lengths, the same audio to
    the 16-bit rounding."""
    from voxanon.models.nets.tts import synthesis
    from voxanon.pipeline.systems.tts import stages

    home, data, chosen = home_and_data
    monkeypatch.setenv("VOXANON_HOME", str(home))
    assert anonymise(data, tmp_path / "alone") == 1
    batches = []
    monkeypatch.setattr(stages, "batches_synthesis", lambda device: True)
    real = synthesis.synthesise_batch_48k
    monkeypatch.setattr(synthesis, "synthesise_batch_48k",
                        lambda *args: batches.append(len(args[2])) or real(*args))
    assert anonymise(data, tmp_path / "batched", "--executor", "pool", "--set", "sttts_synthesise.device=cpu:0",
                     "--batch-size", "4") == 1
    assert max(batches) > 1
    for utt in chosen:
        alone = soundfile.read(tmp_path / "alone" / "demo_b3" / "wav" / f"{utt}.wav")[0]
        batched = soundfile.read(tmp_path / "batched" / "demo_b3" / "wav" / f"{utt}.wav")[0]
        assert len(alone) == len(batched) and np.abs(alone - batched).max() <= 2 / 32768
