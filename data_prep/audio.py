"""Audio loading and writing: every waveform voxanon reads or writes passes through here.

Loading turns any soundfile-readable file (or, when allowed, a ``wav.scp`` command's
output) into float32 mono at the rate a system asks for, and rejects, with one clear
message naming the file, what no system can use: missing, unreadable or empty files,
NaN/Inf samples, all-zero audio, and audio longer than a configured maximum.
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


def load_audio(source: str | os.PathLike, sample_rate: int, *, max_seconds: float | None = None,
               allow_pipe: bool = False) -> Audio:
    """Read ``source`` as float32 mono at ``sample_rate`` Hz, or raise :class:`AudioError`.

    ``source`` is a file path, or a ``command |`` entry (run by the shell only when
    ``allow_pipe`` is set, since it executes text taken from a data file).
    """
    name = str(source)
    is_pipe = name.rstrip().endswith("|")
    try:
        if is_pipe:
            if not allow_pipe:
                raise AudioError(name, "is a shell command; commands run only with --allow-pipes")
            stream = io.BytesIO(_read_pipe(name))
            _check_header_length(name, stream, max_seconds)
            data, rate = soundfile.read(stream, dtype="float32", always_2d=True)
        else:
            if Path(source).is_dir():
                raise AudioError(name, "is a folder, not an audio file")
            if not Path(source).is_file():
                raise AudioError(name, "missing file")
            _check_header_length(name, source, max_seconds)
            data, rate = soundfile.read(source, dtype="float32", always_2d=True)
    except AudioError:
        raise
    except Exception as error:  # soundfile raises several types for corrupt input
        raise AudioError(name, f"unreadable audio ({type(error).__name__}: {error})") from None
    return audio_from_samples(name, data, rate, sample_rate, max_seconds=max_seconds)


def audio_from_samples(name: str, data: np.ndarray, rate: int, sample_rate: int, *,
                       max_seconds: float | None = None) -> Audio:
    """Samples as read (float32, frames by channels, at ``rate`` Hz) checked and made float32 mono at
    ``sample_rate`` Hz, as :func:`load_audio` makes a file's; ``name`` names them in an :class:`AudioError`."""
    if data.shape[0] == 0:
        raise AudioError(name, "empty (no samples)")
    if not np.isfinite(data).all():
        raise AudioError(name, f"contains {int((~np.isfinite(data)).sum())} NaN or Inf samples")
    if not np.any(data):
        raise AudioError(name, "silent (every sample is zero)")
    seconds = data.shape[0] / rate
    if max_seconds is not None and seconds > max_seconds:
        raise _too_long(name, seconds, max_seconds)
    channels = data.shape[1]
    mono = data.mean(axis=1) if channels > 1 else data[:, 0]
    if channels > 1:
        log.warning("%s: %d channels, down-mixed to mono", name, channels)
    if rate != sample_rate:
        mono = soxr.resample(mono, rate, sample_rate, quality="HQ")
    return Audio(np.ascontiguousarray(mono, dtype=np.float32), sample_rate, rate, channels)


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
