"""Protection stages: f0_neutral, zero_llr (flow LLR to ~0), tdpsola (PSOLA pitch, lengths), and the
tdpsola / zllr systems end to end."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.signal
import soundfile

from tests.helpers.corpora import SAMPLE_RATE, make_corpus, synthetic_vowel
from voxanon.data_prep.errors import VoxanonError
from voxanon.models.dsp.f0_transform import NEUTRAL_F0_MEAN_HZ, NEUTRAL_F0_STD_HZ
from voxanon.models.f0.praat_pitch import praat_f0
from voxanon.models.dsp.psola import psola_to_moments
from voxanon.pipeline.cli import main
from voxanon.pipeline.systems.ssl_sas.zllr import F0NeutralStage, TdPsolaStage, ZeroLLRStage
from voxanon.pipeline.systems.stage import Utterance
from voxanon.pipeline.systems.recipes import STAGES, build_system, load_system_config

FORMANTS = [(700.0, 80.0), (1200.0, 120.0), (2500.0, 160.0), (3500.0, 200.0)]


def _utterance(audio=None, **features) -> Utterance:
    audio = np.zeros(3200, dtype=np.float32) if audio is None else audio
    return Utterance("u1", "s1", "f", audio, SAMPLE_RATE, seeds={"utterance": 1, "speaker": 2}, features=features)


def intonated_vowel(contour_hz: np.ndarray, seconds: float, seed: int = 0) -> np.ndarray:
    """A pulse-train vowel whose F0 follows ``contour_hz`` (interpolated over the duration), as speech
    intonation does, through the same formant resonators as ``conftest.synthetic_vowel``."""
    n = int(seconds * SAMPLE_RATE)
    f0 = np.interp(np.linspace(0, 1, n), np.linspace(0, 1, len(contour_hz)), contour_hz)
    source = np.diff(np.floor(np.cumsum(f0 / SAMPLE_RATE)), prepend=0.0)
    signal = scipy.signal.lfilter([1.0], [1.0, -0.95], source)
    for frequency, bandwidth in FORMANTS:
        radius = np.exp(-np.pi * bandwidth / SAMPLE_RATE)
        theta = 2 * np.pi * frequency / SAMPLE_RATE
        signal = scipy.signal.lfilter([1 - radius], [1, -2 * radius * np.cos(theta), radius ** 2], signal)
    rng = np.random.default_rng(seed)
    return (signal / np.max(np.abs(signal)) * 0.5 + 0.002 * rng.standard_normal(n)).astype(np.float32)


def _voiced(f0: np.ndarray) -> np.ndarray:
    return f0[f0 > 0]


# ---------------------------------------------------------------- registration and configuration

def test_stages_are_registered_and_recipes_build():
    assert {"zero_llr", "f0_neutral", "tdpsola"} <= set(STAGES)
    expected = {"zllr": ["zero_llr", "f0_neutral"], "zllr-flow": ["zero_llr"], "zllr-f0": ["f0_neutral"]}
    for name, protections in expected.items():
        system = build_system(load_system_config(name))
        names = [stage.name for stage in system.stages]
        assert names == ["ssl_sas_input", "f0", "content", "speaker", *protections, "vocoder"]
        assert "checkpoint:zllr-vc" in system.needs
        assert ("flow:sex" in system.needs) == ("zero_llr" in protections)
        assert system.config["vocoder"]["layout"] == {"standardise_content": True, "l2_normalise_speaker": True,
                                                      "layer_norm_speaker": False}
    tdpsola = build_system(load_system_config("tdpsola"))
    assert [stage.name for stage in tdpsola.stages] == ["tdpsola"] and tdpsola.needs == []


def test_targets_file_replaces_the_numbers_and_enters_the_configuration(tmp_path):
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"f0_mean_hz": 160.5, "f0_std_hz": 25.0}))
    for stage_class in (F0NeutralStage, TdPsolaStage):
        stage = stage_class(targets=str(targets))
        assert (stage.mean_hz, stage.std_hz) == (160.5, 25.0)
        assert stage.prepare_set(None, tmp_path) == {"mean_hz": 160.5, "std_hz": 25.0}
        assert stage_class().prepare_set(None, tmp_path) == {}
    (tmp_path / "bad.json").write_text(json.dumps({"f0_mean_hz": "high"}))
    with pytest.raises(VoxanonError, match="bad.json: f0_mean_hz must be a number"):
        F0NeutralStage(targets=str(tmp_path / "bad.json"))
    with pytest.raises(VoxanonError, match="nowhere.json: cannot read"):
        TdPsolaStage(targets=str(tmp_path / "nowhere.json"))


def test_invalid_options_are_refused():
    with pytest.raises(ValueError):
        F0NeutralStage(mean_hz=-1.0)
    with pytest.raises(ValueError):
        TdPsolaStage(f0_min_hz=300, f0_max_hz=200)


# ---------------------------------------------------------------- f0_neutral

def test_f0_neutral_maps_voiced_frames_and_records_source_moments():
    rng = np.random.default_rng(3)
    f0 = rng.normal(210.0, 25.0, 300).astype(np.float32)
    f0[rng.random(300) < 0.3] = 0.0
    utt = _utterance(f0=f0)
    F0NeutralStage().process(utt)
    mapped = utt.features["f0"]
    assert mapped.dtype == np.float32 and mapped.shape == f0.shape
    assert np.array_equal(mapped > 0, f0 > 0)
    assert _voiced(mapped).astype(np.float64).mean() == pytest.approx(NEUTRAL_F0_MEAN_HZ, abs=1e-3)
    assert _voiced(mapped).astype(np.float64).std() == pytest.approx(NEUTRAL_F0_STD_HZ, abs=1e-3)
    assert utt.record["f0_source_mean_hz"] == pytest.approx(_voiced(f0).astype(np.float64).mean())
    assert utt.record["f0_voiced_frames"] == int((f0 > 0).sum())
    assert utt.record["f0_frames_at_floor"] == 0


def test_f0_neutral_leaves_an_unvoiced_track_and_needs_f0():
    utt = _utterance(f0=np.zeros(20, dtype=np.float32))
    F0NeutralStage().process(utt)
    assert not np.any(utt.features["f0"]) and utt.record == {"f0_voiced_frames": 0}
    with pytest.raises(VoxanonError, match="put the f0 stage before it"):
        F0NeutralStage().process(_utterance())


# ---------------------------------------------------------------- zero_llr

def _random_flow(directory, *, l2_normalise_input: bool, dim: int = 192):
    import torch

    from voxanon.models.nets.flow import FlowConfig, ZeroLLRFlow, save_flow

    torch.manual_seed(0)
    flow = ZeroLLRFlow(FlowConfig(dim=dim, hidden=32, n_layers=4, zero_init=False,
                                  l2_normalise_input=l2_normalise_input)).eval()
    with torch.no_grad():
        for layer in flow.layers:
            layer.rescale.fill_(0.3)  # non-identity scales, so the flow is not merely affine
        flow.input_shift.copy_(torch.linspace(-0.05, 0.05, dim))
        flow.input_scale.fill_(0.1)
    save_flow(flow, directory)
    return flow


@pytest.mark.parametrize("flow_normalises", [True, False])
def test_zero_llr_zeroes_the_flow_llr_and_normalises_once(voxanon_home, flow_normalises):
    from voxanon.data_prep.vectors import l2_normalise

    flow = _random_flow(voxanon_home / "flows" / "sexy", l2_normalise_input=flow_normalises)
    rng = np.random.default_rng(0)
    raw = rng.normal(0.0, 3.0, (5, 192)).astype(np.float32)
    batch = [_utterance(speaker=vector) for vector in raw]
    stage = ZeroLLRStage(flow="sexy")
    assert stage.needs() == ["flow:sexy"]
    stage.process_batch(batch)
    unit = l2_normalise(raw)
    expected = flow.protect_numpy(raw if flow_normalises else unit)
    before = flow.llr_numpy(unit)
    for utt, protected, llr in zip(batch, expected, before):
        assert utt.features["speaker"].dtype == np.float32
        assert np.allclose(utt.features["speaker"], protected, atol=1e-6)
        assert utt.record["llr_before"] == pytest.approx(llr, abs=1e-5)
        assert abs(utt.record["llr_after"]) < 1e-4
    assert np.max(np.abs(before)) > 0.1  # the source vectors did carry evidence
    if not flow_normalises:
        # The stage normalised: the raw vectors through the flow would give something else.
        assert not np.allclose(flow.protect_numpy(raw), expected, atol=1e-3)


def test_zero_llr_needs_speaker_vectors_and_an_installed_flow(voxanon_home):
    with pytest.raises(VoxanonError, match="put the speaker stage before it"):
        ZeroLLRStage(flow="sex").process_batch([_utterance()])
    with pytest.raises(VoxanonError, match="flow.json is missing"):
        ZeroLLRStage(flow="absent").process_batch([_utterance(speaker=np.ones(192, dtype=np.float32))])


# ---------------------------------------------------------------- TD-PSOLA

def test_psola_shifts_a_flat_vowel_to_the_target_mean():
    vowel = synthetic_vowel(120.0, FORMANTS, 1.5)
    # The vowel's F0 spread is only its 2% vibrato; a small target std keeps that vibrato natural.
    result = psola_to_moments(vowel, SAMPLE_RATE, NEUTRAL_F0_MEAN_HZ, 2.0)
    measured = _voiced(praat_f0(result.audio, SAMPLE_RATE))
    assert result.source.mean_hz == pytest.approx(120.0, rel=0.01)
    assert measured.mean() == pytest.approx(NEUTRAL_F0_MEAN_HZ, rel=0.03)


@pytest.mark.parametrize("contour", [[135.0, 125.0, 110.0, 100.0], [250.0, 235.0, 210.0, 195.0]])
def test_psola_output_pitch_reaches_the_neutral_moments(contour):
    vowel = intonated_vowel(np.array(contour), 1.5)
    result = psola_to_moments(vowel, SAMPLE_RATE, NEUTRAL_F0_MEAN_HZ, NEUTRAL_F0_STD_HZ)
    before = _voiced(praat_f0(vowel, SAMPLE_RATE))
    after = _voiced(praat_f0(result.audio, SAMPLE_RATE))
    assert abs(before.mean() - NEUTRAL_F0_MEAN_HZ) > 0.2 * NEUTRAL_F0_MEAN_HZ
    assert after.mean() == pytest.approx(NEUTRAL_F0_MEAN_HZ, rel=0.03)
    assert after.std() == pytest.approx(NEUTRAL_F0_STD_HZ, rel=0.15)


def test_psola_keeps_the_spectral_envelope():
    import parselmouth

    vowel = intonated_vowel(np.array([125.0, 115.0]), 1.5)
    shifted = psola_to_moments(vowel, SAMPLE_RATE, NEUTRAL_F0_MEAN_HZ, 5.0).audio

    def formants(samples):
        track = parselmouth.Sound(samples.astype(np.float64), SAMPLE_RATE).to_formant_burg(maximum_formant=5000)
        times = np.linspace(0.3, 1.2, 10)
        return np.array([[track.get_value_at_time(k, t) for t in times] for k in (1, 2)]).mean(axis=1)

    # Pitch rises ~30%; the first two formants (the envelope's peaks) stay within 5%.
    assert np.allclose(formants(shifted), formants(vowel), rtol=0.05)


@pytest.mark.parametrize("n_samples", [12345, 16000, 8001])
def test_psola_keeps_length_and_is_deterministic(n_samples):
    vowel = synthetic_vowel(180.0, FORMANTS, 1.0)[:n_samples]
    first = psola_to_moments(vowel, SAMPLE_RATE, NEUTRAL_F0_MEAN_HZ, NEUTRAL_F0_STD_HZ).audio
    second = psola_to_moments(vowel, SAMPLE_RATE, NEUTRAL_F0_MEAN_HZ, NEUTRAL_F0_STD_HZ).audio
    assert len(first) == n_samples and first.dtype == np.float32
    assert np.array_equal(first, second)


def test_psola_leaves_audio_without_pitch_unchanged():
    silence = np.zeros(8000, dtype=np.float32)
    result = psola_to_moments(silence, SAMPLE_RATE, NEUTRAL_F0_MEAN_HZ, NEUTRAL_F0_STD_HZ)
    assert result.source is None and np.array_equal(result.audio, silence)


def test_tdpsola_stage_records_source_moments():
    utt = _utterance(synthetic_vowel(200.0, FORMANTS, 0.8))
    TdPsolaStage().process(utt)
    assert len(utt.audio) == int(0.8 * SAMPLE_RATE)
    assert utt.record["f0_source_mean_hz"] == pytest.approx(200.0, rel=0.02)
    assert utt.record["pitch_points"] > 50


# ---------------------------------------------------------------- systems end to end

def _journal(out_dir) -> dict[str, dict]:
    lines = (out_dir / ".journal.jsonl").read_text().splitlines()
    return {entry["utt"]: entry for entry in map(json.loads, lines)}


def test_tdpsola_system_end_to_end_exact_lengths_and_identical_reruns(tmp_path):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=0.6)
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(["anonymise", "--system", "tdpsola", "--data", str(data.path), "--out", str(out),
                     "--workers", "1", "--quiet"]) == 0
        runs.append(out / f"{data.name}_tdpsola")
    journal = _journal(runs[0])
    for utt, source in data.wav.items():
        produced = soundfile.read(runs[0] / "wav" / f"{utt}.wav")[0]
        assert len(produced) == soundfile.info(source).frames
        assert (runs[0] / "wav" / f"{utt}.wav").read_bytes() == (runs[1] / "wav" / f"{utt}.wav").read_bytes()
        pitch = _voiced(praat_f0(produced.astype(np.float32), SAMPLE_RATE))
        assert pitch.mean() == pytest.approx(NEUTRAL_F0_MEAN_HZ, rel=0.05)
        assert journal[utt]["record"]["f0_source_mean_hz"] > 0


def test_zllr_system_end_to_end_on_random_tiny_models(voxanon_home, tmp_path, capsys):
    assert main(["models", "import", "ssl-sas", "--random-init", "--size", "tiny"]) == 0
    data = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=0.5)
    overrides = ["--set", "content.models=ssl-sas", "--set", "speaker.models=ssl-sas",
                 "--set", "vocoder.models=ssl-sas"]
    command = ["anonymise", "--system", "zllr", "--data", str(data.path), "--workers", "1", "--quiet", *overrides]
    assert main([*command, "--out", str(tmp_path / "missing")]) == 2
    assert "flow 'sex' is not installed" in capsys.readouterr().err
    _random_flow(voxanon_home / "flows" / "sex", l2_normalise_input=True)
    runs = []
    for name in ("a", "b"):
        assert main([*command, "--out", str(tmp_path / name)]) == 0
        runs.append(tmp_path / name / f"{data.name}_zllr")
    journal = _journal(runs[0])
    assert len(journal) == 4
    for utt, source in data.wav.items():
        produced = soundfile.read(runs[0] / "wav" / f"{utt}.wav")[0]
        assert len(produced) == soundfile.info(source).frames // 320 * 320
        assert (runs[0] / "wav" / f"{utt}.wav").read_bytes() == (runs[1] / "wav" / f"{utt}.wav").read_bytes()
        record = journal[utt]["record"]
        assert abs(record["llr_after"]) < 1e-4 < abs(record["llr_before"])
        assert record["f0_source_mean_hz"] > 0 and record["f0_voiced_frames"] > 0
