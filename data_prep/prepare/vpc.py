"""The VoicePrivacy-distributed evaluation sets: find them, validate them, index them.

The trial and enrolment lists of these sets were made by hand and cannot be rebuilt
from the public corpora (Voice-Privacy-Challenge-2024 pull request 72), so they are taken as given and checked:

- every expected set (``libri_{dev,test}_{enrolls,trials_f,trials_m}``,
  ``vctk_{dev,test}_{enrolls,trials_f,trials_m,trials_f_common,trials_m_common}``) is
  looked for in ``<root>`` and ``<root>/data``; ``libri_*_trials_mixed`` (VPC 2026) is
  indexed when present;
- each set must hold the Kaldi files its role needs (``enrolls`` or ``trials``, and
  ``spk2gender``; ``text`` for trial sets, which are also the ASR sets) and be
  consistent (:meth:`DataDir.validate`);
- every audio file must exist (``wav.scp`` commands such as ``flac -c -d -s X.flac |``
  are resolved to the file they decode) and, when headers are read, be 16 kHz;
- trial lists must use enrolment speakers of the matching ``*_enrolls`` set, keep to
  their sex (f/m lists), label targets exactly when the speakers agree, and test on
  utterances that are not enrolment utterances.
"""
from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..atomic import atomic_write_text
from ..corpus import AUDIO_EXTENSIONS, DataDir, DataDirError, read_data_dir, write_data_dir
from ..paths import contained_path, resolved
from .issues import summarise
from .listing import TARGET_RATE, read_audio_header

SPLITS = ("dev", "test")
TRIAL_PARTS = {
    "libri": ("trials_f", "trials_m"),
    "vctk": ("trials_f", "trials_m", "trials_f_common", "trials_m_common"),
}
OPTIONAL_TRIAL_PARTS = {"libri": ("trials_mixed",), "vctk": ()}
CORPORA = tuple(TRIAL_PARTS)
INDEX_NAME = "vpc_index.json"
# Decoders whose output equals the file read natively; other commands stay commands.
_PLAIN_DECODER_ARGUMENTS = {
    "flac": None,  # any option: flac only decodes here (-c -d -s and spellings of them)
    "sox": {"-t", "wav", "-"},
}


@dataclass
class VpcSet:
    """One expected set and what was found for it."""

    name: str
    corpus: str
    split: str
    part: str
    path: str | None = None
    utterances: int = 0
    speakers: dict[str, int] = field(default_factory=dict)  # sex (f, m, unknown) -> count
    enrolls: int | None = None
    targets: int | None = None
    nontargets: int | None = None
    command_entries: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def role(self) -> str:
        return "enrolls" if self.part == "enrolls" else "trials"

    @property
    def sex(self) -> str | None:
        """The sex a trial list keeps to (None for enrolment and mixed sets)."""
        if self.part.startswith("trials_") and self.part.split("_")[1] in ("f", "m"):
            return self.part.split("_")[1]
        return None


@dataclass
class VpcIndex:
    root: str
    sets: list[VpcSet]
    missing: list[str]  # expected sets not found

    @property
    def problems(self) -> list[str]:
        found = [f"{name}: set missing" for name in self.missing]
        for vpc_set in self.sets:
            found.extend(f"{vpc_set.name}: {problem}" for problem in vpc_set.problems)
        return found

    def to_json(self) -> str:
        return json.dumps({"root": self.root, "missing": self.missing,
                           "sets": {s.name: {k: v for k, v in asdict(s).items() if k != "name"}
                                    for s in self.sets}}, indent=2, sort_keys=True) + "\n"


def expected_sets(corpora: tuple[str, ...] = CORPORA) -> list[tuple[str, str, str, bool]]:
    """``(corpus, split, part, required)`` of every set looked for."""
    unknown = sorted(set(corpora) - set(CORPORA))
    if unknown:
        raise DataDirError("vpc", [f"unknown corpus {c!r}; choose from {', '.join(CORPORA)}" for c in unknown])
    found = []
    for corpus in corpora:
        for split in SPLITS:
            for part in ("enrolls",) + TRIAL_PARTS[corpus]:
                found.append((corpus, split, part, True))
            for part in OPTIONAL_TRIAL_PARTS[corpus]:
                found.append((corpus, split, part, False))
    return found


