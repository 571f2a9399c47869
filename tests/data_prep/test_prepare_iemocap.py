"""`voxanon prepare iemocap` on a miniature IEMOCAP_full_release tree."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from voxanon.data_prep.corpus import read_data_dir, read_mapping
from voxanon.data_prep.errors import VoxanonError
from voxanon.pipeline.cli import main

# utterance -> (consensus label, seconds); the dialog is the id up to the last "_".
UTTERANCES = {
    "Ses01F_impro01_F000": ("neu", 0.3), "Ses01F_impro01_M000": ("fru", 0.2),
    "Ses01F_impro01_M001": ("exc", 0.25), "Ses01F_script01_1_F000": ("ang", 0.2),
    "Ses01F_script01_1_M002": ("xxx", 0.2),
    "Ses02M_impro03_M000": ("sad", 0.3), "Ses02M_impro03_F001": ("hap", 0.2),
    "Ses03F_impro02_F000": ("ang", 0.2), "Ses03F_impro02_M003": ("neu", 0.2),
    "Ses04M_script02_2_F000": ("sad", 0.2), "Ses05F_impro05_M010": ("hap", 0.2),
}


def emo_line(utt: str, emotion: str) -> str:
    return f"[6.2901 - 8.2357]\t{utt}\t{emotion}\t[2.5000, 2.5000, 2.5000]\n"


def iemocap_tree(root: Path, missing_audio: str | None = None) -> Path:
    release = root / "IEMOCAP_full_release"
    dialogs: dict[str, list[str]] = {}
    for utt in UTTERANCES:
        dialogs.setdefault(utt.rsplit("_", 1)[0], []).append(utt)
    for dialog, utts in dialogs.items():
        session = release / f"Session{int(dialog[3:5])}"
        evaluation = session / "dialog" / "EmoEvaluation"
        evaluation.mkdir(parents=True, exist_ok=True)
        # As released: a header line, an annotator block per utterance, sub-folders of single votes.
        text = "% [START_TIME - END_TIME] TURN_NAME EMOTION [V, A, D]\n\n"
        for utt in utts:
            text += (emo_line(utt, UTTERANCES[utt][0])
                     + "C-E2:\tNeutral state;\t()\nA-E3:\tval 3; act 2; dom  2;\t()\n\n")
        (evaluation / f"{dialog}.txt").write_text(text)
        (evaluation / "Categorical").mkdir(exist_ok=True)
        (evaluation / "Categorical" / f"{dialog}_e1_cat.txt").write_text(
            "".join(emo_line(u, "sad") for u in utts))
        transcriptions = session / "dialog" / "transcriptions"
        transcriptions.mkdir(parents=True, exist_ok=True)
        (transcriptions / f"{dialog}.txt").write_text(
            "".join(f"{u} [006.2901-008.2357]: Words of {u[-4:]}.\n" for u in utts) + "M: [BREATHING]\n")
        wav_dir = session / "sentences" / "wav" / dialog
        wav_dir.mkdir(parents=True, exist_ok=True)
        for utt in utts:
            if utt == missing_audio:
                continue
            samples = 0.2 * np.sin(2 * np.pi * 200 * np.arange(int(UTTERANCES[utt][1] * 16000)) / 16000)
            soundfile.write(wav_dir / f"{utt}.wav", samples, 16000)
        (wav_dir / f"._{utts[0]}.wav").write_bytes(b"\x00\x05\x16\x07 resource fork")
    return release


def test_prepare_iemocap_writes_utt2emo_and_spk2fold(tmp_path, capsys):
    release = iemocap_tree(tmp_path)
    out = tmp_path / "data" / "iemocap"
    assert main(["prepare", "iemocap", "--root", str(release), "--out", str(out)]) == 0
    data = read_data_dir(out)
    kept = {u: e for u, (e, _) in UTTERANCES.items() if e in ("neu", "ang", "hap", "sad", "exc")}
    assert sorted(data.wav) == sorted(kept)
    utt2emo = read_mapping(out / "utt2emo")
    assert utt2emo == {u: "hap" if e == "exc" else e for u, e in kept.items()}
    assert utt2emo["Ses01F_impro01_M001"] == "hap"
    # The speaker is the session plus the letter of the utterance's own speaker.
    assert data.utt2spk["Ses02M_impro03_F001"] == "Ses02F"
    assert data.utt2spk["Ses01F_script01_1_F000"] == "Ses01F"
    assert read_mapping(out / "spk2fold") == {"Ses01F": "1", "Ses01M": "1", "Ses02F": "2", "Ses02M": "2",
                                              "Ses03F": "3", "Ses03M": "3", "Ses04F": "4", "Ses05M": "5"}
    assert data.spk2gender == {s: s[-1].lower() for s in data.speakers}
    assert data.text["Ses01F_impro01_F000"] == "WORDS OF F000"  # normalised as every corpus's text
    assert data.utt2dur["Ses01F_impro01_F000"] == pytest.approx(0.3)
    printed = capsys.readouterr().out
    assert "ang 2, hap 3, neu 2, sad 2" in printed
    assert "left out (other consensus labels): 2 utterances (fru 1, xxx 1)" in printed


def test_prepare_iemocap_reports_missing_audio_and_strict_fails(tmp_path, caplog):
    release = iemocap_tree(tmp_path, missing_audio="Ses03F_impro02_F000")
    out = tmp_path / "iemocap"
    assert main(["prepare", "iemocap", "--root", str(release), "--out", str(out)]) == 0
    assert "Ses03F_impro02_F000" not in read_mapping(out / "utt2emo")
    assert "labelled utterance without audio (left out): 1 (e.g. Ses03F_impro02_F000)" in caplog.text
    assert main(["prepare", "iemocap", "--root", str(release), "--out", str(tmp_path / "strict"),
                 "--strict"]) == 2
    assert not (tmp_path / "strict" / "utt2emo").exists()


def test_prepare_iemocap_wrong_root(tmp_path):
    from voxanon.data_prep.prepare.iemocap import scan_iemocap
    from voxanon.data_prep.prepare.issues import PreparationIssues

    with pytest.raises(VoxanonError, match="no Session1..Session5 folders"):
        scan_iemocap(tmp_path, PreparationIssues("iemocap"))
