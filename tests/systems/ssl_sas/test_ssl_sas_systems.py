"""Every shipped system end to end on demo-corpus utterances, with random models in the imported formats.

The neural systems run on tiny random model sets written by ``voxanon models import ... --random-init``
(the published layouts, marked random), a pool built by ``voxanon pool build`` and a sex flow trained by
``voxanon train sex-flow``: the same commands a user runs with real checkpoints. Each system's output
has the documented length (the input, or the input trimmed to a multiple of 320 samples for the SSL-SAS
chain) and a second run into a fresh folder is bit-identical.
"""
from __future__ import annotations


import numpy as np
import pytest
import soundfile

from voxanon.pipeline.cli import main
from voxanon.pipeline.systems.recipes import available_systems, build_system, load_system_config
from tests.helpers.demo_sets import SMALL_POOL

# The demo pool is tiny: worlds and regions scaled down (the recipe's 200/100 need a LibriTTS-size pool).


# B4 runs in tests/systems/nac/test_nac_system.py, on shorter utterances (its Bark loops make these 8 cost tens of seconds),
# with the same checks and its own lengths (the chain's, within 40 ms of the input's); B3 in
# tests/systems/tts/test_b3_system.py (its own model set, and the chain's own lengths).
@pytest.mark.parametrize("system", [name for name in available_systems() if name not in ("b3", "b4")])
def test_every_system_runs_end_to_end_bit_identically(system, installed_home, tmp_path, monkeypatch):
    home, data = installed_home
    monkeypatch.setenv("VOXANON_HOME", str(home))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    stages = load_system_config(system)["stages"]
    overrides = SMALL_POOL if "pseudo_speaker" in stages else []
    neural = "vocoder" in stages
    if "f0" in stages:
        overrides += ["--set", f"f0.cache_dir={home / 'f0-cache'}"]
    outputs = []
    for run in ("first", "second"):
        out = tmp_path / run
        assert main(["anonymise", "--system", system, "--data", str(data.path), "--out", str(out),
                     "--workers", "1", "--quiet", *overrides]) == 0
        outputs.append(next(p for p in out.iterdir() if p.is_dir()))
    for utt in data.utterances:
        source = soundfile.info(data.audio_path(utt)).frames
        first = outputs[0] / "wav" / f"{utt}.wav"
        produced, rate = soundfile.read(first)
        assert rate == 16000
        assert len(produced) == (source // 320 * 320 if neural else source), utt
        assert np.any(produced != 0)
        assert first.read_bytes() == (outputs[1] / "wav" / f"{utt}.wav").read_bytes(), utt
    if system == "b1":
        vectors = sorted((outputs[0] / "pseudo_xvectors").glob("*.xvector"))
        assert len(vectors) == len(data.utterances)
        assert all(v.read_bytes() == (outputs[1] / "pseudo_xvectors" / v.name).read_bytes() for v in vectors)


def test_every_system_states_its_needs():
    needs = {name: build_system(load_system_config(name)).needs for name in available_systems()}
    assert needs["b1"] == ["checkpoint:ssl-sas", "pool:libritts-other-500", "spk2gender"]
    assert set(needs["zllr"]) == {"checkpoint:zllr-vc", "flow:sex"}
    assert needs["tdpsola"] == [] and needs["b2"] == []


def test_systems_command_names_missing_installs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path))
    assert main(["systems"]) == 0
    out = capsys.readouterr().out
    assert "MISSING: pool 'libritts-other-500' is not installed" in out and "voxanon pool build" in out
    assert "MISSING: flow 'sex' is not installed" in out and "voxanon train sex-flow" in out


@pytest.mark.parametrize("system, broken, workers", [
    ("zllr", "flows/sex/flow.safetensors", 1), pytest.param("zllr", "flows/sex/flow.safetensors", 2, marks=pytest.mark.slow),
    pytest.param("global", "pools/libritts-other-500/global.npy", 2, marks=pytest.mark.slow),
    ("b1", "pools/libritts-other-500/speakers.npy", 1)])
def test_a_broken_flow_or_pool_stops_the_run_once(system, broken, workers, installed_home, tmp_path, monkeypatch,
                                                  capsys):
    """A flow or pool that cannot be read is the run's fault, found before any utterance (it failed
    every utterance, one failures.tsv line each, when the stage first read it)."""
    import shutil

    home, data = installed_home
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    target = copy / broken
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    monkeypatch.setenv("VOXANON_HOME", str(copy))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    code = main(["anonymise", "--system", system, "--data", str(data.path), "--out", str(tmp_path / "out"),
                 "--workers", str(workers), "--quiet", *(SMALL_POOL if system == "b1" else [])])
    assert code == 2
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if "error" in line.lower()]) == 1, err
    out = next((tmp_path / "out").iterdir())
    assert not list(out.rglob("*.wav")) and not (out / "failures.tsv").exists()
