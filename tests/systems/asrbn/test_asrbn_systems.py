"""``voxanon anonymise --system b5`` and ``--system b6`` on demo-corpus utterances with tiny random model sets
(``models import sa-toolkit --random-init``): outputs of the input's length, the same bytes for a seed, a
resumed run that redoes only what is missing, bad files in ``failures.tsv``, the chosen targets in the
journal, and the device code path (``cpu:0``: padded batches) giving the CPU path's output."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import soundfile

from voxanon.data_prep.corpus import read_data_dir, write_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.pipeline.cli import main

SYSTEMS = {"b5": "hifigan_bn_tdnnf_wav2vec2_vq_48_v1", "b6": "hifigan_bn_tdnnf_600h_vq_48_v1"}


@pytest.fixture(scope="module")
def home_and_data(tmp_path_factory):
    """Tiny random B5 and B6 sets, and four demo utterances (two speakers) plus a corrupt and a 10 ms file."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VOXANON_HOME", str(home))
        for tag in SYSTEMS.values():
            assert main(["models", "import", "sa-toolkit", "--random-init", "--tag", tag, "--size", "tiny"]) == 0
    demo = read_data_dir(demo_corpus_dir())
    subset = demo.subset([utt for speaker in ("slt", "awb") for utt in sorted(demo.spk2utt[speaker])[:2]])
    folder = tmp_path_factory.mktemp("data")
    corrupt, short = folder / "corrupt.wav", folder / "short.wav"
    corrupt.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really")
    soundfile.write(short, np.full(160, 0.1, dtype=np.float32), 16000, subtype="PCM_16")
    wav = {**subset.absolute_wav(), "slt-corrupt": str(corrupt), "slt-short": str(short)}
    utt2spk = {**subset.utt2spk, "slt-corrupt": "slt", "slt-short": "slt"}
    data = dataclasses.replace(subset, wav=wav, utt2spk=utt2spk, name="demo", path=None, text={}, utt2dur={},
                               enrolls=[], trials=[])
    write_data_dir(data, folder / "demo")
    return home, read_data_dir(folder / "demo")


def anonymise(system, data, out, *options) -> int:
    return main(["anonymise", "--system", system, "--data", str(data.path), "--out", str(out), "--workers", "1",
                 "--quiet", *options])


def outputs(out) -> dict[str, bytes]:
    folder = next(p for p in out.iterdir() if p.is_dir())
    return {p.stem: p.read_bytes() for p in sorted((folder / "wav").glob("*.wav"))}


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_anonymise_is_deterministic_resumable_and_reports_bad_files(system, home_and_data, tmp_path, monkeypatch):
    home, data = home_and_data
    monkeypatch.setenv("VOXANON_HOME", str(home))
    first, second = tmp_path / "first", tmp_path / "second"
    assert anonymise(system, data, first) == 1  # two utterances fail, the rest are written
    folder = next(p for p in first.iterdir() if p.is_dir())
    failures = dict(line.split("\t")[:2] for line in (folder / "failures.tsv").read_text().splitlines()[1:])
    assert failures == {"slt-corrupt": "load", "slt-short": "load"}  # under 25 ms: refused when it is read
    produced = outputs(first)
    assert sorted(produced) == sorted(u for u in data.wav if u not in failures)
    for utt in produced:
        wave, rate = soundfile.read(folder / "wav" / f"{utt}.wav")
        assert rate == 16000 and len(wave) == soundfile.info(data.audio_path(utt)).frames and np.any(wave != 0)
    journal = [json.loads(line) for line in (folder / ".journal.jsonl").read_text().splitlines()]
    assert {entry["utt"] for entry in journal} == set(produced)
    assert all(entry["record"]["target_speaker"].isdigit() for entry in journal)
    # The same bytes for the same seed; other targets for another seed.
    assert anonymise(system, data, second) == 1
    assert outputs(second) == produced
    assert anonymise(system, data, tmp_path / "seed", "--seed", "7") == 1
    assert outputs(tmp_path / "seed") != produced
    # A resumed run redoes what is missing only, bit-identically.
    lost = sorted(produced)[0]
    (folder / "wav" / f"{lost}.wav").unlink()
    assert anonymise(system, data, first) == 1
    assert outputs(first) == produced
    run = json.loads((folder / "run.json").read_text())
    assert run["counts"]["resumed"] == len(produced) - 1


@pytest.mark.slow
@pytest.mark.usefixtures("one_torch_thread")
def test_device_code_path_gives_the_cpu_output(home_and_data, tmp_path, monkeypatch):
    """``cpu:0`` runs the GPU code path on the CPU: F0, wav2vec2 and the converter in padded, masked batches, in
    the streaming executor's device process."""
    home, data = home_and_data
    monkeypatch.setenv("VOXANON_HOME", str(home))
    devices = ["--set", "f0.device=cpu:0", "--set", "asrbn_bn.device=cpu:0", "--set", "asrbn_vocoder.device=cpu:0"]
    anonymise("b5", data, tmp_path / "cpu")
    anonymise("b5", data, tmp_path / "device", *devices)
    cpu, device = outputs(tmp_path / "cpu"), outputs(tmp_path / "device")
    assert sorted(cpu) == sorted(device) and len(cpu) == 4
    for utt in cpu:
        a = soundfile.read(tmp_path / "cpu" / "demo_b5" / "wav" / f"{utt}.wav")[0]
        b = soundfile.read(tmp_path / "device" / "demo_b5" / "wav" / f"{utt}.wav")[0]
        assert len(a) == len(b) and np.abs(a - b).max() <= 2 / 32768  # 16-bit rounding apart, at most


def test_a_set_from_another_release_is_refused_before_any_utterance(home_and_data, tmp_path, monkeypatch, capsys):
    home, data = home_and_data
    monkeypatch.setenv("VOXANON_HOME", str(home))
    assert main(["models", "import", "hubert-soft", "--random-init", "--size", "tiny"]) == 0
    capsys.readouterr()
    assert anonymise("b5", data, tmp_path / "out", "--set", "asrbn_bn.models=hubert-soft") == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "stage 'asrbn_bn'" in error and "model set 'hubert-soft' was not made by voxanon models import sa-toolkit" \
        in error and "voxanon models import sa-toolkit FILE|DIR" in error, error
    assert not list((tmp_path / "out").rglob("*.wav"))


@pytest.mark.slow  # the mechanism: test_runner.py's one-thread test, in the default run
def test_the_bytes_do_not_depend_on_the_drivers_threads(home_and_data, tmp_path, monkeypatch):
    """A batch the driver runs itself, its torch on two threads, gives the bytes that forked workers (which
    inherit two threads and set one) give (two threads split sums, and round, otherwise: B6 differed in the last bits); the driver keeps its
    threads afterwards."""
    import torch

    home, data = home_and_data
    monkeypatch.setenv("VOXANON_HOME", str(home))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)   # the forked workers inherit it, and must set their own
    try:
        assert anonymise("b6", data, tmp_path / "driver", "--batch-size", "8") == 1
        assert torch.get_num_threads() == 2
        assert anonymise("b6", data, tmp_path / "workers", "--batch-size", "1", "--workers", "2") == 1
    finally:
        torch.set_num_threads(threads)
    assert outputs(tmp_path / "driver") == outputs(tmp_path / "workers")
