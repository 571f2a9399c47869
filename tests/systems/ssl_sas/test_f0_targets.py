"""``voxanon f0-targets``: balanced (not pooled) F0 moments, exclusions reported, cache, errors."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.helpers.corpora import SAMPLE_RATE, make_corpus, synthetic_vowel
from voxanon.data_prep.corpus import DataDir, write_data_dir
from voxanon.models.f0.extract import F0Cache, yaapt_f0
from voxanon.models.f0.params import SSL_SAS_YAAPT
from voxanon.pipeline.cli import main
from voxanon.pipeline.systems.ssl_sas.f0_targets import read_f0_targets

# Three female speakers with 1, 2 and 4 utterances, one male speaker with 2: the pooled mean is
# pulled towards the talkative female speaker and towards the larger sex.
SPEAKERS = {"fa": ("f", 190.0, 1), "fb": ("f", 225.0, 2), "fc": ("f", 260.0, 4), "mz": ("m", 105.0, 2)}
FORMANTS = [(650.0, 80.0), (1300.0, 120.0), (2600.0, 160.0)]


def unbalanced_corpus(root: Path) -> DataDir:
    audio_dir = root / "audio"
    audio_dir.mkdir(parents=True)
    wav, utt2spk = {}, {}
    for speaker, (_, f0, count) in SPEAKERS.items():
        for index in range(count):
            utt = f"{speaker}-{index}"
            path = audio_dir / f"{utt}.wav"
            samples = synthetic_vowel(f0 + 6.0 * index, FORMANTS, 0.45 + 0.05 * index, seed=index)
            soundfile.write(path, samples, SAMPLE_RATE, subtype="PCM_16")
            wav[utt], utt2spk[utt] = str(path), speaker
    data = DataDir(name="unbalanced", wav=wav, utt2spk=utt2spk,
                   spk2gender={speaker: sex for speaker, (sex, _, _) in SPEAKERS.items()}, path=root / "unbalanced")
    write_data_dir(data, data.path)
    return data


def prepared_audio(path: str) -> np.ndarray:
    """The audio as the SSL-SAS chain's ssl_sas_input stage hands it on: 320-multiple trim, peak 0.95."""
    audio, _ = soundfile.read(path, dtype="float32")
    audio = audio[:len(audio) // 320 * 320]
    return audio / np.max(np.abs(audio)) * 0.95


def hand_moments(path: str) -> tuple[float, float]:
    f0 = yaapt_f0(prepared_audio(path), SAMPLE_RATE).astype(np.float64)
    voiced = f0[f0 > 0]
    return voiced.mean(), voiced.std()


def run_cli(args: list[str], capsys) -> tuple[int, dict | None, str]:
    code = main(["f0-targets", "--quiet", *args])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out.strip() else None, captured.err


def test_targets_are_the_balanced_average_not_the_pooled_mean(tmp_path, capsys):
    data = unbalanced_corpus(tmp_path)
    cache, out = tmp_path / "cache", tmp_path / "targets.json"
    code, targets, err = run_cli(["--data", str(data.path), "--out", str(out), "--cache-dir", str(cache),
                                  "--workers", "1"], capsys)
    assert code == 0
    moments = {utt: hand_moments(path) for utt, path in data.wav.items()}
    by_speaker = {spk: np.mean([moments[u] for u in moments if data.utt2spk[u] == spk], axis=0) for spk in SPEAKERS}
    female = np.mean([by_speaker[s] for s in ("fa", "fb", "fc")], axis=0)
    male = by_speaker["mz"]
    balanced = (female + male) / 2
    pooled = np.mean(list(moments.values()), axis=0)
    assert targets["f0_mean_hz"] == pytest.approx(balanced[0], rel=1e-9)
    assert targets["f0_std_hz"] == pytest.approx(balanced[1], rel=1e-9)
    assert targets["by_sex"]["f"]["f0_mean_hz"] == pytest.approx(female[0], rel=1e-9)
    assert targets["by_sex"]["m"]["f0_std_hz"] == pytest.approx(male[1], rel=1e-9)
    assert abs(targets["f0_mean_hz"] - pooled[0]) > 20.0  # pooled ≈ 215 Hz, balanced ≈ 170 Hz
    assert targets["speakers_per_sex"] == {"f": 3, "m": 1}
    assert targets["utterances"] == 9
    assert targets["source"] == [str(data.path.resolve())]
    assert targets["excluded"] == {"no_voiced_frames": [], "unusable_audio": {}}
    assert json.loads(out.read_text()) == targets
    assert read_f0_targets(out) == (targets["f0_mean_hz"], targets["f0_std_hz"])
    assert "F0 targets from 9 utterances of 3 f speakers, 1 m speakers" in err
    assert len(list(cache.glob("*.npy"))) == 9
    # A process pool and the warm cache give the same answer.
    code, again, _ = run_cli(["--data", str(data.path), "--cache-dir", str(cache), "--workers", "2"], capsys)
    assert code == 0 and again == targets


def test_unvoiced_and_unusable_utterances_are_reported_and_left_out(tmp_path, capsys):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=3, seconds=0.5)
    cache = tmp_path / "cache"
    # pYAAPT finds some voicing in almost any signal, so the unvoiced track is planted in the cache.
    silent_utt, broken_utt = "spk0-001", "spk1-002"
    prepared = prepared_audio(data.wav[silent_utt])
    key = F0Cache.key(prepared, SAMPLE_RATE, SSL_SAS_YAAPT)
    cache.mkdir()
    np.save(cache / f"{key}.npy", np.zeros(len(prepared) // 160, dtype=np.float32))
    Path(data.wav[broken_utt]).write_bytes(b"not a wav file")
    code, targets, err = run_cli(["--data", str(data.path), "--cache-dir", str(cache), "--workers", "1"], capsys)
    assert code == 1
    assert targets["excluded"]["no_voiced_frames"] == [silent_utt]
    assert list(targets["excluded"]["unusable_audio"]) == [broken_utt]
    assert data.wav[broken_utt] in targets["excluded"]["unusable_audio"][broken_utt]
    assert targets["utterances"] == 4
    assert f"excluded 1 utterance(s) without voiced frames: {silent_utt}" in err
    assert f"UNUSABLE {broken_utt}: {data.wav[broken_utt]}" in err
    used = {u: hand_moments(data.wav[u]) for u in data.wav if u not in (silent_utt, broken_utt)}
    female = np.mean([used[u] for u in used if u.startswith("spk0")], axis=0)  # one speaker per sex
    male = np.mean([used[u] for u in used if u.startswith("spk1")], axis=0)
    assert targets["f0_mean_hz"] == pytest.approx((female[0] + male[0]) / 2, rel=1e-9)


def test_spk2gender_is_required(tmp_path, capsys):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.5)
    (data.path / "spk2gender").unlink()
    code, targets, err = run_cli(["--data", str(data.path), "--no-cache"], capsys)
    assert code == 2 and targets is None
    assert "speaker 'spk0' has no sex label" in err and str(data.path) in err


def test_a_wrong_out_or_workers_is_refused_before_any_f0(tmp_path, capsys, monkeypatch):
    import voxanon.pipeline.systems.ssl_sas.f0_targets as f0_targets

    data = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.5)
    monkeypatch.setattr(f0_targets, "compute_f0_targets", lambda *a, **k: pytest.fail("F0 computed"))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for extra, message in ((["--out", str(blocker / "targets.json")], f"--out {blocker}: cannot write there"),
                           (["--out", str(tmp_path)], f"--out {tmp_path}: is a folder"),
                           (["--workers", "0"], "--workers must be at least 1, not 0")):
        code, targets, err = run_cli(["--data", str(data.path), "--no-cache", *extra], capsys)
        assert code == 2 and targets is None
        assert message in err and len(err.strip().splitlines()) == 1, err


