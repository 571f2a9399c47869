"""The corpus model: Kaldi data directories and plain audio folders, read, validated and written.

Everything in voxanon reads and writes corpus metadata through this module.

Kaldi data directory files (the VoicePrivacy challenges' layout):

- ``wav.scp``     ``<utt> <path>``, or ``<utt> <command> |`` (only with ``allow_pipes``)
- ``utt2spk``     ``<utt> <spk>``; ``spk2utt`` ``<spk> <utt1> <utt2> ...`` (derived, checked)
- ``spk2gender``  ``<spk> f|m``
- ``text``        ``<utt> <WORDS ...>``
- ``utt2dur``     ``<utt> <seconds>``
- ``enrolls``     one utterance id a line (enrolment = speaker mean over these)
- ``trials``      ``<enrol-spk> <test-utt> target|nontarget``

Relative paths in ``wav.scp`` are resolved against the current directory (Kaldi's
convention) and, when nothing is there, against the data directory itself; voxanon
writes paths relative to the data directory, so its own output directories can be moved.
"""
from __future__ import annotations

import logging
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from .atomic import atomic_write_text
from .errors import VoxanonError
from .paths import LINK_LOOP, id_message, id_problem, link_loop

log = logging.getLogger(__name__)

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif", ".au", ".sph")
GENDERS = ("f", "m")
# Metadata files copied unchanged into anonymised sets beside the ones modelled here.
PASSTHROUGH_FILES = ("utt2emo", "spk2fold", "utt2lang", "segments_orig", "id_map.tsv")
# An audio folder's ids in place of file and folder names that cannot be Kaldi ids (see scan_audio_folder).
ID_MAP = "id_map.tsv"


class DataDirError(VoxanonError):
    """A data directory that cannot be used; lists every problem found (one on the message's one line)."""

    def __init__(self, where: str, problems: list[str]):
        self.where = where
        self.problems = problems
        if len(problems) == 1:  # one line, as every user fault
            super().__init__(f"{where}: {problems[0]}")
            return
        shown = problems[:20]
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"{where}: {len(problems)} problem(s):\n  " + "\n  ".join(shown) + more)


@dataclass(frozen=True, slots=True)
class Trial:
    enrol_speaker: str
    test_utt: str
    target: bool


