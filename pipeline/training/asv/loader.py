"""How ``voxanon train asv`` reads its batches (:mod:`voxanon.pipeline.training.asv`): chunks read from the audio as
stored, the batches of an epoch, the loader's dataset and sampler, and the memory a CPU run's batches need."""
from __future__ import annotations

import os

import numpy as np

from ....data_prep.errors import VoxanonError
from ....data_prep.memory import available_memory
from .data import TrainingUtterance

# The largest exact float32 scale of 16-bit PCM (libsndfile's): int16 / 32768 is every float32 read of such a file.
PCM16_SCALE = 1.0 / 32768


def read_chunk_into(row: np.ndarray, item: TrainingUtterance, start: int, sample_rate: int,
                    allow_pipes: bool) -> None:
    """``len(row)`` samples of the utterance from ``start`` into ``row`` (16 kHz mono; int16 for a
    :attr:`TrainingUtterance.pcm16` item into an int16 row, float32 otherwise). Only that span is read when the
    file is at the rate: a mono 16-bit WAV file's bytes as they are (libsndfile's values, without its opening,
    seeking and converting, which cost three times the read), others through libsndfile. Samples past the end
    (a resampled length can fall a sample short of the header's estimate) are zero."""
    import soundfile

    from ....data_prep.audio import load_audio

    if item.data_offset >= 0 and row.dtype == np.int16:
        with open(item.source, "rb", buffering=0) as stream:
            stream.seek(item.data_offset + 2 * start)
            read = stream.readinto(row.view(np.uint8)) // 2
        row[read:] = 0
        return
    if item.seekable:
        with soundfile.SoundFile(item.source) as audio:
            audio.seek(start)
            if item.channels == 1:
                audio.read(len(row), dtype=row.dtype.name, fill_value=0, out=row)
                return
            wave = audio.read(len(row), dtype="float32", always_2d=True).mean(axis=1)
    else:
        wave = load_audio(item.source, sample_rate, allow_pipe=allow_pipes).samples[start:start + len(row)]
    row[:len(wave)] = wave
    row[len(wave):] = 0


