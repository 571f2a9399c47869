"""Challenge-style evaluation on a subset of the demo corpus, end to end through the CLI."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from voxanon.data_prep.corpus import read_data_dir, write_data_dir
from voxanon.data_prep.demo_corpus import demo_corpus_dir
from voxanon.data_prep.errors import VoxanonError
from voxanon.eval.results import from_json
from voxanon.pipeline.cli import main

SPEAKERS = ("slt", "us1", "de1", "kal", "rms", "awb")
UTTS_PER_SPEAKER = 6


@pytest.fixture(scope="module")
def small_demo(tmp_path_factory) -> Path:
    """Six demo speakers (3 f, 3 m), six utterances each, with their enrolls and trials."""
    demo = read_data_dir(demo_corpus_dir())
    keep = [u for spk in SPEAKERS for u in demo.spk2utt[spk][:UTTS_PER_SPEAKER]]
    subset = demo.subset(keep)
    subset = replace(subset, wav=subset.absolute_wav(),
                     trials=[t for t in subset.trials if t.enrol_speaker in SPEAKERS])
    target = tmp_path_factory.mktemp("demo") / "small"
    write_data_dir(subset, target)
    return target


@pytest.fixture(scope="module")
def benchmark_run(small_demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    code = main(["benchmark", "--systems", "b2", "--data", str(small_demo), "--out", str(out),
                 "--cache", str(out / "cache"), "--workers", "1"])
    assert code == 0
    return out


def _value(results, system, condition, metric, variant=""):
    matches = [r.value for r in results
               if (r.system, r.condition, r.metric, r.variant) == (system, condition, metric, variant)]
    assert len(matches) == 1, (system, condition, metric, variant, matches)
    return matches[0]


def test_privacy_and_utility_figures_are_plausible(benchmark_run):
    results = from_json((benchmark_run / "results.json").read_text())
    assert _value(results, "original", "o-o", "eer", "kaldi") < 10.0
    assert _value(results, "b2", "o-a", "eer", "kaldi") > _value(results, "original", "o-o", "eer", "kaldi") + 5.0
    wer_original = _value(results, "original", "asr", "wer", "whisper-tiny.en")
    wer_b2 = _value(results, "b2", "asr", "wer", "whisper-tiny.en")
    assert np.isfinite(wer_original) and np.isfinite(wer_b2) and 0.0 <= wer_original < 60.0
    assert _value(results, "b2", "o-a", "zebra_tag") in tuple("0ABCDEF")
    assert -100.0 < _value(results, "b2", "o-a", "deid") <= 100.0
    # McAdams moves formants, not the pitch: the F0 contours stay strongly correlated.
    assert 0.6 < _value(results, "b2", "o-a", "pitch_correlation", "mean") <= 1.0


def test_outputs_and_report_are_written(benchmark_run):
    for name in ("results.json", "results.csv", "results.md", "report.html"):
        assert (benchmark_run / name).is_file(), name
    assert list((benchmark_run / "plots").glob("*_ece_profile.png"))
    assert list((benchmark_run / "plots").glob("*_similarity.pdf"))
    html = (benchmark_run / "report.html").read_text()
    assert "data:image/png;base64," in html and "https://" not in html


def test_rerun_reuses_cached_embeddings_and_transcripts(benchmark_run, small_demo, tmp_path):
    from voxanon.pipeline.evaluation.benchmark import compare
    from voxanon.pipeline.evaluation.protocols import load_protocol
    from voxanon.pipeline.evaluation.sets import discover_sets
    from voxanon.pipeline.feature_cache import ContentCache

    evaluation = compare(discover_sets(small_demo), ["b2"], load_protocol("vpc2022"), benchmark_run, 1,
                         ContentCache(benchmark_run / "cache"), allow_missing=False)
    assert evaluation.computed == 0
    first = from_json((benchmark_run / "results.json").read_text())
    assert sorted(map(str, evaluation.results)) == sorted(map(str, first))


def test_missing_anonymised_utterances_are_listed(benchmark_run, small_demo, tmp_path, capsys):
    anon = tmp_path / "anon"
    shutil.copytree(benchmark_run / "anon" / "small_b2", anon)
    (anon / "wav" / "slt-0006.wav").unlink()
    lines = [line for line in (anon / "wav.scp").read_text().splitlines() if not line.startswith("kal-0005 ")]
    (anon / "wav.scp").write_text("\n".join(lines) + "\n")
    args = ["evaluate", "--orig", str(small_demo), "--anon", str(anon), "--out", str(tmp_path / "ev"),
            "--cache", str(benchmark_run / "cache"), "--set", "asr=null"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "2 utterance(s) have no anonymised audio" in err and "kal-0005" in err and "slt-0006" in err
    assert main(args + ["--allow-missing"]) == 0
    results = json.loads((tmp_path / "ev" / "results.json").read_text())
    target_counts = [r["value"] for r in results if r["metric"] == "n_trials" and r["condition"] == "o-a"
                     and r["variant"] == "target"]
    assert target_counts and target_counts[0] < _value(from_json((benchmark_run / "results.json").read_text()),
                                                       "b2", "o-a", "n_trials", "target")


def test_unknown_layout_is_a_clear_error(tmp_path):
    from voxanon.pipeline.evaluation.sets import discover_sets
    with pytest.raises(VoxanonError, match="VoicePrivacy-layout sets"):
        discover_sets(tmp_path)


def test_missing_anonymised_folder_is_named_as_missing(small_demo, tmp_path):
    from voxanon.pipeline.evaluation.sets import discover_sets
    # Not "a folder of sets: give --suffix", which sent a user with a mistyped --anon after the wrong option.
    with pytest.raises(VoxanonError, match=f"anonymised data {tmp_path / 'typo'}: no such folder"):
        discover_sets(small_demo, tmp_path / "typo")


@pytest.mark.slow
def test_seed_table2_relative_versions_and_calibration_distortion(small_demo, benchmark_run, tmp_path):
    out = tmp_path / "table2"
    assert main(["benchmark", "--systems", "b2,b2r", "--data", str(small_demo), "--out", str(out),
                 "--protocol", "seed-table2", "--cache", str(benchmark_run / "cache"), "--workers", "1"]) == 0
    results = from_json((out / "results.json").read_text())
    assert (out / "anon" / "small_b2r_run2" / "wav.scp").is_file()
    assert not (out / "anon" / "small_b2_run2").exists(), "B2 is deterministic: no second run"
    for method in ("linear", "isotonic"):
        assert np.isfinite(_value(results, "b2r", "o-a", "cece", method))
        assert not [r for r in results if r.system == "b2" and r.metric == "cece"]
    dece = {c: _value(results, s, c, "zebra_dece") for s, c in (("original", "o-o"), ("b2", "o-a"))}
    assert _value(results, "b2", "o-a", "dece_relative", "OP/OO") == pytest.approx(
        100 * (1 - dece["o-a"] / dece["o-o"]))
    assert np.isfinite(_value(results, "b2r", "a-a", "min_cllr_gain", "PP/OO"))
    run2 = read_data_dir(out / "anon" / "small_b2r_run2")
    run1 = read_data_dir(out / "anon" / "small_b2r")
    utt = run1.utterances[0]
    assert run1.audio_path(utt).read_bytes() != run2.audio_path(utt).read_bytes()


def test_sex_protocol_and_inversion_attack(small_demo, benchmark_run, tmp_path):
    out = tmp_path / "sex"
    anon = benchmark_run / "anon" / "small_b2"
    assert main(["evaluate", "--orig", str(small_demo), "--anon", str(anon), "--system", "b2", "--protocol", "sex", "--out", str(out),
                 "--cache", str(benchmark_run / "cache")]) == 0
    results = from_json((out / "results.json").read_text())
    assert _value(results, "original", "sex-original", "eer", "rocch") < 20.0
    for condition in ("sex-ignorant", "sex-informed"):
        assert 0.0 <= _value(results, "b2", condition, "eer", "rocch") <= 100.0
        assert np.isfinite(_value(results, "b2", condition, "zebra_dece"))
    out = tmp_path / "inversion"
    assert main(["evaluate", "--orig", str(small_demo), "--anon", str(anon), "--system", "b2", "--out", str(out), "--cache",
                 str(benchmark_run / "cache"), "--set", "asr=null", "--set", "inversion_attack.method=procrustes"]) == 0
    results = from_json((out / "results.json").read_text())
    assert 0.0 <= _value(results, "b2", "inversion-procrustes", "top1_speaker", "test") <= 100.0
    assert np.isfinite(_value(results, "b2", "inversion-procrustes", "eer", "rocch"))


@pytest.mark.slow
def test_ecapa_model_folder_as_the_speaker_encoder(small_demo, benchmark_run, tmp_path):
    import torch
    from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN

    torch.manual_seed(0)
    model = ECAPA_TDNN(80, lin_neurons=192, channels=[64, 64, 64, 64, 192], attention_channels=16, se_channels=16)
    (tmp_path / "ecapa").mkdir()
    torch.save(model.state_dict(), tmp_path / "ecapa" / "embedding_model.ckpt")
    out = tmp_path / "ecapa_eval"
    args = ["evaluate", "--orig", str(small_demo), "--anon", str(benchmark_run / "anon" / "small_b2"), "--system", "b2",
            "--out", str(out), "--cache", str(tmp_path / "cache"), "--set", "asr=null", "--set", "similarity=false",
            "--set", "pitch_correlation=false", "--set", f"asv.encoder=ecapa:{tmp_path / 'ecapa'}"]
    assert main(args) == 0
    results = from_json((out / "results.json").read_text())
    assert 0.0 <= _value(results, "b2", "o-a", "eer", "kaldi") <= 100.0
    assert [p.name for p in (tmp_path / "cache").iterdir()][0].startswith("ecapa-")
    with pytest.raises(VoxanonError, match="unknown speaker encoder"):
        from voxanon.pipeline.evaluation.computations import speaker_encoder_factory
        speaker_encoder_factory("xvector:/nowhere")


def test_benchmark_report_renders_in_chromium(benchmark_run, tmp_path):
    import subprocess
    import sys

    from PIL import Image

    script = Path(__file__).resolve().parents[2] / "scripts" / "screenshot_report.py"
    shot = tmp_path / "report.png"
    finished = subprocess.run([sys.executable, str(script), str(benchmark_run / "report.html"), str(shot)],
                              capture_output=True, text=True, timeout=180)
    assert finished.returncode == 0, finished.stderr
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    red, green, blue = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    # The similarity matrices are drawn in a yellow-to-red colour map: strong reds exist only if the figure drew.
    assert np.count_nonzero((red > 150) & (green < 90) & (blue < 90)) > 2000
    assert np.count_nonzero((red > 240) & (green > 200) & (blue < 190)) > 2000


def test_plda_scoring_trained_on_other_speakers(small_demo, benchmark_run, tmp_path):
    demo = read_data_dir(demo_corpus_dir())
    others = [u for spk in demo.speakers if spk not in SPEAKERS for u in demo.spk2utt[spk][:6]]
    train = demo.subset(others)
    write_data_dir(replace(train, wav=train.absolute_wav(), enrolls=None, trials=None), tmp_path / "plda_train")
    out = tmp_path / "plda"
    assert main(["evaluate", "--orig", str(small_demo), "--anon", str(benchmark_run / "anon" / "small_b2"),
                 "--system", "b2", "--out", str(out), "--cache", str(benchmark_run / "cache"),
                 "--set", "asr=null", "--set", "similarity=false", "--set", "pitch_correlation=false",
                 "--set", "asv.scoring=plda", "--set", f"asv.plda_train={tmp_path / 'plda_train'}"]) == 0
    results = from_json((out / "results.json").read_text())
    # Seven training speakers give a six-dimensional PLDA: far better than chance, far from cosine's 0%.
    assert _value(results, "original", "o-o", "eer", "kaldi") < 30.0
    assert np.isfinite(_value(results, "b2", "o-a", "cllr"))
    with pytest.raises(VoxanonError, match="needs asv.plda_train"):
        from voxanon.pipeline.evaluation.evaluate import _fit_plda
        _fit_plda({"scoring": "plda"}, None, None)