@dataclass
class DataDir:
    """One corpus set. ``wav`` maps utterance ids to a path or a ``command |`` entry."""

    name: str
    wav: dict[str, str]
    utt2spk: dict[str, str]
    spk2gender: dict[str, str] = field(default_factory=dict)
    text: dict[str, str] = field(default_factory=dict)
    utt2dur: dict[str, float] = field(default_factory=dict)
    enrolls: list[str] | None = None
    trials: list[Trial] | None = None
    passthrough: dict[str, str] = field(default_factory=dict)  # file name -> content
    path: Path | None = None

    @property
    def utterances(self) -> list[str]:
        return sorted(self.wav)

    @property
    def spk2utt(self) -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = defaultdict(list)
        for utt in sorted(self.utt2spk):
            grouped[self.utt2spk[utt]].append(utt)
        return dict(sorted(grouped.items()))

    @property
    def speakers(self) -> list[str]:
        return sorted(set(self.utt2spk.values()))

    def is_pipe(self, utt: str) -> bool:
        return self.wav[utt].rstrip().endswith("|")

    def audio_path(self, utt: str) -> Path:
        """The file behind a plain ``wav.scp`` entry, resolved as the module doc says."""
        entry = Path(self.wav[utt])
        if entry.is_absolute() or self.path is None:
            return entry
        if entry.exists():
            return entry
        return self.path / entry

    def absolute_wav(self) -> dict[str, str]:
        """``wav.scp`` with every file entry made absolute (commands kept), for sets written elsewhere."""
        return {utt: entry if self.is_pipe(utt) or os.path.isabs(entry) else os.path.abspath(self.audio_path(utt))
                for utt, entry in self.wav.items()}

    def missing_file(self, utt: str) -> str | None:
        """Why the plain ``wav.scp`` entry of ``utt`` names no file (where it was looked for), or None."""
        if self.is_pipe(utt) or self.audio_path(utt).is_file():
            return None
        entry = self.wav[utt]
        if self.audio_path(utt).is_dir():
            return f"{self.audio_path(utt)} is a folder, not an audio file"
        if os.path.isabs(entry) or self.path is None:
            return f"missing file {entry}"
        return f"missing file {entry} (looked for it relative to the current directory and to {self.path})"

    def id_problems(self) -> list[str]:
        """Utterance and speaker ids that cannot be file names (see :mod:`voxanon.data_prep.paths`)."""
        utterances = set(self.wav) | set(self.utt2spk) | set(self.text) | set(self.utt2dur) | set(self.enrolls or ())
        utterances |= {trial.test_utt for trial in self.trials or ()}
        speakers = set(self.utt2spk.values()) | set(self.spk2gender)
        speakers |= {trial.enrol_speaker for trial in self.trials or ()}
        problems = []
        for kind, ids in (("utterance", utterances), ("speaker", speakers)):
            for value in sorted(ids):
                problem = id_problem(value)
                if problem is not None:
                    problems.append(id_message(kind, value, problem))
        return problems

    def validate(self, *, check_files: bool = True, need_gender: bool = False) -> list[str]:
        """Every consistency problem, each naming the file and the ids concerned."""
        problems = self.id_problems()
        if not self.wav:
            problems.append("wav.scp: no utterances")
        for utt in sorted(set(self.wav) - set(self.utt2spk)):
            problems.append(f"utt2spk: utterance {utt!r} (in wav.scp) has no speaker")
        for utt in sorted(set(self.utt2spk) - set(self.wav)):
            problems.append(f"wav.scp: utterance {utt!r} (in utt2spk) has no audio entry")
        for name, table in (("text", self.text), ("utt2dur", self.utt2dur)):
            for utt in sorted(set(table) - set(self.wav)):
                problems.append(f"{name}: unknown utterance {utt!r}")
        speakers = set(self.utt2spk.values())
        for spk, gender in sorted(self.spk2gender.items()):
            if gender not in GENDERS:
                problems.append(f"spk2gender: speaker {spk!r} has label {gender!r}, expected f or m")
        if need_gender:
            for spk in sorted(speakers - set(self.spk2gender)):
                problems.append(f"spk2gender: speaker {spk!r} has no sex label (this recipe needs one)")
        if self.enrolls is not None:
            for utt in self.enrolls:
                if utt not in self.wav:
                    problems.append(f"enrolls: unknown utterance {utt!r}")
            for utt in _duplicates(self.enrolls):
                problems.append(f"enrolls: utterance {utt!r} listed more than once")
        if self.trials is not None:
            enrolled = ({self.utt2spk[u] for u in self.enrolls if u in self.utt2spk}
                        if self.enrolls is not None else None)
            seen: set[tuple[str, str]] = set()
            for trial in self.trials:
                if trial.test_utt not in self.wav:
                    problems.append(f"trials: unknown test utterance {trial.test_utt!r}")
                if enrolled is not None and trial.enrol_speaker not in enrolled:
                    problems.append(f"trials: enrolment speaker {trial.enrol_speaker!r} has no enrolls utterance")
                elif enrolled is None and trial.enrol_speaker not in speakers:
                    problems.append(f"trials: unknown enrolment speaker {trial.enrol_speaker!r}")
                key = (trial.enrol_speaker, trial.test_utt)
                if key in seen:
                    problems.append(f"trials: pair {key[0]} {key[1]} listed more than once")
                seen.add(key)
        if check_files:
            for utt in sorted(self.wav):
                missing = self.missing_file(utt)
                if missing is not None:
                    problems.append(f"wav.scp: utterance {utt!r}: {missing}")
        return problems

    def subset(self, utterances: Iterable[str]) -> "DataDir":
        """The metadata of the given utterances (speakers, trials and enrolls filtered to match)."""
        keep = set(utterances)
        speakers = {self.utt2spk[u] for u in keep if u in self.utt2spk}
        return DataDir(
            name=self.name,
            wav={u: p for u, p in self.wav.items() if u in keep},
            utt2spk={u: s for u, s in self.utt2spk.items() if u in keep},
            spk2gender={s: g for s, g in self.spk2gender.items() if s in speakers},
            text={u: t for u, t in self.text.items() if u in keep},
            utt2dur={u: d for u, d in self.utt2dur.items() if u in keep},
            enrolls=None if self.enrolls is None else [u for u in self.enrolls if u in keep],
            trials=None if self.trials is None else [t for t in self.trials if t.test_utt in keep],
            passthrough=dict(self.passthrough),
            path=self.path,
        )


