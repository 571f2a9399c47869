"""B3's cost per audio second, stage by stage and for the whole chain, ours against the reference code, side by side.

Writes B3's release with full-size random weights (the published shapes) as the publishers' code writes its files
(the fixture writers of ``tests/helpers/sttts_*_fixtures.py``) into a temporary ``exp/sttts_models``, imports it as
``voxanon models import sttts`` does (:func:`voxanon.models.checkpoints.sttts.import_sttts`), and loads the
reference from the same files: ESPnet's ``Speech2Text`` for the recogniser (when ``espnet`` is installed; otherwise
its transcription in ``tests/reference/espnet_asr.py``), the
``silero-vad`` package's own model and ``get_speech_timestamps`` for the silence cut, and the test-only
transcriptions of the recipe and IMS-Toucan under ``tests/reference/toucan/`` for the rest. Then it runs
each stage on the same synthetic utterance of ``--seconds`` seconds, in the order ours, reference, reference, ours
(a load that drifts during the run weighs on both alike), each after one untimed call of both (first calls compile
and fill caches), and prints each stage's seconds per audio second (means of
two runs), the ratio ours / reference, and the chain (the sum of the stages: each utterance passes them in turn).
The load average is printed before and after. ``--threads`` torch threads (1: as the runner's workers compute).

With random weights the recogniser's output is noise: the recogniser runs on the utterance, and the later stages
take a fixed phone string of the utterance's length, the same for ours and the reference.

    .venv/bin/python -m benchmarks.b3 [--seconds 4] [--threads 1] [--device cpu]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

SENTENCE = "~ðə kwɪk bɹaʊn fɑks dʒʌmps oʊvɚ ðə leɪzi dɑɡ, ænd ðə dɑɡ slɪps ɑn.~#"
"""IPA as the recogniser writes it (about 2.5 s of speech); repeated to the utterance's length."""


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """A voiced, amplitude-modulated tone with noise and short pauses, at 16 kHz."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    voiced = (np.sin(2 * np.pi * 140 * t) + 0.3 * np.sin(2 * np.pi * 1130 * t)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    wave = 0.2 * voiced + 0.02 * rng.standard_normal(len(t))
    wave[(t % 1.3) > 1.15] *= 0.01
    return wave.astype(np.float32)


def phones_for(seconds: float) -> str:
    words = SENTENCE.strip("~#").split()
    repeats = max(1, round(seconds / 2.5))
    return "~" + " ".join(words * repeats) + "~#"


class Timings:
    """Seconds per stage, ours and the reference's, each the mean of its runs."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.runs: dict[tuple[str, str], list[float]] = {}

    def timed(self, stage: str, side: str, run):
        start = time.perf_counter()
        result = run()
        elapsed = time.perf_counter() - start
        self.runs.setdefault((stage, side), []).append(elapsed)
        print(f"    {stage:28s} {side:9s} {elapsed:8.2f} s   {elapsed / self.seconds:7.3f} s per audio second", flush=True)
        return result

    def side_by_side(self, stage: str, ours, reference):
        """Each once untimed (first calls compile and fill caches: librosa's numba, torch's kernels), then ours, the
        reference, the reference, ours; ours' first result."""
        ours()
        if reference is not None:
            reference()
        result = self.timed(stage, "ours", ours)
        if reference is not None:
            self.timed(stage, "reference", reference)
            self.timed(stage, "reference", reference)
        self.timed(stage, "ours", ours)
        return result

    def mean(self, stage: str, side: str) -> float | None:
        runs = self.runs.get((stage, side))
        return None if not runs else sum(runs) / len(runs)

    def report(self, stages: list[str]) -> None:
        print(f"\n{'stage':28s} {'ours':>10s} {'reference':>10s} {'ours/ref':>9s}   (s per audio second, means of 2 runs)")
        total_ours = total_reference = 0.0
        compared = True
        for stage in stages:
            ours, reference = self.mean(stage, "ours"), self.mean(stage, "reference")
            total_ours += ours
            if reference is None:
                compared = False
                print(f"{stage:28s} {ours / self.seconds:10.3f} {'-':>10s} {'-':>9s}")
                continue
            total_reference += reference
            print(f"{stage:28s} {ours / self.seconds:10.3f} {reference / self.seconds:10.3f} {ours / reference:9.3f}")
        if compared:
            print(f"{'chain':28s} {total_ours / self.seconds:10.3f} {total_reference / self.seconds:10.3f} "
                  f"{total_ours / total_reference:9.3f}")
        else:
            print(f"{'chain (ours)':28s} {total_ours / self.seconds:10.3f}")


