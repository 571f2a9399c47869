"""voxanon train asv's data loading: each header read once, int16 batches that are exactly the float samples,
and loader processes that give the in-process batches (so the trained weights do not depend on them)."""
from __future__ import annotations

import json
import multiprocessing

import numpy as np
import pytest
import soundfile
import torch

from voxanon.data_prep.audio import load_audio
from voxanon.data_prep.corpus import DataDir
from voxanon.models.checkpoints.safe import safe_load
from voxanon.pipeline.training.asv.run import train_asv
from voxanon.pipeline.training.asv.data import prepare_training_data, read_training_sets
from voxanon.pipeline.training.asv.loader import ChunkBatches, float_waves
from voxanon.pipeline.training.asv.settings import TRAINING_FILE, resolve_hparams
from voxanon.pipeline.training.asv.trainer import AsvTrainer

from tests.helpers.corpora import make_corpus

from tests.helpers.corpora import single_torch_thread

TINY = {"channels": [16, 16, 16, 16, 48], "lin_neurons": 16, "attention_channels": 8, "se_channels": 8,
        "sentence_len": 1.5, "batch_size": 4, "number_of_epochs": 2, "valid_ratio": 0.25}
CHUNK = 24000


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with single_torch_thread():
        yield


@pytest.fixture(scope="module")
def formats(tmp_path_factory):
    """One speaker per storage form: 16-bit WAV (plain, extensible, with a chunk before the samples) and FLAC,
    float WAV, 24-bit WAV, stereo 16-bit WAV, 22.05 kHz WAV."""
    root = tmp_path_factory.mktemp("formats")
    rng = np.random.default_rng(7)
    forms = {"wav16": ("WAV", "PCM_16", 16000, 1), "wavex16": ("WAVEX", "PCM_16", 16000, 1),
             "listwav16": ("WAV", "PCM_16", 16000, 1), "flac16": ("FLAC", "PCM_16", 16000, 1),
             "float": ("WAV", "FLOAT", 16000, 1), "wav24": ("WAV", "PCM_24", 16000, 1),
             "stereo": ("WAV", "PCM_16", 16000, 2), "rate22k": ("WAV", "PCM_16", 22050, 1)}
    wav, utt2spk = {}, {}
    for speaker, (container, subtype, rate, channels) in forms.items():
        for n in range(2):
            samples = np.clip(0.3 * rng.standard_normal((int(2.2 * rate), channels)), -1, 1).astype(np.float32)
            samples[:4, 0] = [-1.0, 1.0 - 2 ** -15, 0.0, -2 ** -15]  # the extremes of 16-bit PCM
            path = root / f"{speaker}-{n}.{container.lower()}"
            soundfile.write(path, samples if channels > 1 else samples[:, 0], rate, subtype=subtype, format=container)
            if speaker == "listwav16":  # a LIST chunk of odd size (padded) between "fmt " and "data"
                audio = path.read_bytes()
                at = audio.index(b"data")
                path.write_bytes(audio[:at] + b"LIST\x05\x00\x00\x00INFOx\x00" + audio[at:])
            wav[f"{speaker}-{n}"], utt2spk[f"{speaker}-{n}"] = str(path), speaker
    return DataDir(name="formats", wav=wav, utt2spk=utt2spk, path=root)


def _reference_chunk(source: str, start: int) -> np.ndarray:
    """A chunk as float32 16 kHz mono, read the plain way: the whole file decoded (and resampled), then cut."""
    if soundfile.info(source).samplerate == 16000:
        data = soundfile.read(source, dtype="float32", always_2d=True)[0]
        wave = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    else:
        wave = load_audio(source, 16000).samples
    wave = wave[start:start + CHUNK]
    return np.pad(wave, (0, CHUNK - len(wave))).astype(np.float32)


def test_batches_are_int16_pcm_where_every_item_is_and_exactly_the_float_samples(formats):
    h = resolve_hparams(TINY)
    data = prepare_training_data(read_training_sets([formats]), h, progress=False)
    items = data.train + data.valid
    by_speaker = {i.speaker: k for k, i in enumerate(items)}
    # A stereo file is down-mixed in float32: in an int16 row its channel mean was truncated to zero.
    assert {i.speaker for i in items if i.pcm16} == {"wav16", "wavex16", "listwav16", "flac16"}
    assert {i.speaker for i in items if i.data_offset >= 0} == {"wav16", "wavex16", "listwav16"}
    dataset = ChunkBatches({"train": items}, {"train": np.arange(len(items))}, CHUNK, 16000, False)
    starts = {"wav16": 0, "wavex16": 11, "listwav16": 35200 - CHUNK, "flac16": 9000, "float": 100, "wav24": 5,
              "stereo": 1234, "rate22k": 35200 - CHUNK + 1}
    pcm = [(by_speaker[s], starts[s]) for s in ("wav16", "wavex16", "listwav16", "flac16")]
    waves, labels = dataset[("train", pcm)]
    assert waves.dtype == torch.int16 and labels.tolist() == [i for i, _ in pcm]
    mixed = [(by_speaker[s], start) for s, start in starts.items()]
    mixed_waves, _ = dataset[("train", mixed)]
    assert mixed_waves.dtype == torch.float32
    sixteen_bit = [(by_speaker[s], starts[s]) for s in ("wav16", "stereo")]
    sixteen_bit_waves, _ = dataset[("train", sixteen_bit)]
    for batch, picks in ((waves, pcm), (mixed_waves, mixed), (sixteen_bit_waves, sixteen_bit)):
        for row, (index, start) in zip(float_waves(batch), picks):
            expected = _reference_chunk(items[index].source, start)
            assert row.numpy().tobytes() == expected.tobytes(), items[index].speaker


def test_the_chunk_reader_reads_no_header_again(formats, tmp_path, monkeypatch):
    h = resolve_hparams({**TINY, "number_of_epochs": 1})
    data = prepare_training_data(read_training_sets([formats]), h, progress=False)
    trainer = AsvTrainer(h, data, tmp_path / "model", device="cpu", workers=0, progress=False)

    def no_header(*_args, **_kwargs):
        raise AssertionError("a header read again")

    monkeypatch.setattr(soundfile, "info", no_header)
    trainer.train_epoch()
    trainer.validate()
    assert trainer.running["count"] == len(data.train)


def test_loader_processes_give_the_in_process_weights_and_end_with_the_run(tmp_path):
    """Two epochs with validation through two persistent loader processes equal the in-process loader's, bit for
    bit; the processes are gone once train_asv returns."""
    corpus = make_corpus(tmp_path, n_speakers=3, n_utts=4, seconds=2.0)
    runs = {workers: train_asv([corpus.path], tmp_path / f"w{workers}", TINY, device="cpu", workers=workers,
                               progress=False).model_dir for workers in (0, 2)}
    assert multiprocessing.active_children() == []
    first, second = (safe_load(runs[w] / "embedding_model.ckpt") for w in (0, 2))
    assert all(torch.equal(first[key], second[key]) for key in first)
    timing = ("seconds", "utterances_per_s")
    epochs = [[{k: v for k, v in e.items() if k not in timing}
               for e in json.loads((runs[w] / TRAINING_FILE).read_text())["epochs"]] for w in (0, 2)]
    assert epochs[0] == epochs[1] and epochs[0][1]["valid_loss"] is not None
