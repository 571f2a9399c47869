"""Checks that an installed environment loads the compiled libraries voxanon calls.

Run right after installing (``make install`` does): a resolver can pick a pair of releases whose
metadata agree but whose binaries do not (torchaudio 2.11.1 declares ``torch>=2.11`` yet its
extension does not load with torch 2.11.0). Each check exercises the compiled code itself, not
only the Python import, and names the packages whose versions must match. The first failure is
printed as one line on stderr, exit 1; success prints one line on stdout.
"""
from __future__ import annotations

import re
import sys
from importlib import metadata


def _torch() -> None:
    import torch

    torch.zeros(2).add_(1)


def _torchaudio_extension() -> None:
    # lfilter runs in torchaudio's compiled extension (libtorchaudio), the library that fails to
    # load against a torch it was not built for.
    import torch
    import torchaudio.functional

    signal = torch.zeros(1, 8)
    torchaudio.functional.lfilter(signal, torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0]))


def _ctranslate2() -> None:
    # faster-whisper's inference engine (the embedded Whisper tiny.en ASR).
    import ctranslate2

    ctranslate2.get_cuda_device_count()
    import faster_whisper  # noqa: F401


def _numba() -> None:
    # The fast YAAPT's kernels are numba-compiled; compiling one small function proves that
    # llvmlite loads and that numba accepts the installed numpy.
    import numba
    import numpy as np

    @numba.njit(cache=False)
    def total(values):
        return values.sum()

    assert total(np.ones(3)) == 3.0


def _audio_libraries() -> None:
    import io

    import numpy as np
    import parselmouth
    import pyworld
    import soundfile
    import soxr
    import webrtcvad

    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(160, dtype=np.float32), 16000, format="WAV")
    soxr.resample(np.zeros(160, dtype=np.float32), 16000, 8000)
    pyworld.dio(np.zeros(1600), 16000)
    parselmouth.Sound(np.zeros(1600), 16000)
    webrtcvad.Vad(1)


# (what is checked, the distributions whose versions must agree for it to load, the check)
CHECKS = (
    ("torch", ("torch",), _torch),
    ("torchaudio's extension", ("torchaudio", "torch"), _torchaudio_extension),
    ("CTranslate2", ("ctranslate2", "faster-whisper"), _ctranslate2),
    ("numba's compiler", ("numba", "llvmlite", "numpy"), _numba),
    ("the audio libraries", ("soundfile", "soxr", "pyworld-prebuilt", "praat-parselmouth",
                             "webrtcvad-wheels"), _audio_libraries),
)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _reason(error: BaseException) -> str:
    # A loader error holds the library's full path: its file name is enough on one line.
    text = re.sub(r"/\S*/", "", " ".join(str(error).split()))
    return f"{type(error).__name__}: {text}"


def main() -> int:
    for what, distributions, check in CHECKS:
        try:
            check()
        except Exception as error:  # noqa: BLE001 (any failure to load is the finding)
            releases = " with ".join(f"{name} {_version(name)}" for name in distributions)
            print(f"install check: {what} does not load: {releases} "
                  f"({_reason(error)}); reinstall the locked versions with 'make install'",
                  file=sys.stderr)
            return 1
    print("install check: " + ", ".join(what for what, _, _ in CHECKS) + " load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