def write_release(models_dir: Path, seed: int = 0) -> dict[str, Path]:
    """B3's six files at full size, as the publishers' code writes them, in the recipe's layout."""
    from tests.helpers.sttts_asr_fixtures import write_asr_zip
    from tests.helpers.sttts_prosody_fixtures import write_aligner
    from tests.helpers.sttts_speaker_fixtures import write_embedding_function, write_wgan
    from tests.helpers.sttts_tts_fixtures import write_fastspeech2, write_hifigan
    from voxanon.models.checkpoints.sttts import FILES

    writers = {"asr": write_asr_zip, "style": write_embedding_function, "wgan": write_wgan, "aligner": write_aligner,
               "fastspeech2": write_fastspeech2, "hifigan": write_hifigan}
    paths = {}
    for component, relative in FILES.items():
        paths[component] = models_dir / relative
        paths[component].parent.mkdir(parents=True, exist_ok=True)
        writers[component](paths[component], size="full", seed=seed)
    return paths


def our_models(models_dir: Path, device: str) -> dict:
    """Our networks, imported from the release as ``voxanon models import sttts`` reads it, loaded strictly."""
    from voxanon.models.checkpoints.safe import built_with_weights
    from voxanon.models.checkpoints.sttts import PART_MODULES, import_sttts

    import importlib

    components, config = import_sttts(models_dir)
    models = {}
    for component, state in components.items():
        build = getattr(importlib.import_module(f"voxanon.models.checkpoints.{PART_MODULES[component]}"),
                        f"build_{component}")
        model = built_with_weights(lambda: build(config[component]), state).eval()
        models[component] = model if component in ("style", "wgan", "vad") else model.to(device)
    return models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="where our networks run (the reference: the CPU)")
    parser.add_argument("--no-reference", action="store_true", help="time ours only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from voxanon.models.dsp.resample import resample_kaiser_best
    from voxanon.models.nets.tts.prosody import anonymise_prosody, extract_prosody
    from voxanon.models.nets.tts.recogniser import recognise
    from voxanon.models.nets.tts.style import style_embedding
    from voxanon.models.nets.tts.synthesis import synthesise_48k
    from voxanon.models.nets.tts.vad import speech_span
    from voxanon.models.nets.tts.wgan import assign_targets, generate_vectors

    wave = speech_like(args.seconds)
    phones = phones_for(args.seconds)
    timings = Timings(args.seconds)
    with tempfile.TemporaryDirectory(prefix="voxanon-b3-bench-") as folder:
        models_dir = Path(folder) / "exp" / "sttts_models"
        started = time.perf_counter()
        paths = write_release(models_dir)
        models = our_models(models_dir, args.device)
        reference = None if args.no_reference else ReferenceChain(paths, Path(folder), wave)
        print(f"B3, full-size random weights, {args.seconds:.1f} s of audio, {args.threads} thread(s), ours on "
              f"{args.device}; set-up {time.perf_counter() - started:.0f} s; load average {load_average()}",
              flush=True)
        synchronise = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

        def on_device(run):
            def timed():
                result = run()
                synchronise()
                return result
            return timed

        timings.side_by_side("recognise", on_device(lambda: recognise(models["asr"], wave)),
                             reference and reference.recognise)
        style = timings.side_by_side("style (original)", lambda: style_embedding(
            models["style"], wave, np.random.default_rng(1), models["vad"]), reference and reference.style)

        def deal():
            wgan = models["wgan"]
            vectors = generate_vectors(wgan, wgan.mean, wgan.std, 5000, torch.Generator().manual_seed(2))
            return vectors[assign_targets([style], vectors, np.random.default_rng(3))[0]]

        target = timings.side_by_side("GAN 5,000 vectors + deal", deal, reference and (lambda: reference.deal(style)))

        def prosody():
            extracted = extract_prosody(models["aligner"], phones, wave, torch.Generator().manual_seed(4),
                                        lambda audio: speech_span(models["vad"], audio))
            return anonymise_prosody(extracted, torch.Generator().manual_seed(5))

        anonymised = timings.side_by_side("prosody (aligner + F0)", on_device(prosody),
                                          reference and (lambda: reference.prosody(phones)))

        def synthesise():
            wave_48k = synthesise_48k(models["fastspeech2"], models["hifigan"], phones,
                                      anonymised["durations"], anonymised["pitch"], anonymised["energy"], target,
                                      torch.Generator().manual_seed(6), anonymised["start_silence"],
                                      anonymised["end_silence"])
            return resample_kaiser_best(wave_48k, 48_000, 16_000)[:len(wave_48k) // 3]

        timings.side_by_side("synthesise (FS2 + HiFi-GAN)", on_device(synthesise),
                             reference and (lambda: reference.synthesise(phones, anonymised, target)))
        timings.report(["recognise", "style (original)", "GAN 5,000 vectors + deal", "prosody (aligner + F0)",
                        "synthesise (FS2 + HiFi-GAN)"])
    print(f"load average {load_average()}")


class ReferenceChain:
    """The reference code on the release's files: ESPnet's ``Speech2Text`` (when installed) and the transcribed
    recipe and IMS-Toucan code under ``tests/reference/toucan/``, each as the recipe calls it."""

    def __init__(self, paths: dict[str, Path], folder: Path, wave: np.ndarray):
        import soundfile

        from tests.helpers.sttts_prosody_fixtures import reference_sizes
        from tests.reference.toucan import gst, prosody, wgan
        from tests.reference.toucan.synthesis import ImsTTS
        from voxanon.models.checkpoints import sttts_prosody, sttts_tts
        from tests.reference import silero

        threads = torch.get_num_threads()
        from silero_vad import load_silero_vad  # the recipe's Silero, the package's TorchScript model
        from silero_vad.utils_vad import get_speech_timestamps

        torch.set_num_threads(threads)  # importing silero_vad sets it
        vad = load_silero_vad()
        self.cut = lambda audio: silero.cut_silence_from_audio(audio, vad, get_speech_timestamps)

        self.wave_path = folder / "utterance.wav"
        soundfile.write(self.wave_path, wave, 16000, subtype="FLOAT")
        self.wave = wave
        self.gst, self.wgan_module = gst, wgan
        self.style_model = gst.StyleEmbedding()  # the published sizes, the transcription's defaults
        self.style_model.load_state_dict(torch.load(paths["style"], map_location="cpu")["style_emb_func"])
        self.wgan_path = paths["wgan"]
        aligner_config = sttts_prosody.convert_aligner(sttts_prosody.read_aligner(paths["aligner"]),
                                                       paths["aligner"])[1]

        self.extractor = prosody.ImsProsodyExtractor(aligner_path=paths["aligner"], device="cpu",
                                                     get_speech_timestamps=lambda audio, model, sampling_rate:
                                                     get_speech_timestamps(audio, vad, sampling_rate=sampling_rate),
                                                     aligner_sizes=reference_sizes(aligner_config))
        self.anonymiser = prosody.ImsProsodyAnonymization(random_offset_lower=60, random_offset_higher=140)
        fastspeech2_config = sttts_tts.convert_fastspeech2(sttts_tts.read_fastspeech2(paths["fastspeech2"]),
                                                           paths["fastspeech2"])[1]
        hifigan_config = sttts_tts.convert_hifigan(sttts_tts.read_hifigan(paths["hifigan"]), paths["hifigan"])[1]
        self.tts = ImsTTS(paths["hifigan"], paths["fastspeech2"], "cpu",
                          hifigan_channels=hifigan_config["upsample_initial_channel"], **fastspeech2_config)
        self.speech2text = espnet_recogniser(paths["asr"], folder)

    def recognise(self):
        return self.speech2text(torch.from_numpy(self.wave))[0][0]

    def style(self):
        self.style_model.train()  # as the recipe leaves the extractor
        normalised = self.gst.normalize_wave(torch.from_numpy(self.wave).unsqueeze(0), 16000, "cpu")
        return self.gst.extract_vector(self.style_model, normalised, self.cut).numpy()

    def deal(self, original: np.ndarray):
        generator = self.wgan_module.EmbeddingsGenerator(gan_path=self.wgan_path, device=torch.device("cpu"))
        vectors = generator.generate_embeddings(n=5000)
        return self.wgan_module.select_gan_vectors([torch.from_numpy(original)], vectors)

    def prosody(self, phones: str):
        duration, pitch, energy, start, end = self.extractor.extract_prosody(phones, str(self.wave_path),
                                                                             input_is_phones=True)
        return self.anonymiser.anonymize_values(duration=duration, energy=energy, pitch=pitch, start_silence=start,
                                                end_silence=end)

    def synthesise(self, phones: str, prosody: dict, target: np.ndarray):
        from tests.reference.toucan.articulatory import ArticulatoryCombinedTextFrontend

        vectors = ArticulatoryCombinedTextFrontend(language="en").string_to_tensor(phones, handle_missing=True,
                                                                                    input_phonemes=True).squeeze(0)
        return self.tts.read_text(vectors, torch.from_numpy(target), duration=torch.from_numpy(prosody["durations"]),
                                  pitch=torch.from_numpy(prosody["pitch"]).reshape(-1, 1),
                                  energy=torch.from_numpy(prosody["energy"]).reshape(-1, 1),
                                  start_silence=prosody["start_silence"], end_silence=prosody["end_silence"])


def espnet_recogniser(zip_path: Path, folder: Path):
    """ESPnet's ``Speech2Text`` on the model-zoo zip as the recipe's ``ims_asr.py`` builds it (beam 15, CTC weight
    0.2, no length limits, one utterance at a time) when ``espnet`` is installed; otherwise the transcription of
    ESPnet's ``Speech2Text`` in ``tests/reference/espnet_asr.py`` (the same beam search, ESPnet's classes)."""
    try:
        from espnet2.bin.asr_inference import Speech2Text
        from espnet_model_zoo.downloader import ModelDownloader
    except ImportError:
        from tests.reference.espnet_asr import Speech2Text as Transcribed
        from voxanon.models.checkpoints.sttts_asr import convert_asr, read_asr

        print("    (espnet not installed: the recogniser's reference is tests/reference/espnet_asr.py)")
        checkpoint = read_asr(zip_path)
        state, config = convert_asr(checkpoint, zip_path)
        return Transcribed(config, state, checkpoint["bpe_model"])
    files = ModelDownloader(cachedir=folder / "espnet").download_and_unpack(str(zip_path.absolute()))
    return Speech2Text(asr_train_config=files["asr_train_config"], asr_model_file=files["asr_model_file"],
                       device="cpu", minlenratio=0.0, maxlenratio=0.0, ctc_weight=0.2, beam_size=15, batch_size=1,
                       nbest=1, quantize_asr_model=False)


if __name__ == "__main__":
    main()
