"""The F0 stage every neural family shares: YAAPT (fast, pYAAPT) for the SSL-SAS chain, SA-toolkit's port for
ASR-BN, on the CPU or batched on a device."""
from __future__ import annotations

from ...models.f0.params import DEFAULT_BACKEND
from ..model_service import check_device_name, resolve_device
from .stage import Stage, Utterance


class F0Stage(Stage):
    """YAAPT F0, optionally cached on disk per utterance content (and backend).

    ``backend``: ``fast`` (the default: pYAAPT's algorithm reimplemented, :mod:`voxanon.models.f0.yaapt`;
    4-5x faster per core, and pYAAPT's track bit for bit on most utterances) or ``pyaapt``
    (amfm-decompy's pYAAPT itself), with the SSL-SAS settings; or ``sa-toolkit``, SA-toolkit's YAAPT port
    with B5/B6's settings (another algorithm, 20 ms frames: the B5/B6 systems' F0). ``device`` (``cpu``,
    ``cuda``, ``auto``: CUDA when the process running the stage sees one): on the CPU each utterance runs the
    numpy/numba version; on a CUDA device the whole batch goes to the torch version
    (:func:`voxanon.models.f0.extract.yaapt_f0_batch`), where an utterance it cannot analyse fails alone.
    ``sa-toolkit`` takes the batch at once on either device (its port batches); ``pyaapt`` runs on the CPU
    only. Only the CPU path is model-free (the runner may run it in a process forked before the models load).
    """

    name = "f0"
    model_free = True
    BYTES_PER_SAMPLE = {"fast": 100.0, "sa-toolkit": 154.0, "pyaapt": 474.0}
    """Peak per sample on the CPU by backend, measured by benchmarks/stage_memory.py: fast 99.3 (resynth, 20 and
    80 s; 74.8 from 20 and 120 s), sa-toolkit 153.4 (b5, 20 and 120 s), pyaapt 473.7 (20 and 120 s)."""

    def __init__(self, cache_dir: str | None = None, f0_min_hz: float = 60.0, f0_max_hz: float = 400.0,
                 backend: str = DEFAULT_BACKEND, device: str = "cpu"):
        from ...models.f0.extract import F0Cache
        from ...models.f0.params import backend_params

        self.params = backend_params(backend, f0_min_hz, f0_max_hz)
        self.cache = F0Cache(cache_dir) if cache_dir else None
        self.backend = backend
        self.device = check_device_name(device, "f0.device")
        if self.backend == "pyaapt" and self.device != "cpu":
            raise ValueError(f"f0.backend pyaapt runs on the CPU only, but f0.device is {self.device!r}: "
                             "set f0.device=cpu, or f0.backend=fast for the GPU version")
        self.model_free = self.device == "cpu"

    @property
    def bytes_per_sample(self) -> float | None:
        return self.BYTES_PER_SAMPLE.get(self.backend)

    @classmethod
    def takes_stage_wide(cls, setting: str, options: dict) -> bool:
        # --device cuda leaves pYAAPT's algorithm (fast, pyaapt) in the CPU pool, on every core, beside the
        # device's models instead of in series with them there (f0.device=cuda still selects the GPU
        # YAAPT); SA-toolkit's port is a batched torch model and goes to the device.
        return not (setting == "device" and options.get("backend", DEFAULT_BACKEND) != "sa-toolkit")

    def load_models(self) -> None:
        # Once, before the runner forks its workers, instead of in every worker at its first utterance:
        # pYAAPT's imports (SciPy's signal processing, about 0.7 s), or the fast version's compiled kernels
        # (its GPU version takes its decisions with them too; they start no CUDA context).
        if self.backend == "pyaapt":
            import amfm_decompy.pYAAPT  # noqa: F401
        elif self.backend == "sa-toolkit":
            from ...models.f0 import sa_yaapt  # noqa: F401  (torch and torchaudio)
        else:
            from ...models.f0.yaapt import warm_up

            warm_up()

    def process_batch(self, batch: list[Utterance]) -> None:
        device = resolve_device(self.device)
        if device == "cpu" and self.backend != "sa-toolkit":
            for utt in batch:
                self.process(utt)
            return
        from ...models.f0.extract import yaapt_f0_batch

        todo = [utt for utt in batch if not self._cached(utt)]
        failures = []
        for rate in sorted({utt.sample_rate for utt in todo}):
            group = [utt for utt in todo if utt.sample_rate == rate]
            for utt, f0 in zip(group, yaapt_f0_batch([utt.audio for utt in group], rate, self.params, device,
                                                     self.backend)):
                if isinstance(f0, Exception):
                    failures.append(f0)
                    continue
                utt.features["f0"] = f0
                if self.cache is not None:
                    self.cache.store(utt.audio, f0, rate, self.params, self.backend)
        if failures:
            raise failures[0]  # the runner reruns the batch's utterances one by one to attribute it

    def _cached(self, utt: Utterance) -> bool:
        f0 = None if self.cache is None else self.cache.load(utt.audio, utt.sample_rate, self.params, self.backend)
        if f0 is not None:
            utt.features["f0"] = f0
        return f0 is not None

    def process(self, utt: Utterance) -> None:
        from ...models.f0.extract import yaapt_f0

        if self.cache is not None:
            utt.features["f0"] = self.cache.f0(utt.audio, utt.sample_rate, self.params, self.backend)
        else:
            utt.features["f0"] = yaapt_f0(utt.audio, utt.sample_rate, self.params, self.backend)
