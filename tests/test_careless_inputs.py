"""Issue 37 item 4: careless inputs of the corpus readers, the anonymise command and validate, each either done
right or one line and exit 2 naming what is wrong."""
from __future__ import annotations

from pathlib import Path

import pytest

from voxanon.pipeline.cli import main


def _link_loop(tmp_path: Path) -> Path:
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    return tmp_path / "loop_a"


@pytest.mark.parametrize("command", [
    ["anonymise", "--system", "b2", "--quiet", "--data", "{loop}"],
    ["validate", "{loop}"],
    ["prepare", "trials", "--data", "{loop}", "--enroll-per-spk", "1", "--out", "{out}"],
    ["prepare", "librispeech", "--root", "{loop}", "--subset", "dev-clean", "--out", "{out}"],
    ["prepare", "vctk", "--root", "{loop}", "--out", "{out}"],
    ["prepare", "vpc", "--root", "{loop}"],
    ["prepare", "iemocap", "--root", "{loop}", "--out", "{out}"],
])
def test_a_symlink_loop_is_one_line_naming_it(command, tmp_path, capsys):
    """A loop of links as an input folder (which Python 3.11 resolves to a bare RuntimeError) is named as a loop."""
    loop = _link_loop(tmp_path)
    argv = [part.format(loop=loop, out=tmp_path / "out") for part in command]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and str(loop) in error and "loop of symbolic links" in error, error
    assert "unexpected" not in error


def test_an_out_folder_through_a_symlink_loop_is_one_line_naming_it(tmp_path, capsys):
    from tests.helpers.corpora import make_corpus

    data = make_corpus(tmp_path, n_speakers=1, n_utts=1)
    loop = _link_loop(tmp_path)
    assert main(["anonymise", "--system", "b2", "--quiet", "--data", str(data.path), "--out", str(loop)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "--out" in error and str(loop) in error and "loop" in error, error


def _audio_folder(root: Path, names: list[str], speaker: str = "spk1") -> Path:
    """A plain folder of audio files, ``root/<speaker>/<name>.wav``, each a different synthetic vowel."""
    import soundfile

    from tests.helpers.corpora import SAMPLE_RATE, synthetic_vowel

    (root / speaker).mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(names):
        samples = synthetic_vowel(120.0 + 10 * index, [(600, 80), (1500, 120), (2500, 160)], 0.5, seed=index)
        soundfile.write(root / speaker / f"{name}.wav", samples, SAMPLE_RATE, subtype="PCM_16")
    return root


@pytest.mark.parametrize("where", ["inside", "equal"])
def test_an_out_folder_inside_an_audio_folder_input_is_refused(where, tmp_path, capsys):
    """A rerun would scan its own outputs as inputs (and fail on their ids, or never resume)."""
    folder = _audio_folder(tmp_path / "corpus", ["u1", "u2"])
    out = folder / "anonymised" if where == "inside" else folder
    code = main(["anonymise", "--system", "b2", "--quiet", "--workers", "1", "--data", str(folder), "--out", str(out)])
    error = capsys.readouterr().err.strip()
    assert code == 2 and len(error.splitlines()) == 1, error
    assert f"--out {out}" in error and f"--data {folder}" in error and "audio folder" in error
    assert not (folder / "corpus_b2").exists() and not (folder / "anonymised").exists()


def test_an_out_folder_inside_a_kaldi_set_is_fine_and_resumes(tmp_path, capsys):
    """A Kaldi set lists its files, so its outputs inside its folder are never read as inputs."""
    from tests.helpers.corpora import make_corpus

    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    argv = ["anonymise", "--system", "b2", "--quiet", "--workers", "1", "--data", str(data.path),
            "--out", str(data.path / "anonymised")]
    assert main(argv) == 0 and main(argv) == 0
    assert "(0 processed, 2 resumed)" in capsys.readouterr().err


def test_an_input_file_inside_an_output_set_is_refused(tmp_path, capsys):
    """The run would overwrite the input with its own output."""
    from tests.helpers.corpora import make_corpus
    from voxanon.data_prep.corpus import write_data_dir

    data = make_corpus(tmp_path, n_speakers=1, n_utts=2)
    inside = tmp_path / "out" / "toy_b2" / "wav" / "spk0-000.wav"
    inside.parent.mkdir(parents=True)
    Path(data.wav["spk0-000"]).rename(inside)
    data.wav["spk0-000"] = str(inside)
    write_data_dir(data, data.path)
    before = inside.read_bytes()
    code = main(["anonymise", "--system", "b2", "--quiet", "--workers", "1", "--data", str(data.path),
                 "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err.strip()
    assert code == 2 and len(error.splitlines()) == 1 and str(inside) in error and "toy_b2" in error, error
    assert inside.read_bytes() == before


def test_an_audio_folder_with_spaces_in_names_gives_a_valid_kaldi_set_and_records_the_ids(tmp_path, capsys):
    """Names with white space (Kaldi's field separator), control characters or backslashes become ids with '_' in
    their place; the anonymised set is a valid data directory and its id_map.tsv links each id to its file."""
    folder = _audio_folder(tmp_path / "corpus", ["a b", "c\td"], speaker="spk one")
    _audio_folder(folder, ["e\\f", "plain"], speaker="spk2")
    out = tmp_path / "out"
    assert main(["anonymise", "--system", "b2", "--quiet", "--workers", "1", "--data", str(folder),
                 "--out", str(out)]) == 0
    result = out / "corpus_b2"
    assert sorted(p.name for p in (result / "wav").iterdir()) == ["a_b.wav", "c_d.wav", "e_f.wav", "plain.wav"]
    assert (result / "id_map.tsv").read_text() == (
        "kind\tid\toriginal\n"
        "speaker\tspk_one\tspk one\n"
        "utterance\ta_b\tspk one/a b.wav\n"
        "utterance\tc_d\tspk one/c\\td.wav\n"
        "utterance\te_f\tspk2/e\\\\f.wav\n")
    capsys.readouterr()
    assert main(["validate", str(result)]) == 0, capsys.readouterr()
    assert (result / "utt2spk").read_text() == "a_b spk_one\nc_d spk_one\ne_f spk2\nplain spk2\n"


@pytest.mark.parametrize("names, speakers", [(["a b", "a_b"], ["spk1"]), (["x"], ["s 1", "s_1"])])
def test_names_that_would_share_an_id_are_refused_naming_both(names, speakers, tmp_path, capsys):
    folder = tmp_path / "corpus"
    for index, speaker in enumerate(speakers):
        _audio_folder(folder, [f"{name}{index}" if len(speakers) > 1 else name for name in names], speaker=speaker)
    assert main(["validate", str(folder)]) == 2
    error = capsys.readouterr().err
    first, second = (names if len(speakers) == 1 else speakers)
    assert repr(first) in error or first in error
    assert second in error and "rename one" in error


@pytest.mark.parametrize("name, expected", [("a b", "a_b"), ("a\u00a0b", "a_b"), ("a\u3000b\u2028", "a_b_"),
                                            ("tab\there", "tab_here"), ("back\\slash", "back_slash"),
                                            ("bell\x07", "bell_"), ("naïve-ok.1", "naïve-ok.1")])
def test_audio_folder_ids_replace_what_a_kaldi_id_cannot_hold(name, expected):
    from voxanon.data_prep.corpus import audio_folder_id
    from voxanon.data_prep.paths import id_problem

    assert audio_folder_id(name) == expected and id_problem(expected) is None
