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
