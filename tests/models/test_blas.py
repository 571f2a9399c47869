"""models/dsp/blas.py: the BLAS libraries on one thread while the context lasts, back to their count after it;
GE2E's front end runs inside it."""
import json
import os
import subprocess
import sys

BLAS_THREADS = ("from threadpoolctl import threadpool_info\n"
                "def blas_threads():\n"
                "    return sorted((i['filepath'].rsplit('/', 1)[-1], i['num_threads']) for i in threadpool_info()\n"
                "                  if i['user_api'] == 'blas')\n")


def run_with_two_blas_threads(code: str):
    environment = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    shown = subprocess.run([sys.executable, "-c", BLAS_THREADS + code], capture_output=True, text=True, check=True,
                           env=environment).stdout
    return json.loads(shown.strip().splitlines()[-1])


def test_one_blas_thread_limits_numpy_then_scipy_and_restores():
    code = ("import json, numpy\n"
            "from voxanon.models.dsp.blas import one_blas_thread\n"
            "seen = [blas_threads()]\n"
            "with one_blas_thread():\n"
            "    seen.append(blas_threads())\n"
            "seen.append(blas_threads())\n"
            "import scipy.linalg\n"
            "with one_blas_thread():\n"
            "    seen.append(blas_threads())\n"
            "seen.append(blas_threads())\n"
            "print(json.dumps(seen))\n")
    before, inside, after, inside_with_scipy, after_with_scipy = run_with_two_blas_threads(code)
    assert before and all(threads == 2 for _, threads in before)
    assert [threads for _, threads in inside] == [1] * len(before)
    assert after == before
    assert len(inside_with_scipy) > len(before)   # SciPy's own BLAS, loaded since: limited as well
    assert all(threads == 1 for _, threads in inside_with_scipy)
    assert all(threads == 2 for _, threads in after_with_scipy)


def test_ge2e_front_end_runs_on_one_blas_thread():
    code = ("import json, numpy as np\n"
            "from voxanon.models.nets import ge2e\n"
            "seen, mel_spectrogram = [], ge2e.mel_spectrogram\n"
            "def watched(wave):\n"
            "    seen.append(blas_threads())\n"
            "    return mel_spectrogram(wave)\n"
            "ge2e.mel_spectrogram = watched\n"
            "noise = np.random.default_rng(0).standard_normal((2, 32000)).astype(np.float32)\n"
            "ge2e.GE2EEncoder().embed(list(noise))\n"
            "print(json.dumps([seen, blas_threads()]))\n")
    during, after = run_with_two_blas_threads(code)
    assert len(during) == 2 and all(threads == 1 for call in during for _, threads in call)
    assert after and all(threads == 2 for _, threads in after)


def test_whisper_decodes_on_one_blas_thread():
    code = ("import json, numpy as np\n"
            "from faster_whisper.feature_extractor import FeatureExtractor\n"
            "from voxanon.models.recognisers.asr import WhisperASR\n"
            "seen, extract = [], FeatureExtractor.__call__\n"
            "def watched(self, *args, **kwargs):\n"
            "    seen.append(blas_threads())\n"
            "    return extract(self, *args, **kwargs)\n"
            "FeatureExtractor.__call__ = watched\n"
            "noise = np.random.default_rng(0).standard_normal((2, 16000)).astype(np.float32) * 0.1\n"
            "WhisperASR(threads=2).transcribe_many(list(noise))\n"
            "print(json.dumps([seen, blas_threads()]))\n")
    during, after = run_with_two_blas_threads(code)
    assert during and all(threads == 1 for call in during for _, threads in call)
    assert after and all(threads == 2 for _, threads in after)
