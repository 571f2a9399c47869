"""models/dsp/blas.py: the BLAS libraries on one thread while the context lasts, back to their count after it;
GE2E's front end and Whisper's decoding run inside it."""
import json
import subprocess
import sys

import numpy as np

# Pools of 2 threads are set with threadpoolctl: OPENBLAS_NUM_THREADS is capped at the cores a process may use, a
# limit set at run time is not, so every check below holds on a machine of one core too.
BLAS_THREADS = ("from threadpoolctl import threadpool_info, threadpool_limits\n"
                "def blas_threads():\n"
                "    return sorted((i['filepath'].rsplit('/', 1)[-1], i['num_threads']) for i in threadpool_info()\n"
                "                  if i['user_api'] == 'blas')\n")


def run_in_a_fresh_process(code: str):
    shown = subprocess.run([sys.executable, "-c", BLAS_THREADS + code], capture_output=True, text=True,
                           check=True).stdout
    return json.loads(shown.strip().splitlines()[-1])


def test_one_blas_thread_limits_numpy_then_scipy_and_restores():
    code = ("import json, numpy\n"
            "from voxanon.models.dsp.blas import one_blas_thread\n"
            "threadpool_limits(limits=2, user_api='blas')\n"
            "seen = [blas_threads()]\n"
            "with one_blas_thread():\n"
            "    seen.append(blas_threads())\n"
            "seen.append(blas_threads())\n"
            "import scipy.linalg\n"
            "threadpool_limits(limits=2, user_api='blas')\n"
            "with one_blas_thread():\n"
            "    seen.append(blas_threads())\n"
            "seen.append(blas_threads())\n"
            "print(json.dumps(seen))\n")
    before, inside, after, inside_with_scipy, after_with_scipy = run_in_a_fresh_process(code)
    assert before and all(threads == 2 for _, threads in before)
    assert [threads for _, threads in inside] == [1] * len(before)
    assert after == before
    assert len(inside_with_scipy) > len(before)   # SciPy's own BLAS, loaded since: limited as well
    assert all(threads == 1 for _, threads in inside_with_scipy)
    assert all(threads == 2 for _, threads in after_with_scipy)


def blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def test_ge2e_front_end_runs_on_one_blas_thread(monkeypatch):
    from threadpoolctl import threadpool_limits

    from voxanon.models.nets import ge2e

    seen, mel_spectrogram = [], ge2e.mel_spectrogram

    def watched(wave):
        seen.append(blas_threads())
        return mel_spectrogram(wave)

    monkeypatch.setattr(ge2e, "mel_spectrogram", watched)
    noise = np.random.default_rng(0).standard_normal((2, 32000)).astype(np.float32)
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        ge2e.GE2EEncoder().embed(list(noise))
        after = blas_threads()
    assert before and all(threads == 2 for threads in before)
    assert len(seen) == 2 and all(threads == 1 for call in seen for threads in call)
    assert after == before


def test_whisper_decodes_on_one_blas_thread(monkeypatch):
    from faster_whisper.feature_extractor import FeatureExtractor
    from threadpoolctl import threadpool_limits

    from voxanon.models.recognisers.asr import WhisperASR

    seen, extract = [], FeatureExtractor.__call__

    def watched(self, *args, **kwargs):
        seen.append(blas_threads())
        return extract(self, *args, **kwargs)

    monkeypatch.setattr(FeatureExtractor, "__call__", watched)
    noise = np.random.default_rng(0).standard_normal((2, 16000)).astype(np.float32) * 0.1
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        WhisperASR(threads=2).transcribe_many(list(noise))
        after = blas_threads()
    assert before and all(threads == 2 for threads in before)
    assert seen and all(threads == 1 for call in seen for threads in call)
    assert after == before
