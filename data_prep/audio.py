"""Audio loading and writing: every waveform voxanon reads or writes passes through here.

Loading turns any soundfile-readable file (or, when allowed, a ``wav.scp`` command's
output) into float32 mono at the rate a system asks for, and rejects, with one clear
message naming the file, what no system can use: missing, unreadable or empty files,
NaN/Inf samples, all-zero audio, and audio longer than a configured maximum or shorter
than a minimum. Checking (``validate --check-audio``) finds the same faults in blocks, so
that a file of any length takes the memory of one block.
"""
from __future__ import annotations

import io
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile
import soxr

from .atomic import atomic_path
from .errors import VoxanonError

log = logging.getLogger(__name__)


class AudioError(VoxanonError):
    """One audio input that cannot be used; the message names the file."""

    def __init__(self, source: str, reason: str):
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")


@dataclass
class Audio:
    samples: np.ndarray  # float32, mono, in [-1, 1] for integer sources
    sample_rate: int
    source_rate: int
    source_channels: int

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.sample_rate

    def notes(self) -> list[str]:
        """What loading changed, for the run's log."""
        found = []
        if self.source_channels != 1:
            found.append(f"down-mixed {self.source_channels} channels to mono")
        if self.source_rate != self.sample_rate:
            found.append(f"resampled {self.source_rate} Hz to {self.sample_rate} Hz")
        return found


def _read_pipe(command: str) -> bytes:
    completed = subprocess.run(command.rstrip().rstrip("|"), shell=True, capture_output=True)
    if completed.returncode != 0:
        raise AudioError(command, f"command failed with exit code {completed.returncode}: "
                                  f"{completed.stderr.decode(errors='replace').strip()[-300:]}")
    return completed.stdout


def _too_long(name: str, seconds: float, max_seconds: float) -> AudioError:
    return AudioError(name, f"too long: {seconds:.1f} s, the maximum is {max_seconds:g} s "
                            "(raise it with --set max_seconds=...)")


def _too_short(name: str, n_samples: int, sample_rate: int, min_seconds: float) -> AudioError:
    return AudioError(name, f"too short: {n_samples} samples at {sample_rate} Hz ({n_samples / sample_rate * 1000:.1f} "
                            f"ms); an utterance needs at least {min_seconds * 1000:g} ms, one analysis frame of every "
                            "system")


def resampled_length(frames: int, source_rate: int, sample_rate: int) -> int:
    """How many samples ``frames`` at ``source_rate`` become at ``sample_rate``, as :func:`load_audio`'s resampler
    (soxr) gives them: the exact length rounded, a half up."""
    return (2 * frames * sample_rate + source_rate) // (2 * source_rate)


def _check_samples(name: str, frames: int, nonfinite: int, audible: bool, source_rate: int, sample_rate: int,
                   max_seconds: float | None, min_seconds: float) -> None:
    """Raises what no system can use, from what the samples of ``name`` hold: none, NaN or Inf ones, only zeros,
    longer than ``max_seconds``, or shorter than ``min_seconds`` at ``sample_rate`` (after resampling)."""
    if frames == 0:
        raise AudioError(name, "empty (no samples)")
    if nonfinite:
        raise AudioError(name, f"contains {nonfinite} NaN or Inf samples")
    if not audible:
        raise AudioError(name, "silent (every sample is zero)")
    if max_seconds is not None and frames / source_rate > max_seconds:
        raise _too_long(name, frames / source_rate, max_seconds)
    length = frames if source_rate == sample_rate else resampled_length(frames, source_rate, sample_rate)
    if length < min_seconds * sample_rate:
        raise _too_short(name, length, sample_rate, min_seconds)


