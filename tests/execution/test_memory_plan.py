"""The memory a run's utterances in flight take, checked before the first utterance against the memory left
(voxanon.pipeline.execution.memory_plan), under a fake cgroup v2 limit laid out as tests/data_prep/test_memory.py
lays one out: batches planned smaller where that gives the same bytes, a run refused in one line where it cannot
fit, an evaluation's batches cut the same way."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.helpers.corpora import make_corpus
from voxanon.data_prep import memory
from voxanon.data_prep.corpus import DataDir, write_data_dir
from voxanon.pipeline.cli import main
from voxanon.pipeline.execution.memory_plan import LOAD_BYTES_PER_SAMPLE, NotEnoughMemory, system_need
from voxanon.pipeline.feature_cache import CachedComputation, ContentCache
from voxanon.pipeline.runner import JOURNAL, anonymise_set
from voxanon.pipeline.systems.mcadams import McAdamsStage
from voxanon.pipeline.systems.recipes import build_system, load_system_config

MB = 10 ** 6
B2_PER_SECOND = (LOAD_BYTES_PER_SAMPLE + McAdamsStage.bytes_per_sample) * 16000  # b2's bytes per second in flight


@pytest.fixture
def limit(tmp_path, monkeypatch):
    """``limit(bytes)``: this process inside a cgroup v2 whose ``memory.max`` leaves that many bytes."""
    root = tmp_path / "machine"
    proc, cgroups = root / "proc", root / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal:       67108864 kB\nMemAvailable:   41943040 kB\n")
    (proc / "self" / "cgroup").write_text("0::/job\n")
    (cgroups / "job").mkdir(parents=True)
    (cgroups / "cgroup.controllers").write_text("memory\n")
    monkeypatch.setattr(memory, "CGROUP_ROOT", cgroups)
    monkeypatch.setattr(memory, "PROC_ROOT", proc)

    def set_limit(room: int) -> None:
        (cgroups / "job" / "memory.max").write_text(f"{room}\n")
        (cgroups / "job" / "memory.current").write_text("0\n")
        (cgroups / "job" / "memory.stat").write_text("anon 0\ninactive_file 0\n")
    return set_limit


def _with_long_file(tmp_path: Path, seconds: float) -> DataDir:
    data = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=1.0)
    long_path = tmp_path / "toy_audio" / "long.wav"
    rng = np.random.default_rng(0)
    soundfile.write(long_path, (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32), 16000,
                    subtype="PCM_16")
    data.wav["spk0-long"], data.utt2spk["spk0-long"] = str(long_path), "spk0"
    data.text["spk0-long"], data.utt2dur["spk0-long"] = "LONG", seconds
    write_data_dir(data, tmp_path / "toy")
    return data


def test_the_declared_figures_make_the_estimate():
    need = system_need(build_system(load_system_config("b2")))
    assert need.per_sample == LOAD_BYTES_PER_SAMPLE + McAdamsStage.bytes_per_sample and need.models == 0


def test_a_stage_figure_may_depend_on_its_settings(tmp_path, monkeypatch):
    """F0's peak depends on its backend (SA-toolkit's port for B5 takes more than the fast YAAPT); a model set
    that runs on the CPU counts its installed files once, however many stages load it."""
    monkeypatch.setenv("VOXANON_HOME", str(tmp_path))
    tag = "hifigan_bn_tdnnf_wav2vec2_vq_48_v1"
    (tmp_path / "models" / tag).mkdir(parents=True)
    (tmp_path / "models" / tag / "final.pt").write_bytes(b"0" * 1000)
    need = system_need(build_system(load_system_config("b5")))
    assert need.per_sample == LOAD_BYTES_PER_SAMPLE + 0.0 + 154.0 + 793.0 + 102.0 and need.models == 1000
    fast = system_need(build_system(load_system_config("b5", ["f0.backend=fast"])))
    assert fast.per_sample == need.per_sample - 54.0
    on_device = system_need(build_system(load_system_config("b5", ["asrbn_bn.device=cuda"])))
    assert on_device.per_sample == need.per_sample - 793.0 and on_device.models == 1000  # the vocoder's, on the CPU


def test_a_file_that_cannot_fit_is_refused_before_any_utterance(tmp_path, limit, capsys):
    """100 s of b2 needs about 50 MB; 40 MB left: one line naming the file, the estimate and the limit, exit 2, no
    utterance done (before: the run started, and a real limit's kernel killed it)."""
    assert 45 * MB < 100.0 * B2_PER_SECOND < 55 * MB
    _with_long_file(tmp_path, 100.0)
    limit(40 * MB)
    code = main(["anonymise", "--system", "b2", "--data", str(tmp_path / "toy"), "--out", str(tmp_path / "out"),
                 "--workers", "1", "--quiet"])
    error = capsys.readouterr().err.strip()
    assert code == 2
    assert len(error.splitlines()) == 1 and "Traceback" not in error
    at_most = int(40 * MB // B2_PER_SECOND)
    assert "long.wav (100 s)" in error and "0.05 GB" in error and "0.04 GB is available" in error
    assert f"files of at most {at_most} s fit" in error and f"max_seconds={at_most}" in error
    assert not list((tmp_path / "out").rglob("*.wav")) and not list((tmp_path / "out").rglob(JOURNAL))


def test_fewer_workers_is_offered_where_one_fits(tmp_path, limit):
    data = _with_long_file(tmp_path, 100.0)
    limit(int(100.5 * B2_PER_SECOND))  # the 100 s file fits alone, not with a 1.1 s one beside it
    with pytest.raises(NotEnoughMemory, match=r"long\.wav .*2 worker\(s\) at once.*--workers 1 fits"):
        anonymise_set(data, load_system_config("b2", ["batch_size=1"]), tmp_path / "out", workers=2, progress=False)


def test_smaller_batches_where_they_fit_give_the_same_bytes(tmp_path, limit, caplog):
    """b2 in batches of 4 utterances of about 5 s (36 MB a batch) with 25 MB left: batches of 2, the same WAVs
    as with ample memory."""
    data = make_corpus(tmp_path, n_speakers=2, n_utts=4, seconds=5.0)
    config = load_system_config("b2", ["batch_size=4"])
    ample = anonymise_set(data, config, tmp_path / "ample", workers=1, progress=False)
    limit(int(2.3 * 5.0 * B2_PER_SECOND))
    with caplog.at_level(logging.INFO, logger="voxanon.pipeline.execution.memory_plan"):
        tight = anonymise_set(data, config, tmp_path / "tight", workers=1, progress=False)
    assert ample.ok and tight.ok and tight.processed == 8
    assert "batches of 2 utterance(s) instead of 4" in caplog.text
    wavs = sorted(path.name for path in (tmp_path / "ample" / "wav").glob("*.wav"))
    assert len(wavs) == 8
    assert all((tmp_path / "ample" / "wav" / name).read_bytes() == (tmp_path / "tight" / "wav" / name).read_bytes()
               for name in wavs)


def test_ample_memory_leaves_the_batches(tmp_path, limit, caplog):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=2, seconds=1.0)
    limit(10 ** 12)
    with caplog.at_level(logging.INFO, logger="voxanon.pipeline.execution.memory_plan"):
        assert anonymise_set(data, load_system_config("b2", ["batch_size=4"]), tmp_path / "out", progress=False).ok
    assert "instead of" not in caplog.text


def _files(tmp_path: Path, seconds: list[float]) -> dict[str, Path]:
    files = {}
    for index, length in enumerate(seconds):
        path = tmp_path / f"f{index}.wav"
        soundfile.write(path, np.full(int(length * 16000), 0.1, dtype=np.float32), 16000, subtype="PCM_16")
        files[f"u{index}"] = path
    return files


def test_an_evaluation_batch_is_cut_to_the_memory_left(tmp_path, limit):
    """Four 10 s files with 100 bytes per sample to compute (17 MB each) and 40 MB left: batches of 2, not one of 4
    (before: one batch of all four, whatever the limit)."""
    sizes = []
    computation = CachedComputation("toy", lambda waves: sizes.append(len(waves)) or [0.0] * len(waves),
                                    batch_size=4, bytes_per_sample=100.0, progress=False)
    limit(40 * MB)
    results = computation.run(_files(tmp_path, [10.0] * 4), ContentCache(None), "toy")
    assert sizes == [2, 2] and len(results) == 4


def test_an_evaluation_file_that_cannot_fit_alone_is_refused_naming_it(tmp_path, limit):
    computation = CachedComputation("toy", lambda waves: [0.0] * len(waves), batch_size=4, bytes_per_sample=100.0,
                                    progress=False)
    limit(10 * MB)
    files = _files(tmp_path, [1.0, 10.0])
    with pytest.raises(NotEnoughMemory, match=r"f1\.wav \(10 s\): needs about 0\.02 GB"):
        computation.run(files, ContentCache(None), "toy")


def test_a_streaming_run_is_refused_not_replanned(tmp_path):
    """The streaming executor's batches shape the output (a stage on a device), so a run whose device batch,
    CPU lane and queue will not fit is refused, with the batch_seconds way out."""
    from voxanon.pipeline.execution.batches import Job
    from voxanon.pipeline.execution.memory_plan import check_streaming

    system = build_system(load_system_config("b2"))
    batches = [[Job(f"u{i}", "s", "f", f"/data/u{i}.wav", str(tmp_path / f"u{i}.wav"), 10.0) for i in range(4)]]
    queue = 40.0 * LOAD_BYTES_PER_SAMPLE * 16000
    fits = int(4 * 10.0 * B2_PER_SECOND + 10.0 * B2_PER_SECOND + queue)
    check_streaming(system, batches, 1, 40.0, fits)
    with pytest.raises(NotEnoughMemory, match=r"/data/u0\.wav \(10 s\).*--set batch_seconds=S"):
        check_streaming(system, batches, 1, 40.0, fits - 1)
