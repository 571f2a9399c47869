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