def _check_header_length(name: str, source, max_seconds: float | None) -> None:
    """Refuses audio longer than ``max_seconds`` from its header, before any sample is decoded (a 3-hour file
    would take about 900 MB as float32 just to be refused). A header without a length is left to the decoder."""
    if max_seconds is None:
        return
    info = soundfile.info(source)
    if isinstance(source, io.BytesIO):
        source.seek(0)
    if info.samplerate > 0 and 0 < info.frames < 2**62 and info.frames / info.samplerate > max_seconds:
        raise _too_long(name, info.frames / info.samplerate, max_seconds)


def _open_source(source: str | os.PathLike, allow_pipe: bool, max_seconds: float | None):
    """``source``'s name, and what soundfile reads it from (the path, or a pipe's output), once its length passed
    the header check."""
    name = str(source)
    if name.rstrip().endswith("|"):
        if not allow_pipe:
            raise AudioError(name, "is a shell command; commands run only with --allow-pipes")
        stream = io.BytesIO(_read_pipe(name))
        _check_header_length(name, stream, max_seconds)
        return name, stream
    if Path(source).is_dir():
        raise AudioError(name, "is a folder, not an audio file")
    if not Path(source).is_file():
        raise AudioError(name, "missing file")
    _check_header_length(name, source, max_seconds)
    return name, source


def load_audio(source: str | os.PathLike, sample_rate: int, *, max_seconds: float | None = None,
               min_seconds: float = 0.0, allow_pipe: bool = False) -> Audio:
    """Read ``source`` as float32 mono at ``sample_rate`` Hz, or raise :class:`AudioError`.

    ``source`` is a file path, or a ``command |`` entry (run by the shell only when
    ``allow_pipe`` is set, since it executes text taken from a data file).
    """
    name = str(source)
    try:
        name, readable = _open_source(source, allow_pipe, max_seconds)
        data, rate = soundfile.read(readable, dtype="float32", always_2d=True)
    except AudioError:
        raise
    except Exception as error:  # soundfile raises several types for corrupt input
        raise AudioError(name, f"unreadable audio ({type(error).__name__}: {error})") from None
    return audio_from_samples(name, data, rate, sample_rate, max_seconds=max_seconds, min_seconds=min_seconds)


def audio_from_samples(name: str, data: np.ndarray, rate: int, sample_rate: int, *,
                       max_seconds: float | None = None, min_seconds: float = 0.0) -> Audio:
    """Samples as read (float32, frames by channels, at ``rate`` Hz) checked and made float32 mono at
    ``sample_rate`` Hz, as :func:`load_audio` makes a file's; ``name`` names them in an :class:`AudioError`."""
    nonfinite = int(data.size - np.count_nonzero(np.isfinite(data)))
    _check_samples(name, data.shape[0], nonfinite, bool(np.any(data)), rate, rate, max_seconds, 0.0)
    channels = data.shape[1]
    mono = data.mean(axis=1) if channels > 1 else data[:, 0]
    if channels > 1:
        log.warning("%s: %d channels, down-mixed to mono", name, channels)
    if rate != sample_rate:
        mono = soxr.resample(mono, rate, sample_rate, quality="HQ")
    if len(mono) < min_seconds * sample_rate:
        raise _too_short(name, len(mono), sample_rate, min_seconds)
    return Audio(np.ascontiguousarray(mono, dtype=np.float32), sample_rate, rate, channels)


CHECK_BLOCK_FRAMES = 1 << 16
"""Frames :func:`check_audio` decodes at once (4 s at 16 kHz: 256 kB a channel as float32)."""


