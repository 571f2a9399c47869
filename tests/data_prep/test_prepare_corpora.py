"""`voxanon prepare librispeech|vctk|libritts` on miniature trees in the real layouts."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile

from voxanon.data_prep.corpus import DataDirError, read_data_dir
from voxanon.data_prep.prepare.issues import PreparationIssues
from voxanon.data_prep.prepare.libritts import scan_libritts
from voxanon.data_prep.prepare.listing import PrepareOptions, prepare_corpus
from voxanon.pipeline.cli import main

KALDI_FILES = ("wav.scp", "utt2spk", "spk2utt", "spk2gender", "text", "utt2dur")


def tone(path: Path, seconds: float, rate: int, channels: int = 1) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(round(seconds * rate))) / rate
    wave = 0.3 * np.sin(2 * np.pi * 220 * t)
    soundfile.write(path, np.tile(wave[:, None], (1, channels)) if channels > 1 else wave, rate)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def assert_files(out: Path, expected: dict[str, str]) -> None:
    for name in KALDI_FILES:
        if name in expected:
            assert (out / name).read_bytes() == expected[name].encode("utf-8"), name
        else:
            assert not (out / name).exists(), name


SPEAKERS_TXT = """\
; This is a file of speaker data, as LibriSpeech ships it.
;ID  |SEX| SUBSET           |MINUTES| NAME
19   | F | dev-clean        | 25.19 | Kara Shallenberg
26   | M | dev-clean        | 25.08 | Denny Sayers
60   | M | train-clean-100  | 20.18 | |CBW|Simon
"""


def librispeech_tree(root: Path) -> Path:
    corpus = root / "LibriSpeech"
    write(corpus / "SPEAKERS.TXT", SPEAKERS_TXT)
    chapter = corpus / "dev-clean" / "19" / "198"
    write(chapter / "19-198.trans.txt", "19-198-0000 NORTHANGER ABBEY\n19-198-0001 THIS LITTLE WORK WAS FINISHED\n")
    tone(chapter / "19-198-0000.flac", 0.5, 16000)
    tone(chapter / "19-198-0001.flac", 0.25, 16000)
    chapter = corpus / "dev-clean" / "26" / "495"
    write(chapter / "26-495.trans.txt", "26-495-0000 HE DIDN'T SAY\n")
    tone(chapter / "26-495-0000.flac", 1.0, 16000)
    chapter = corpus / "train-clean-100" / "60" / "121082"
    write(chapter / "60-121082.trans.txt", "60-121082-0000 A SECOND SUBSET\n")
    tone(chapter / "60-121082-0000.flac", 0.125, 16000)
    return corpus


def test_librispeech_dir_matches_expected_files(tmp_path):
    corpus = librispeech_tree(tmp_path / "corpus").resolve()
    out = tmp_path / "dev"
    assert main(["prepare", "librispeech", "--root", str(tmp_path / "corpus"),
                 "--subset", "dev-clean", "--out", str(out), "--strict"]) == 0
    audio = corpus / "dev-clean"
    assert_files(out, {
        "wav.scp": f"19-198-0000 {audio}/19/198/19-198-0000.flac\n"
                   f"19-198-0001 {audio}/19/198/19-198-0001.flac\n"
                   f"26-495-0000 {audio}/26/495/26-495-0000.flac\n",
        "utt2spk": "19-198-0000 19\n19-198-0001 19\n26-495-0000 26\n",
        "spk2utt": "19 19-198-0000 19-198-0001\n26 26-495-0000\n",
        "spk2gender": "19 f\n26 m\n",
        "text": "19-198-0000 NORTHANGER ABBEY\n19-198-0001 THIS LITTLE WORK WAS FINISHED\n"
                "26-495-0000 HE DIDN'T SAY\n",
        "utt2dur": "19-198-0000 0.500\n19-198-0001 0.250\n26-495-0000 1.000\n",
    })
    data = read_data_dir(out)
    assert data.validate(need_gender=True) == []


def test_librispeech_several_subsets_filters_and_no_durations(tmp_path):
    librispeech_tree(tmp_path)
    out = tmp_path / "picked"
    assert main(["prepare", "librispeech", "--root", str(tmp_path / "LibriSpeech"),
                 "--subset", "dev-clean", "train-clean-100", "--out", str(out),
                 "--speakers", "19,60", "--no-durations", "--strict"]) == 0
    assert (out / "utt2spk").read_text() == "19-198-0000 19\n19-198-0001 19\n60-121082-0000 60\n"
    assert (out / "spk2gender").read_text() == "19 f\n60 m\n"
    assert not (out / "utt2dur").exists()
    listed = tmp_path / "utts"
    listed.write_text("26-495-0000\n19-198-0001\n")
    out = tmp_path / "listed"
    assert main(["prepare", "librispeech", "--root", str(tmp_path), "--subset", "dev-clean",
                 "--out", str(out), "--utterances", str(listed)]) == 0
    assert (out / "utt2spk").read_text() == "19-198-0001 19\n26-495-0000 26\n"


def broken_librispeech(root: Path) -> Path:
    corpus = librispeech_tree(root)
    chapter = corpus / "dev-clean" / "19" / "198"
    write(chapter / "19-198.trans.txt", "19-198-0000 NORTHANGER ABBEY\n19-198-0001 THIS LITTLE WORK\n"
                                        "19-198-0002 NO AUDIO FOR THIS ONE\n")
    tone(corpus / "dev-clean" / "26" / "495" / "26-495-0001.flac", 0.5, 16000)  # no transcript
    chapter = corpus / "dev-clean" / "99" / "100"  # speaker missing from SPEAKERS.TXT
    write(chapter / "99-100.trans.txt", "99-100-0000 EIGHT KILOHERTZ\n")
    tone(chapter / "99-100-0000.flac", 0.5, 8000)
    return corpus


def test_problems_are_counted_warned_and_nothing_silently_dropped(tmp_path, caplog):
    broken_librispeech(tmp_path)
    out = tmp_path / "dev"
    with caplog.at_level(logging.WARNING):
        assert main(["prepare", "librispeech", "--root", str(tmp_path), "--subset", "dev-clean",
                     "--out", str(out)]) == 0
    warnings = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "transcript without audio (utterance left out): 1 (e.g. 19-198-0002)" in warnings
    assert "audio without transcript (kept, no text line): 1 (e.g. 26-495-0001)" in warnings
    assert "speaker without an f/m sex label (kept, left out of spk2gender): 1 (e.g. 99 (not in" in warnings
    assert "audio at 8000 Hz, not 16000 Hz (kept; --resample converts it): 1 (e.g. 99-100-0000)" in warnings
    data = read_data_dir(out)
    assert sorted(data.wav) == ["19-198-0000", "19-198-0001", "26-495-0000", "26-495-0001", "99-100-0000"]
    assert "26-495-0001" not in data.text and "19-198-0002" not in data.wav
    assert data.spk2gender == {"19": "f", "26": "m"}
    assert data.utt2dur["99-100-0000"] == pytest.approx(0.5)


def test_strict_fails_with_every_problem_and_writes_nothing(tmp_path, capsys):
    broken_librispeech(tmp_path)
    out = tmp_path / "dev"
    assert main(["prepare", "librispeech", "--root", str(tmp_path), "--subset", "dev-clean",
                 "--out", str(out), "--strict"]) == 2
    message = capsys.readouterr().err
    assert "4 problem(s)" in message
    for kind in ("transcript without audio", "audio without transcript", "speaker without an f/m",
                 "audio at 8000 Hz"):
        assert kind in message
    assert not out.exists()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_unreadable_audio_is_reported_and_left_out(tmp_path, caplog, jobs):
    corpus = librispeech_tree(tmp_path)
    (corpus / "dev-clean" / "19" / "198" / "19-198-0001.flac").write_bytes(b"not audio at all")
    out = tmp_path / "dev"
    with caplog.at_level(logging.WARNING):
        assert main(["prepare", "librispeech", "--root", str(tmp_path), "--subset", "dev-clean",
                     "--out", str(out), "--jobs", jobs]) == 0
    assert "audio whose header cannot be read (utterance left out): 1" in caplog.text
    assert (out / "utt2dur").read_text() == "19-198-0000 0.500\n26-495-0000 1.000\n"
    assert "19-198-0001" not in (out / "wav.scp").read_text()


def test_unknown_subset_names_what_exists(tmp_path, capsys):
    librispeech_tree(tmp_path)
    assert main(["prepare", "librispeech", "--root", str(tmp_path), "--subset", "test-other",
                 "--out", str(tmp_path / "x")]) == 2
    assert "test-other not found" in capsys.readouterr().err


SPEAKER_INFO_092 = """\
ID  AGE  GENDER  ACCENTS  REGION COMMENTS 
p225  23  F    English    Southern  England
p226  22  M    English    Surrey
"""


def vctk_092_tree(root: Path) -> Path:
    write(root / "speaker-info.txt", SPEAKER_INFO_092)
    write(root / "txt" / "p225" / "p225_001.txt", "Please call Stella.\n")
    write(root / "txt" / "p225" / "p225_002.txt", "Ask her to bring these things -- \"with her\"; from the store!\n")
    write(root / "txt" / "p226" / "p226_001.txt", "Please call Stella.\n")
    audio = root / "wav48_silence_trimmed"
    for utt, seconds in (("p225_001", 0.5), ("p225_002", 0.75), ("p226_001", 0.25)):
        for mic in ("mic1", "mic2"):
            tone(audio / utt[:4] / f"{utt}_{mic}.flac", seconds, 48000)
    return root


def test_vctk_092_resampled_to_16k(tmp_path):
    root = vctk_092_tree(tmp_path / "VCTK-Corpus-0.92")
    out = tmp_path / "vctk"
    assert main(["prepare", "vctk", "--root", str(root), "--out", str(out), "--resample", "--strict"]) == 0
    assert_files(out, {
        "wav.scp": "p225_001_mic2 wav/p225_001_mic2.wav\np225_002_mic2 wav/p225_002_mic2.wav\n"
                   "p226_001_mic2 wav/p226_001_mic2.wav\n",
        "utt2spk": "p225_001_mic2 p225\np225_002_mic2 p225\np226_001_mic2 p226\n",
        "spk2utt": "p225 p225_001_mic2 p225_002_mic2\np226 p226_001_mic2\n",
        "spk2gender": "p225 f\np226 m\n",
        "text": "p225_001_mic2 PLEASE CALL STELLA\np225_002_mic2 ASK HER TO BRING THESE THINGS WITH HER FROM THE STORE\n"
                "p226_001_mic2 PLEASE CALL STELLA\n",
        "utt2dur": "p225_001_mic2 0.500\np225_002_mic2 0.750\np226_001_mic2 0.250\n",
    })
    info = soundfile.info(out / "wav" / "p225_002_mic2.wav")
    assert (info.samplerate, info.channels, info.frames) == (16000, 1, 12000)
    assert read_data_dir(out).validate(need_gender=True) == []


def test_vctk_092_mic1_without_resampling_reports_the_rate(tmp_path, caplog):
    root = vctk_092_tree(tmp_path / "vctk")
    (root / "wav48_silence_trimmed" / "p226" / "p226_001_mic1.flac").unlink()
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING):
        assert main(["prepare", "vctk", "--root", str(root), "--mic", "mic1", "--out", str(out)]) == 0
    audio = root.resolve() / "wav48_silence_trimmed"
    assert (out / "wav.scp").read_text() == (f"p225_001_mic1 {audio}/p225/p225_001_mic1.flac\n"
                                             f"p225_002_mic1 {audio}/p225/p225_002_mic1.flac\n")
    assert "audio at 48000 Hz, not 16000 Hz (kept; --resample converts it): 2" in caplog.text
    assert "transcript without audio (utterance left out): 1 (e.g. p226_001_mic1)" in caplog.text


def test_vctk_080_layout(tmp_path):
    root = tmp_path / "VCTK-Corpus"
    write(root / "speaker-info.txt", "ID  AGE  GENDER  ACCENTS  REGION\n225  23  F    English    Southern  England\n")
    write(root / "txt" / "p225" / "p225_001.txt", "Please call Stella.\n")
    tone(root / "wav48" / "p225" / "p225_001.wav", 0.5, 16000)
    out = tmp_path / "out"
    assert main(["prepare", "vctk", "--root", str(root), "--out", str(out), "--strict"]) == 0
    assert_files(out, {
        "wav.scp": f"p225_001 {root.resolve()}/wav48/p225/p225_001.wav\n",
        "utt2spk": "p225_001 p225\n", "spk2utt": "p225 p225_001\n", "spk2gender": "p225 f\n",
        "text": "p225_001 PLEASE CALL STELLA\n", "utt2dur": "p225_001 0.500\n",
    })


def libritts_tree(root: Path) -> Path:
    corpus = root / "LibriTTS"
    write(corpus / "speakers.tsv", "READER\tGENDER\tSUBSET\tNAME\n103\tF\ttrain-clean-100\tJoy Chan\n"
                                   "1034\tM\ttrain-clean-100\tKevin O'Coin\n")
    chapter = corpus / "train-clean-100" / "103" / "1241"
    for utt, seconds, text in (("103_1241_000000_000001", 0.5, "Chapter one, Missus Rachel Lynde is surprised."),
                               ("103_1241_000001_000000", 0.25, "\"Well-known,\" she said.")):
        tone(chapter / f"{utt}.wav", seconds, 24000)
        write(chapter / f"{utt}.normalized.txt", text)
        write(chapter / f"{utt}.original.txt", text.upper())
    chapter = corpus / "train-clean-100" / "1034" / "121119"
    tone(chapter / "1034_121119_000001_000000.wav", 1.0, 24000)
    write(chapter / "1034_121119_000001_000000.normalized.txt", "It's done.")
    return corpus


def test_libritts_dir_matches_expected_files(tmp_path):
    corpus = libritts_tree(tmp_path).resolve()
    out = tmp_path / "tts"
    assert main(["prepare", "libritts", "--root", str(tmp_path), "--subset", "train-clean-100",
                 "--out", str(out)]) == 0
    audio = corpus / "train-clean-100"
    assert_files(out, {
        "wav.scp": f"1034_121119_000001_000000 {audio}/1034/121119/1034_121119_000001_000000.wav\n"
                   f"103_1241_000000_000001 {audio}/103/1241/103_1241_000000_000001.wav\n"
                   f"103_1241_000001_000000 {audio}/103/1241/103_1241_000001_000000.wav\n",
        "utt2spk": "1034_121119_000001_000000 1034\n103_1241_000000_000001 103\n103_1241_000001_000000 103\n",
        "spk2utt": "103 103_1241_000000_000001 103_1241_000001_000000\n1034 1034_121119_000001_000000\n",
        "spk2gender": "103 f\n1034 m\n",
        "text": "1034_121119_000001_000000 IT'S DONE\n103_1241_000000_000001 CHAPTER ONE MISSUS RACHEL LYNDE IS SURPRISED\n"
                "103_1241_000001_000000 WELL KNOWN SHE SAID\n",
        "utt2dur": "1034_121119_000001_000000 1.000\n103_1241_000000_000001 0.500\n103_1241_000001_000000 0.250\n",
    })


def test_libritts_strict_rejects_24k_audio_unless_resampled(tmp_path):
    libritts_tree(tmp_path)
    issues = PreparationIssues("libritts")
    with pytest.raises(DataDirError, match="audio at 24000 Hz"):
        prepare_corpus(scan_libritts(tmp_path, ["train-clean-100"], issues), tmp_path / "out",
                       PrepareOptions(), issues, strict=True)
    out = tmp_path / "resampled"
    assert main(["prepare", "libritts", "--root", str(tmp_path), "--subset", "train-clean-100",
                 "--out", str(out), "--resample", "--strict"]) == 0
    assert (out / "utt2dur").read_text().splitlines()[0] == "1034_121119_000001_000000 1.000"
    assert soundfile.info(out / "wav" / "1034_121119_000001_000000.wav").samplerate == 16000
    # A second run reuses the converted files (resume) and writes the same directory.
    before = {name: (out / name).read_bytes() for name in KALDI_FILES}
    assert main(["prepare", "libritts", "--root", str(tmp_path), "--subset", "train-clean-100",
                 "--out", str(out), "--resample", "--strict"]) == 0
    assert {name: (out / name).read_bytes() for name in KALDI_FILES} == before


def test_preparing_again_leaves_no_stale_files(tmp_path):
    librispeech_tree(tmp_path)
    out = tmp_path / "dev"
    command = ["prepare", "librispeech", "--root", str(tmp_path), "--subset", "dev-clean", "--out", str(out)]
    assert main(command) == 0 and (out / "utt2dur").is_file()
    assert main(command + ["--no-durations"]) == 0
    assert not (out / "utt2dur").exists()
    assert read_data_dir(out).validate(need_gender=True) == []


def test_speaker_file_filter_reports_unknown_ids(tmp_path, caplog):
    librispeech_tree(tmp_path)
    listed = tmp_path / "speakers"
    listed.write_text("26\n77\n")
    out = tmp_path / "dev"
    with caplog.at_level(logging.WARNING):
        assert main(["prepare", "librispeech", "--root", str(tmp_path), "--subset", "dev-clean",
                     "--out", str(out), "--speakers", f"@{listed}"]) == 0
    assert "speaker in the filter but not in the corpus: 1 (e.g. 77)" in caplog.text
    assert (out / "utt2spk").read_text() == "26-495-0000 26\n"