def index_vpc(root: str | os.PathLike, corpora: tuple[str, ...] = CORPORA, *,
              read_headers: bool = True) -> tuple[VpcIndex, dict[str, DataDir]]:
    """Check every expected set under ``root``; the index and the sets that could be read.

    Audio entries of the returned sets are the resolved files where that is possible.
    """
    root = resolved(root, "--root")
    if not root.is_dir():
        raise DataDirError(str(root), ["not a folder"])
    sets: list[VpcSet] = []
    missing: list[str] = []
    loaded: dict[str, DataDir] = {}
    for corpus, split, part, required in expected_sets(tuple(corpora)):
        vpc_set = VpcSet(name=f"{corpus}_{split}_{part}", corpus=corpus, split=split, part=part)
        folder = next((f for f in (root / vpc_set.name, root / "data" / vpc_set.name) if f.is_dir()), None)
        if folder is None:
            if required:
                missing.append(vpc_set.name)
            continue
        vpc_set.path = str(folder)
        data = _load_set(vpc_set, folder, root, read_headers)
        if data is not None:
            loaded[vpc_set.name] = data
        sets.append(vpc_set)
    by_name = {s.name: s for s in sets}
    for vpc_set in sets:
        if vpc_set.role == "trials" and vpc_set.name in loaded:
            enrol_name = f"{vpc_set.corpus}_{vpc_set.split}_enrolls"
            _check_trials(vpc_set, loaded[vpc_set.name], loaded.get(enrol_name),
                          enrol_name if enrol_name in by_name else None)
    return VpcIndex(root=str(root), sets=sets, missing=missing), loaded


def write_index(index: VpcIndex, path: str | os.PathLike) -> None:
    atomic_write_text(path, index.to_json())


def write_native_sets(loaded: dict[str, DataDir], out_dir: str | os.PathLike) -> list[Path]:
    """Copies of the sets with every resolvable command replaced by the file it decodes."""
    written = []
    for name, data in sorted(loaded.items()):
        target = contained_path(out_dir, name)
        write_data_dir(data, target)
        written.append(target)
    return written


def _load_set(vpc_set: VpcSet, folder: Path, root: Path, read_headers: bool) -> DataDir | None:
    required = ["wav.scp", "utt2spk", "spk2gender", vpc_set.role]
    if vpc_set.role == "trials":
        required.append("text")
    for name in required:
        if not (folder / name).is_file():
            vpc_set.problems.append(f"{name}: missing file")
    if not (folder / "wav.scp").is_file():
        return None
    try:
        data = read_data_dir(folder, allow_pipes=True)
    except DataDirError as error:
        vpc_set.problems.extend(error.problems)
        return None
    trials, data.trials = data.trials, None
    vpc_set.problems.extend(data.validate(check_files=False, need_gender=True))
    data.trials = trials
    vpc_set.utterances = len(data.wav)
    for speaker in data.speakers:
        sex = data.spk2gender.get(speaker, "unknown")
        vpc_set.speakers[sex] = vpc_set.speakers.get(sex, 0) + 1
    if data.enrolls is not None:
        vpc_set.enrolls = len(data.enrolls)
    if data.trials is not None:
        vpc_set.targets = sum(t.target for t in data.trials)
        vpc_set.nontargets = len(data.trials) - vpc_set.targets
    _resolve_audio(vpc_set, data, folder, root, read_headers)
    return data


def _resolve_audio(vpc_set: VpcSet, data: DataDir, folder: Path, root: Path, read_headers: bool) -> None:
    # Here, not at the top: `voxanon prepare`'s parser reads CORPORA and INDEX_NAME.
    import soundfile
    from tqdm import tqdm

    missing: list[str] = []
    unresolved: list[str] = []
    unreadable: list[str] = []
    by_rate: dict[int, list[str]] = {}
    bases = (Path.cwd(), folder, root, root.parent)
    for utt in tqdm(sorted(data.wav), desc=vpc_set.name, unit="file", disable=None):
        entry = data.wav[utt].strip()
        if entry.endswith("|"):
            vpc_set.command_entries += 1
            decoded = decoded_file(entry)
            if decoded is None:
                unresolved.append(f"{utt} ({entry})")
                continue
            entry = decoded
        path = next((p for p in _candidates(entry, bases) if p.is_file()), None)
        if path is None:
            missing.append(f"{utt} ({entry})")
            continue
        data.wav[utt] = str(path)
        if read_headers:
            try:
                header = read_audio_header(str(path))
            except (soundfile.LibsndfileError, RuntimeError, OSError) as error:
                unreadable.append(f"{utt} ({error})")
                continue
            if header.sample_rate != TARGET_RATE:
                by_rate.setdefault(header.sample_rate, []).append(utt)
    _note(vpc_set, "audio files missing", missing)
    _note(vpc_set, "wav.scp commands not understood (left as commands; they need --allow-pipes)",
          unresolved)
    _note(vpc_set, "audio headers unreadable", unreadable)
    for rate, utts in sorted(by_rate.items()):
        _note(vpc_set, f"audio at {rate} Hz, not {TARGET_RATE} Hz", utts)