def test_sets_must_agree_on_speakers_and_not_repeat_utterances(tmp_path, capsys):
    first = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.5, name="one")
    second = make_corpus(tmp_path, n_speakers=2, n_utts=1, seconds=0.5, name="two")
    code, _, err = run_cli(["--data", str(first.path), "--data", str(second.path), "--no-cache"], capsys)
    assert code == 2 and "spk0-000" in err and "earlier data set" in err
    (second.path / "spk2gender").write_text("spk0 m\nspk1 f\n")
    relabelled = {f"x{utt}": spk for utt, spk in second.utt2spk.items()}
    (second.path / "utt2spk").write_text("".join(f"{u} {s}\n" for u, s in sorted(relabelled.items())))
    (second.path / "wav.scp").write_text("".join(f"x{u} {p}\n" for u, p in sorted(second.wav.items())))
    for name in ("spk2utt", "text", "utt2dur", "enrolls", "trials"):
        (second.path / name).unlink(missing_ok=True)
    code, _, err = run_cli(["--data", str(first.path), "--data", str(second.path), "--no-cache"], capsys)
    assert code == 2 and "speaker 'spk0' is 'm' here but 'f'" in err


def test_workers_are_forked_with_the_tracker_loaded_and_compute_what_one_process_does(tmp_path, capsys, monkeypatch):
    from voxanon.pipeline.systems.ssl_sas import f0_targets

    data = unbalanced_corpus(tmp_path)
    code, alone, _ = run_cli(["--data", str(data.path), "--no-cache", "--workers", "1"], capsys)
    assert code == 0
    start_methods = []
    pool_class = f0_targets.ProcessPoolExecutor

    def recording_pool(workers, mp_context):
        start_methods.append(mp_context.get_start_method())
        return pool_class(workers, mp_context=mp_context)

    monkeypatch.setattr(f0_targets, "ProcessPoolExecutor", recording_pool)
    # As in a fresh command: the test process may still run the thread of an earlier progress bar.
    monkeypatch.setattr("voxanon.pipeline.execution.pool.fork_safe", lambda: sys.platform == "linux")
    code, pooled, _ = run_cli(["--data", str(data.path), "--no-cache", "--workers", "2"], capsys)
    assert code == 0 and pooled == alone
    # Spawned workers each imported the tracker and loaded its compiled kernels again (2-4 s of CPU each).
    assert start_methods == (["fork"] if sys.platform == "linux" else ["spawn"])