def epoch_batches(n_items: int, choices: np.ndarray, batch_size: int, seed: int, epoch: int
                  ) -> list[list[tuple[int, int]]]:
    """(item, chunk start) batches of one epoch: a permutation and starts drawn from (seed, epoch) alone."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n_items)
    starts = (rng.random(n_items) * choices).astype(np.int64)
    pairs = [(int(i), int(starts[i])) for i in order]
    batches = [pairs[k:k + batch_size] for k in range(0, n_items, batch_size)]
    if len(batches) > 1 and len(batches[-1]) == 1:
        # ECAPA's batch norm after pooling cannot train on one item: it joins the batch before.
        last = batches.pop()
        batches[-1] = batches[-1] + last
    return batches


class ChunkBatches:
    """The training loader's map-style dataset. A key is ``(kind, picks)``: ``"train"`` or ``"valid"`` and one
    batch's (item, chunk start) pairs; its value is ``(waves (B, chunk), labels (B,))``.

    ``waves`` is int16 when every item of the batch is 16-bit PCM at the rate (the samples as stored:
    :func:`float_waves` turns them into exactly the float32 values libsndfile reads, on the device, at half the
    bytes through the loader), float32 otherwise. In a loader process the batch is assembled in shared memory,
    so that handing it to the training process copies nothing.
    """

    def __init__(self, items: dict[str, list[TrainingUtterance]], labels: dict[str, np.ndarray], chunk: int,
                 sample_rate: int, allow_pipes: bool):
        self.items, self.labels = items, labels
        self.chunk, self.sample_rate, self.allow_pipes = chunk, sample_rate, allow_pipes

    def __getitem__(self, key: tuple[str, list[tuple[int, int]]]):
        import torch

        kind, picks = key
        items = self.items[kind]
        dtype = torch.int16 if all(items[i].pcm16 for i, _ in picks) else torch.float32
        waves = _batch_tensor((len(picks), self.chunk), dtype)
        for row, (i, start) in zip(waves.numpy(), picks):
            read_chunk_into(row, items[i], start, self.sample_rate, self.allow_pipes)
        return waves, torch.from_numpy(self.labels[kind][[i for i, _ in picks]])


def _batch_tensor(shape: tuple[int, int], dtype):
    """An uninitialised tensor, in shared memory inside a loader process (what torch's default collate does)."""
    import torch

    if torch.utils.data.get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    storage = torch.UntypedStorage._new_shared(shape[0] * shape[1] * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


class BatchKeys:
    """The loader's sampler: the keys of the batches the trainer asks for next (set before each pass)."""

    def __init__(self):
        self.kind, self.batches = "train", []

    def __iter__(self):
        return ((self.kind, picks) for picks in self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def float_waves(waves):
    """A loader batch as float32 samples: int16 PCM scaled by 2^-15 (exact), float32 as it is."""
    return waves if waves.is_floating_point() else waves.float().mul_(PCM16_SCALE)


# The CPU training process's peak RSS: a fixed part and a part per chunk of the largest batch, for the recipe's
# network on 3 s chunks (other widths and chunk lengths scale the latter by their channels x frames). A line
# above every peak measured with glibc (benchmarks/train_asv_memory.py, docs/training.md): 3.78 GB at batch 32,
# 5.12 GB at 64, 9.17 GB at 128, and issue 30's 14.3 GB for a batch of 243 (estimates 4.1, 5.8, 9.2, 15.3 GB).
CPU_BASE_BYTES = 2.4e9
CPU_BYTES_PER_CHUNK = 53e6
_RECIPE_CHANNELS, _RECIPE_SENTENCE_LEN = 3584, 3.0


def training_memory_estimate(h: dict, batch_items: int) -> int:
    """Bytes the CPU training process needs at its peak for batches of ``batch_items`` chunks."""
    scale = sum(h["channels"]) / _RECIPE_CHANNELS * h["sentence_len"] / _RECIPE_SENTENCE_LEN
    return int(CPU_BASE_BYTES + CPU_BYTES_PER_CHUNK * scale * batch_items)


def largest_batch(n_train: int, batch_size: int) -> int:
    """The most chunks a batch of :func:`epoch_batches` holds: a last batch of one joins the one before."""
    if n_train <= batch_size:
        return n_train
    return batch_size + 1 if n_train % batch_size == 1 else batch_size


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def check_cpu_memory(h: dict, n_train: int, option: str = "--set") -> None:
    """Refuse, before training, a CPU run whose largest batch will not fit in the memory left
    (:func:`training_memory_estimate` against :func:`~voxanon.data_prep.memory.available_memory`, which reads
    cgroup v1 and v2 limits, and what the process holds already),
    naming what it needs and the largest ``batch_size`` that fits."""
    available = available_memory()
    if available is None:
        return
    items = largest_batch(n_train, h["batch_size"])
    needed = training_memory_estimate(h, items)
    room = available + _resident_bytes()
    if needed <= room:
        return
    per_chunk = training_memory_estimate(h, 1) - training_memory_estimate(h, 0)
    fitting = int((room - training_memory_estimate(h, 0)) // per_chunk)
    remedy = (f"{option} batch_size={fitting} fits (about {training_memory_estimate(h, fitting) / 1e9:.1f} GB; "
              "a smaller batch than the challenge's 256 changes the training), or train on a GPU (--device cuda)"
              if fitting >= 2 else "no batch size fits; train on a GPU (--device cuda) or free memory")
    raise VoxanonError(f"train asv: batches of {items} chunks of {h['sentence_len']:g} s need about "
                       f"{needed / 1e9:.1f} GB on the CPU, and {room / 1e9:.1f} GB is available; {remedy}")


def default_workers(device) -> int:
    """Loader processes: none on the CPU (they would take cores from the step); on a GPU up to 8, leaving one
    core to the training process."""
    if device.type == "cpu":
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(8, max(1, cores - 1))