def decoded_file(command: str) -> str | None:
    """The audio file a plain decoding command (``flac -c -d -s X.flac |``) reads, else None."""
    try:
        tokens = shlex.split(command.rstrip().rstrip("|"))
    except ValueError:
        return None
    if not tokens:
        return None
    program = os.path.basename(tokens[0])
    if program not in _PLAIN_DECODER_ARGUMENTS:
        return None
    files = [t for t in tokens[1:] if t.lower().endswith(AUDIO_EXTENSIONS)]
    others = [t for t in tokens[1:] if t not in files]
    allowed = _PLAIN_DECODER_ARGUMENTS[program]
    plain = all(t.startswith("-") for t in others) if allowed is None else set(others) <= allowed
    return files[0] if len(files) == 1 and plain else None


def _candidates(entry: str, bases: tuple[Path, ...]) -> list[Path]:
    path = Path(entry)
    if path.is_absolute():
        return [path]
    return [base / path for base in bases]


def _check_trials(vpc_set: VpcSet, data: DataDir, enrolls: DataDir | None, enrol_name: str | None) -> None:
    trials = data.trials or []
    if enrolls is None:
        reason = "could not be read" if enrol_name else "is missing"
        vpc_set.problems.append(f"trials: enrolment set {vpc_set.corpus}_{vpc_set.split}_enrolls {reason}; "
                                "enrolment speakers not checked")
        enrolled: dict[str, str] | None = None
    else:
        enrolled = {enrolls.utt2spk[u]: enrolls.spk2gender.get(enrolls.utt2spk[u], "unknown")
                    for u in (enrolls.enrolls or []) if u in enrolls.utt2spk}
        overlap = sorted(set(enrolls.enrolls or []) & set(data.wav))
        _note(vpc_set, "test utterances that are also enrolment utterances", overlap)
    not_enrolled, wrong_sex_enrol, wrong_sex_test, unknown_utt = set(), set(), set(), set()
    wrong_label: list[str] = []
    repeated: list[str] = []
    seen: set[tuple[str, str]] = set()
    for trial in trials:
        if (trial.enrol_speaker, trial.test_utt) in seen:
            repeated.append(f"{trial.enrol_speaker} {trial.test_utt}")
        seen.add((trial.enrol_speaker, trial.test_utt))
        speaker = data.utt2spk.get(trial.test_utt)
        if speaker is None:
            unknown_utt.add(trial.test_utt)
            continue
        if trial.target != (speaker == trial.enrol_speaker):
            wrong_label.append(f"{trial.enrol_speaker} {trial.test_utt}")
        if enrolled is not None and trial.enrol_speaker not in enrolled:
            not_enrolled.add(trial.enrol_speaker)
        if vpc_set.sex is not None:
            if enrolled is not None and enrolled.get(trial.enrol_speaker, vpc_set.sex) != vpc_set.sex:
                wrong_sex_enrol.add(trial.enrol_speaker)
            if data.spk2gender.get(speaker) != vpc_set.sex:
                wrong_sex_test.add(speaker)
    _note(vpc_set, "trials: pairs listed more than once", repeated)
    _note(vpc_set, "trials: test utterances not in this set", sorted(unknown_utt))
    _note(vpc_set, "trials: enrolment speakers without enrolment utterances", sorted(not_enrolled))
    _note(vpc_set, f"trials: enrolment speakers not of sex {vpc_set.sex}", sorted(wrong_sex_enrol))
    _note(vpc_set, f"trials: test speakers not of sex {vpc_set.sex}", sorted(wrong_sex_test))
    _note(vpc_set, "trials: target label disagrees with the speakers", wrong_label)


def _note(vpc_set: VpcSet, what: str, items: list[str]) -> None:
    if items:
        vpc_set.problems.append(summarise(what, items))