def _duplicates(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    repeated: list[str] = []
    for item in items:
        if item in seen and item not in repeated:
            repeated.append(item)
        seen.add(item)
    return repeated


# Kaldi separates fields with ASCII white space alone; str.split() also splits at these (U+001C-U+001F, U+0085,
# U+2028 "line separator" and the Unicode spaces), which in an id must be refused (or kept), never read as a space.
_KALDI_SPACE = " \t\n\r\f\v"
_OTHER_SPACE = re.compile("[\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_KALDI_SEPARATOR = re.compile(f"[{_KALDI_SPACE}]+")
_MAPPED_CHARACTERS = "white space, control characters and '\\'"


def _fields(line: str, maxsplit: int = -1) -> list[str]:
    """``line`` (stripped) split at Kaldi's white space."""
    if _OTHER_SPACE.search(line) is None:
        return line.split(None, maxsplit)
    return _KALDI_SEPARATOR.split(line, max(maxsplit, 0))


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    if not Path(path).is_file():
        raise DataDirError(str(path), [f"{path}: file not found"])
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip(_KALDI_SPACE)
            if line:
                yield number, line


def _check_id(found: list[str], where: str, kind: str, value: str) -> bool:
    """Whether ``value`` can be an id; if not, the problem is appended to ``found`` naming ``where`` (file:line)."""
    problem = id_problem(value)
    if problem is None:
        return True
    found.append(f"{where}: {id_message(kind, value, problem)}")
    return False


def read_mapping(path: str | os.PathLike, problems: list[str] | None = None, *, key_kind: str = "",
                 value_kind: str | None = None) -> dict[str, str]:
    """Read a two-column Kaldi table (``<key> <rest of line>``).

    Keys are ids (``key_kind``: utterance or speaker, for messages); with ``value_kind``
    every word of the value is an id too (``utt2spk``, ``spk2utt``). An id that cannot be
    a file name, a malformed line or a duplicate key is a problem: appended to
    ``problems`` when a list is given, raised as :class:`DataDirError` otherwise.
    """
    path = Path(path)
    own = problems is None
    found: list[str] = [] if own else problems
    mapping: dict[str, str] = {}
    for number, line in _lines(path):
        parts = _fields(line, maxsplit=1)
        if len(parts) != 2:
            found.append(f"{path.name}:{number}: expected '<id> <value>', got {line!r}")
            continue
        key, value = parts
        where = f"{path.name}:{number}"
        if not _check_id(found, where, key_kind or "the", key):
            continue
        if value_kind is not None and not all([_check_id(found, where, value_kind, word) for word in _fields(value)]):
            continue
        if key in mapping:
            found.append(f"{where}: duplicate id {key!r}")
            continue
        mapping[key] = value
    if own and found:
        raise DataDirError(str(path), found)
    return mapping


def read_list(path: str | os.PathLike, problems: list[str] | None = None, *, kind: str = "") -> list[str]:
    """One id a line (``enrolls``): only the first field of each line counts.

    An id that cannot be a file name is a problem, appended to ``problems`` or raised.
    """
    path = Path(path)
    own = problems is None
    found: list[str] = [] if own else problems
    ids = []
    for number, line in _lines(path):
        first = _fields(line, maxsplit=1)[0]
        if _check_id(found, f"{path.name}:{number}", kind or "the", first):
            ids.append(first)
    if own and found:
        raise DataDirError(str(path), found)
    return ids


def read_trials(path: str | os.PathLike, problems: list[str] | None = None) -> list[Trial]:
    path = Path(path)
    own = problems is None
    found: list[str] = [] if own else problems
    trials: list[Trial] = []
    for number, line in _lines(path):
        parts = _fields(line)
        if len(parts) != 3 or parts[2] not in ("target", "nontarget"):
            found.append(f"{path.name}:{number}: expected '<enrol-spk> <utt> target|nontarget', got {line!r}")
            continue
        where = f"{path.name}:{number}"
        if all([_check_id(found, where, "enrolment speaker", parts[0]),
                _check_id(found, where, "test utterance", parts[1])]):
            trials.append(Trial(parts[0], parts[1], parts[2] == "target"))
    if own and found:
        raise DataDirError(str(path), found)
    return trials


def format_mapping(mapping: dict[str, object]) -> str:
    return "".join(f"{key} {mapping[key]}\n" for key in sorted(mapping))


def format_trials(trials: Iterable[Trial]) -> str:
    return "".join(f"{t.enrol_speaker} {t.test_utt} {'target' if t.target else 'nontarget'}\n" for t in trials)


def write_mapping(path: str | os.PathLike, mapping: dict[str, object]) -> None:
    atomic_write_text(path, format_mapping(mapping))


def _input_folder(path: str | os.PathLike) -> Path:
    """``path`` as a Path, refused naming it when it is a loop of symbolic links (which would read as missing)."""
    path = Path(path)
    if link_loop(path):
        raise DataDirError(str(path), [LINK_LOOP])
    return path


def read_data_dir(path: str | os.PathLike, *, allow_pipes: bool = False) -> DataDir:
    """Parse a Kaldi data directory; format errors (duplicates, malformed lines) raise.

    Consistency between the files is checked by :meth:`DataDir.validate`.
    """
    path = _input_folder(path)
    if not (path / "wav.scp").is_file():
        raise DataDirError(str(path), ["wav.scp: missing (is this a Kaldi data directory?)"])
    if (path / "segments").is_file():
        raise DataDirError(str(path), ["segments: segmented recordings are not supported; "
                                       "cut the segments into files first"])
    problems: list[str] = []
    wav = read_mapping(path / "wav.scp", problems, key_kind="utterance")
    for utt, entry in wav.items():
        if entry.rstrip().endswith("|") and not allow_pipes:
            problems.append(f"wav.scp: utterance {utt!r} is a command ({entry!r}); "
                            "commands run only with --allow-pipes")
        elif re.search(r"\.ark:\d+$", entry):
            problems.append(f"wav.scp: utterance {utt!r} points into an archive ({entry!r}); not supported")
    utt2spk = (read_mapping(path / "utt2spk", problems, key_kind="utterance", value_kind="speaker")
               if (path / "utt2spk").is_file() else {})
    if not (path / "utt2spk").is_file():
        problems.append("utt2spk: missing")
    if (path / "spk2utt").is_file():
        spk2utt = read_mapping(path / "spk2utt", problems, key_kind="speaker", value_kind="utterance")
        from_spk2utt = {utt: spk for spk, utts in spk2utt.items() for utt in _fields(utts)}
        if from_spk2utt != utt2spk:
            differing = sorted(set(from_spk2utt.items()) ^ set(utt2spk.items()))
            problems.append(f"spk2utt: disagrees with utt2spk for {len(differing)} entries, "
                            f"e.g. {differing[0][0]!r}")
    spk2gender = {s: g.lower() for s, g in read_mapping(path / "spk2gender", problems, key_kind="speaker").items()} \
        if (path / "spk2gender").is_file() else {}
    text = read_mapping(path / "text", problems, key_kind="utterance") if (path / "text").is_file() else {}
    utt2dur: dict[str, float] = {}
    if (path / "utt2dur").is_file():
        for utt, value in read_mapping(path / "utt2dur", problems, key_kind="utterance").items():
            try:
                utt2dur[utt] = float(value)
            except ValueError:
                problems.append(f"utt2dur: utterance {utt!r} has duration {value!r}, not a number")
    enrolls = read_list(path / "enrolls", problems, kind="utterance") if (path / "enrolls").is_file() else None
    trials = read_trials(path / "trials", problems) if (path / "trials").is_file() else None
    passthrough = {name: (path / name).read_text(encoding="utf-8")
                   for name in PASSTHROUGH_FILES if (path / name).is_file()}
    if problems:
        raise DataDirError(str(path), problems)
    return DataDir(name=path.name, wav=wav, utt2spk=utt2spk, spk2gender=spk2gender, text=text,
                   utt2dur=utt2dur, enrolls=enrolls, trials=trials, passthrough=passthrough, path=path)


def write_data_dir(data: DataDir, path: str | os.PathLike) -> None:
    """Write every file the data directory has, sorted as Kaldi requires, each atomically.

    Optional files that ``data`` does not have are removed, so that rewriting a directory
    never leaves a stale file of an earlier version (an old ``utt2dur``, say).
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    has = {"spk2gender": bool(data.spk2gender), "text": bool(data.text), "utt2dur": bool(data.utt2dur),
           "enrolls": data.enrolls is not None, "trials": data.trials is not None}
    for name, present in has.items():
        if not present and (path / name).is_file():
            (path / name).unlink()
    write_mapping(path / "wav.scp", data.wav)
    write_mapping(path / "utt2spk", data.utt2spk)
    write_mapping(path / "spk2utt", {spk: " ".join(utts) for spk, utts in data.spk2utt.items()})
    if data.spk2gender:
        write_mapping(path / "spk2gender", data.spk2gender)
    if data.text:
        write_mapping(path / "text", data.text)
    if data.utt2dur:
        write_mapping(path / "utt2dur", {u: f"{d:.3f}" for u, d in data.utt2dur.items()})
    if data.enrolls is not None:
        atomic_write_text(path / "enrolls", "".join(f"{u}\n" for u in data.enrolls))
    if data.trials is not None:
        atomic_write_text(path / "trials", format_trials(data.trials))
    for name, content in data.passthrough.items():
        atomic_write_text(path / name, content)


# Characters of a file or folder name that cannot be in a Kaldi id: white space of any kind (Kaldi's, and the
# Unicode spaces that Python's str.split(), as in the challenge's scripts, also splits at), control characters
# and path separators (paths.id_problem). An audio folder's id has each replaced by '_'.
_NOT_IN_ID = re.compile(r"[\s/\\\x00-\x1f\x7f-\x9f]")
_ESCAPED_IN_MAP = re.compile(r"[\\\x00-\x1f\x7f-\x9f\u2028\u2029]")


def audio_folder_id(name: str) -> str:
    """The id of a file or folder name of an audio folder: ``name`` with every character that cannot be in a Kaldi
    id (:data:`_NOT_IN_ID`) replaced by ``_`` (``"my file"`` -> ``"my_file"``)."""
    return _NOT_IN_ID.sub("_", name)


def _map_field(text: str) -> str:
    """``text`` as one field of ``id_map.tsv``: a backslash and each control character written as a Python
    escape (``\\t``, ``\\x07``), so a tab or a line break in a file name cannot break the table."""
    return _ESCAPED_IN_MAP.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)


def format_id_map(renamed: dict[tuple[str, str], str]) -> str:
    """``id_map.tsv``: ``kind  id  original`` for every renamed utterance (original: the file's path relative to
    the folder) and speaker (original: the folder name or the regular expression's group), sorted."""
    lines = ["kind\tid\toriginal\n"]
    lines += [f"{kind}\t{new_id}\t{_map_field(original)}\n" for (kind, new_id), original in sorted(renamed.items())]
    return "".join(lines)


def scan_audio_folder(root: str | os.PathLike, *, speaker_level: int = 1,
                      speaker_regex: str | None = None) -> DataDir:
    """A data set from a plain folder of audio files.

    The utterance id is the file name without its extension. The speaker is the name of
    the folder ``speaker_level`` levels above the file (1 = its parent), or, with
    ``speaker_regex``, the group ``spk`` (else the first group) of a match against the
    path relative to ``root``. A name that cannot be a Kaldi id (spaces, control characters, ``\\``) gives the id
    :func:`audio_folder_id` makes of it, recorded in the set's ``id_map.tsv`` (which output sets carry on); two
    names that would give one id are refused, naming both.
    """
    root = _input_folder(root)
    if not root.is_dir():
        raise DataDirError(str(root), ["not a folder"])
    pattern = re.compile(speaker_regex) if speaker_regex else None
    problems: list[str] = []
    wav: dict[str, str] = {}
    utt2spk: dict[str, str] = {}
    renamed: dict[tuple[str, str], str] = {}
    speaker_names: dict[str, str] = {}  # speaker id -> the name it was made from
    for file in sorted(p for p in root.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file()):
        relative = file.relative_to(root)
        utt = audio_folder_id(file.stem)
        if utt in wav:
            renamed_one = utt != file.stem or Path(wav[utt]).stem != utt
            made = f" (ids are the file names with {_MAPPED_CHARACTERS} as '_')" if renamed_one else ""
            problems.append(f"duplicate utterance id {utt!r}: {wav[utt]} and {file}{made}; rename one")
            continue
        if pattern is not None:
            match = pattern.search(relative.as_posix())
            if not match:
                problems.append(f"{relative}: speaker regex {speaker_regex!r} does not match")
                continue
            speaker_name = match.group("spk") if "spk" in pattern.groupindex else match.group(1)
        else:
            if len(relative.parts) <= speaker_level:
                problems.append(f"{relative}: no folder {speaker_level} level(s) above the file "
                                "to take the speaker from")
                continue
            speaker_name = relative.parts[-1 - speaker_level]
        speaker = audio_folder_id(speaker_name)
        if speaker_names.setdefault(speaker, speaker_name) != speaker_name:
            problems.append(f"{relative}: speakers {speaker_names[speaker]!r} and {speaker_name!r} would have one "
                            f"id, {speaker!r} ({_MAPPED_CHARACTERS} become '_'); rename one")
            continue
        if not all([_check_id(problems, str(relative), "utterance", utt),
                    _check_id(problems, str(relative), "speaker", speaker)]):
            continue
        wav[utt] = str(file.resolve())
        utt2spk[utt] = speaker
        if utt != file.stem:
            renamed["utterance", utt] = relative.as_posix()
        if speaker != speaker_name:
            renamed["speaker", speaker] = speaker_name
    if not wav and not problems:
        problems.append(f"no audio files ({', '.join(AUDIO_EXTENSIONS)}) found")
    if problems:
        raise DataDirError(str(root), problems)
    passthrough = {ID_MAP: format_id_map(renamed)} if renamed else {}
    if renamed:
        (kind, new_id), original = next(iter(sorted(renamed.items())))
        log.warning("%s: %d file or folder name(s) cannot be Kaldi ids (%s), so their ids have '_' in their place, "
                    "e.g. %s %r -> %r; each output set records them in %s", root, len(renamed), _MAPPED_CHARACTERS,
                    kind, original, new_id, ID_MAP)
    return DataDir(name=root.name, wav=wav, utt2spk=utt2spk, passthrough=passthrough, path=root)


def load_corpus(path: str | os.PathLike, *, allow_pipes: bool = False, speaker_level: int = 1,
                speaker_regex: str | None = None) -> DataDir:
    """A Kaldi data directory when ``path`` has a ``wav.scp``, else a plain audio folder."""
    path = _input_folder(path)
    if (path / "wav.scp").is_file():
        return read_data_dir(path, allow_pipes=allow_pipes)
    return scan_audio_folder(path, speaker_level=speaker_level, speaker_regex=speaker_regex)


def merge_labelled_sets(sets: list[DataDir]) -> tuple[dict[str, str], dict[str, str]]:
    """utt -> speaker and speaker -> sex over several sets that must all label every speaker's sex:
    utterance ids unique across the sets, a speaker's sex the same in each (errors name the set)."""
    utt2spk: dict[str, str] = {}
    sex: dict[str, str] = {}
    for data in sets:
        where = str(data.path or data.name)
        duplicated = sorted(set(data.utt2spk) & set(utt2spk))
        if duplicated:
            raise VoxanonError(f"{where}: utterance id(s) {', '.join(duplicated[:5])} also appear in an earlier "
                               "data set; each utterance must be given once")
        problems = data.validate(check_files=False, need_gender=True)
        if problems:
            raise DataDirError(where, problems)
        for speaker in data.speakers:
            if sex.setdefault(speaker, data.spk2gender[speaker]) != data.spk2gender[speaker]:
                raise VoxanonError(f"{where}: speaker {speaker!r} is {data.spk2gender[speaker]!r} here but "
                                   f"{sex[speaker]!r} in an earlier data set")
        utt2spk.update(data.utt2spk)
    return utt2spk, sex


def write_anonymised_dir(source: DataDir, out_dir: str | os.PathLike, produced: dict[str, float]) -> DataDir:
    """Finish a VoicePrivacy-layout output set ``<out>/<set><suffix>``.

    ``produced`` maps each utterance written to ``wav/<utt>.wav`` to its duration in
    seconds. Metadata is copied from the source; ``wav.scp`` and ``utt2dur`` are rebuilt
    from what was produced. An utterance that failed (the run lists it in ``failures.tsv``)
    leaves the metadata with its audio (its speaker's too when it was the speaker's last, and
    its trials and enrolment), so the output set is itself a valid input set.
    """
    out_dir = Path(out_dir)
    kept = source.subset(produced) if set(source.wav) - set(produced) else source
    trials = kept.trials
    if kept.enrolls is not None and trials is not None and kept is not source:
        enrolled = {kept.utt2spk[utt] for utt in kept.enrolls if utt in kept.utt2spk}
        trials = [trial for trial in trials if trial.enrol_speaker in enrolled]
    result = DataDir(
        name=out_dir.name,
        wav={utt: f"wav/{utt}.wav" for utt in produced},
        utt2spk=dict(kept.utt2spk),
        spk2gender=dict(kept.spk2gender),
        text=dict(kept.text),
        utt2dur=dict(produced),
        enrolls=kept.enrolls,
        trials=trials,
        passthrough=dict(source.passthrough),
        path=out_dir,
    )
    write_data_dir(result, out_dir)
    return result