def check_audio(source: str | os.PathLike, sample_rate: int, *, max_seconds: float | None = None,
                min_seconds: float = 0.0, allow_pipe: bool = False, block_frames: int = CHECK_BLOCK_FRAMES) -> None:
    """Raise the :class:`AudioError` that :func:`load_audio` would raise for ``source``, decoding it
    ``block_frames`` at a time: memory stays that of one block, however long the file (a 10-hour file decoded
    whole took 2.9 GB). The length is checked from the header first, as loading does."""
    name = str(source)
    frames, nonfinite, audible = 0, 0, False
    try:
        name, readable = _open_source(source, allow_pipe, max_seconds)
        with soundfile.SoundFile(readable) as audio:
            rate = audio.samplerate
            for block in audio.blocks(block_frames, dtype="float32", always_2d=True):
                frames += block.shape[0]
                nonfinite += int(block.size - np.count_nonzero(np.isfinite(block)))
                audible = audible or bool(np.any(block))
    except AudioError:
        raise
    except Exception as error:  # soundfile raises several types for corrupt input
        raise AudioError(name, f"unreadable audio ({type(error).__name__}: {error})") from None
    _check_samples(name, frames, nonfinite, audible, rate, sample_rate, max_seconds, min_seconds)


def to_pcm16(samples: np.ndarray) -> np.ndarray:
    """Float samples to 16-bit PCM, rounding and clipping to the int16 range."""
    return np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)


def write_wav(target: str | os.PathLike, samples: np.ndarray, sample_rate: int) -> None:
    """Write mono 16-bit PCM WAV atomically."""
    if samples.ndim != 1:
        raise ValueError(f"expected mono samples, got shape {samples.shape}")
    if not np.isfinite(samples).all():
        raise ValueError(f"{target}: refusing to write NaN or Inf samples")
    with atomic_path(target) as tmp:
        soundfile.write(tmp, to_pcm16(samples), sample_rate, subtype="PCM_16", format="WAV")


def check_wav(path: str | os.PathLike, sample_rate: int, n_samples: int | None = None) -> bool:
    """Whether ``path`` is a complete mono 16-bit WAV at ``sample_rate`` (header check)."""
    try:
        info = soundfile.info(str(path))
    except Exception:
        return False
    return (info.samplerate == sample_rate and info.channels == 1 and info.subtype == "PCM_16"
            and info.frames > 0 and (n_samples is None or info.frames == n_samples))


def pcm16_data_offset(path: str | os.PathLike) -> int | None:
    """Where the samples of a RIFF/WAVE file of 16-bit PCM (format 1, or WAVE_FORMAT_EXTENSIBLE with the PCM
    sub-format) start, in bytes from the file's start; None for any other file. From there on the file holds
    the samples as little-endian int16, interleaved, so a reader can take any span as bytes, decoding nothing."""
    with open(path, "rb") as stream:
        head = stream.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:] != b"WAVE":
            return None
        pcm16 = False
        while len(chunk := stream.read(8)) == 8:
            name, size = chunk[:4], int.from_bytes(chunk[4:], "little")
            if name == b"data":
                return stream.tell() if pcm16 else None
            if name == b"fmt ":
                fmt = stream.read(size)
                tag = int.from_bytes(fmt[:2], "little")
                if tag == 0xFFFE and len(fmt) >= 26:
                    tag = int.from_bytes(fmt[24:26], "little")  # the sub-format GUID's first field
                pcm16 = len(fmt) >= 16 and tag == 1 and int.from_bytes(fmt[14:16], "little") == 16
                stream.seek(size % 2, os.SEEK_CUR)
            else:
                stream.seek(size + size % 2, os.SEEK_CUR)  # chunks are padded to an even size
    return None


def normalise_loudness(samples: np.ndarray, sample_rate: int, target_lufs: float) -> np.ndarray:
    """Loudness to ``target_lufs`` (ITU-R BS.1770), then peak-normalised if that would clip (VPC 2024)."""
    import pyloudnorm

    meter = pyloudnorm.Meter(sample_rate)
    if len(samples) < int(0.4 * sample_rate):
        return samples
    loudness = meter.integrated_loudness(samples.astype(np.float64))
    if not np.isfinite(loudness):
        return samples
    adjusted = pyloudnorm.normalize.loudness(samples.astype(np.float64), loudness, target_lufs)
    peak = np.max(np.abs(adjusted))
    return (adjusted / peak if peak > 1.0 else adjusted).astype(np.float32)
