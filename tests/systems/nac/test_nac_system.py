"""``voxanon anonymise --system b4`` on demo-corpus utterances with a tiny random B4 set (``models import nac
--random-init --size tiny``): every output present, lengths within 40 ms of the input's, a rerun byte-identical,
the voice recorded per utterance, the selection modes, and the device code path (``cpu:0``: batched sampling in
the streaming executor's device process) giving the CPU path's output."""
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
    """A tiny random B4 set, and three demo utterances of two speakers (their first second) plus a 10 ms file."""
    home = import_random_set(tmp_path_factory.mktemp("home"), "nac")
    demo = read_data_dir(demo_corpus_dir())
    chosen = sorted(demo.spk2utt["slt"])[:2] + sorted(demo.spk2utt["awb"])[:1]
    folder = tmp_path_factory.mktemp("data")
    wav = {}
    for utt in chosen:
        audio, rate = soundfile.read(demo.audio_path(utt), dtype="float32")
        wav[utt] = str(folder / f"{utt}.wav")
        soundfile.write(wav[utt], audio[:rate], rate, subtype="PCM_16")
    short = folder / "short.wav"
    soundfile.write(short, np.full(160, 0.1, dtype=np.float32), 16000, subtype="PCM_16")
    data = dataclasses.replace(demo.subset(chosen), wav={**wav, "slt-short": str(short)},
                               utt2spk={**{u: demo.utt2spk[u] for u in chosen}, "slt-short": "slt"}, name="demo",
                               path=None, text={}, utt2dur={}, enrolls=[], trials=[])
    write_data_dir(data, folder / "demo")
    return home, read_data_dir(folder / "demo"), chosen


def anonymise(data, out, *options) -> int:
    return main(["anonymise", "--system", "b4", "--data", str(data.path), "--out", str(out), "--workers", "1",
                 "--quiet", *options])


def outputs(out) -> dict[str, bytes]:
    folder = next(p for p in out.iterdir() if p.is_dir())
    return {p.stem: p.read_bytes() for p in sorted((folder / "wav").glob("*.wav"))}


def journal(out) -> dict[str, dict]:
    folder = next(p for p in out.iterdir() if p.is_dir())
    return {e["utt"]: e["record"] for e in map(json.loads, (folder / ".journal.jsonl").read_text().splitlines())}


def test_anonymise_b4_outputs_lengths_and_rerun(home_and_data, tmp_path, monkeypatch):
    home, data, chosen = home_and_data
    monkeypatch.setenv("VOXANON_HOME", str(home))
    first, second = tmp_path / "first", tmp_path / "second"
    assert anonymise(data, first) == 1  # the 10 ms file fails, by name
    folder = next(p for p in first.iterdir() if p.is_dir())
    failures = dict(line.split("\t")[:2] for line in (folder / "failures.tsv").read_text().splitlines()[1:])
    assert failures == {"slt-short": "load"}  # under 25 ms: refused when it is read, before any stage
    produced = outputs(first)
    assert sorted(produced) == sorted(chosen)
    for utt in chosen:
        wave, rate = soundfile.read(folder / "wav" / f"{utt}.wav")
        assert rate == 16000 and np.any(wave != 0)
        assert abs(len(wave) - soundfile.info(data.audio_path(utt)).frames) <= 0.040 * 16000
    voices = json.loads((home / "models" / "nac" / "config.json").read_text())["voices"]
    assert all(record["voice"] in voices for record in journal(first).values())
    assert anonymise(data, second) == 1
    assert outputs(second) == produced
    assert anonymise(data, tmp_path / "seed", "--seed", "3") == 1
    assert outputs(tmp_path / "seed") != produced


@pytest.mark.slow
def test_voice_selection_and_the_device_code_path(home_and_data, tmp_path, monkeypatch):
    """A constant voice, one voice per speaker, an unknown voice refused before any utterance; and ``cpu:0``,
    the device path (batched coarse and fine sampling, in the streaming executor's device process), giving the
    one-at-a-time CPU path's output under deterministic sampling (top-1 coarse, argmax fine)."""
    home, data, chosen = home_and_data
    monkeypatch.setenv("VOXANON_HOME", str(home))
    deterministic = ["--set", "nac_coarse.top_k=1", "--set", "nac_fine.temperature=null"]
    constant = ["--set", "nac_voice.selection=constant", "--set", "nac_voice.constant=random_002"]
    assert anonymise(data, tmp_path / "cpu", *deterministic, *constant) == 1
    assert {r["voice"] for r in journal(tmp_path / "cpu").values()} == {"random_002"}
    devices = [f"--set={stage}.device=cpu:0" for stage in ("nac_semantic", "nac_coarse", "nac_fine", "nac_decode")]
    assert anonymise(data, tmp_path / "device", *deterministic, *constant, *devices) == 1
    cpu, device = outputs(tmp_path / "cpu"), outputs(tmp_path / "device")
    assert sorted(cpu) == sorted(device) == sorted(chosen)
    for utt in chosen:
        a = soundfile.read(tmp_path / "cpu" / "demo_b4" / "wav" / f"{utt}.wav")[0]
        b = soundfile.read(tmp_path / "device" / "demo_b4" / "wav" / f"{utt}.wav")[0]
        assert len(a) == len(b) and np.abs(a - b).max() <= 2 / 32768
    assert anonymise(data, tmp_path / "speaker", "--set", "nac_voice.selection=random_per_spk", *deterministic) == 1
    records = journal(tmp_path / "speaker")
    assert len({records[u]["voice"] for u in chosen[:2]}) == 1  # the two slt utterances
    assert anonymise(data, tmp_path / "bad", "--set", "nac_voice.selection=constant", "--set",
                     "nac_voice.constant=nobody") == 2
