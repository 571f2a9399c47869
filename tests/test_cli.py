"""The command line: help everywhere, systems, overrides and validate."""
from __future__ import annotations

import pytest

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.errors import VoxanonError
from voxanon.pipeline.cli import build_parser, main
from voxanon.pipeline.systems.recipes import build_system, load_system_config


def _subcommands():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(set(action.choices))


def test_top_level_help(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    for command in ("anonymise", "systems", "validate", "demo"):
        assert command in out


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as caught:
        main([command, "--help"])
    assert caught.value.code == 0
    assert "usage: voxanon" in capsys.readouterr().out


def test_the_exit_skips_collecting_what_is_left(monkeypatch, capsys):
    # gc.freeze at exit spares the interpreter's final collections; registered once however often main runs.
    import atexit
    import gc

    registered = []
    monkeypatch.setattr(atexit, "register", lambda function, *args: registered.append(function))
    monkeypatch.setattr(atexit, "unregister", lambda function: registered.remove(function)
                        if function in registered else None)
    assert main(["systems"]) == 0
    assert main(["systems"]) == 0
    assert registered == [gc.freeze]


def test_systems_lists_what_each_needs(capsys):
    assert main(["systems"]) == 0
    out = capsys.readouterr().out
    assert "b2\n" in out and "b2r\n" in out and "needs: nothing beyond the install" in out


def test_overrides_are_typed_and_checked():
    config = load_system_config("b2r", ["mcadams.alpha_range=[0.5, 0.9]", "seed=7", "mcadams.randomise=speaker"])
    assert config["mcadams"]["alpha_range"] == [0.5, 0.9] and config["seed"] == 7
    stage = build_system(config).stages[0]
    assert stage.alpha_range == (0.5, 0.9) and stage.randomise == "speaker"
    with pytest.raises(VoxanonError, match="has no setting"):
        build_system(load_system_config("b2", ["mcadams.alpah=0.7"]))
    with pytest.raises(VoxanonError, match="unknown setting"):
        load_system_config("b2", ["sampel_rate=8000"])
    with pytest.raises(VoxanonError, match="expected key=value"):
        load_system_config("b2", ["alpha"])
    with pytest.raises(VoxanonError, match="randomise must be"):
        build_system(load_system_config("b2", ["mcadams.randomise=sometimes"]))
    with pytest.raises(VoxanonError, match="unknown system 'b9'"):
        load_system_config("b9")


def test_recipe_file_path_is_accepted(tmp_path):
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("stages: [mcadams]\nmcadams: {alpha: 0.75}\n")
    system = build_system(load_system_config(str(recipe)))
    assert system.name == "mine" and system.stages[0].alpha == 0.75


def test_validate_reports_problems_with_exit_code(tmp_path, capsys):
    data = make_corpus(tmp_path, n_speakers=2, n_utts=2)
    assert main(["validate", str(data.path), "--check-audio"]) == 0
    assert "OK" in capsys.readouterr().out
    (data.path / "spk2gender").write_text("spk0 f\n")
    open(data.wav["spk1-001"], "wb").close()
    assert main(["validate", str(data.path), "--check-audio", "--need-gender"]) == 1
    out = capsys.readouterr().out
    assert "'spk1' has no sex label" in out and "spk1-001" in out and "2 problem(s)" in out


def test_user_errors_print_cleanly(tmp_path, capsys):
    assert main(["anonymise", "--system", "b2", "--data", str(tmp_path / "nowhere")]) == 2
    assert "voxanon anonymise: error:" in capsys.readouterr().err


def test_demo_asr_decoding_reaches_the_protocol(monkeypatch, tmp_path):
    from voxanon.pipeline.evaluation import benchmark

    seen = []

    def compare(sets, systems, protocol, *args, **kwargs):
        seen.append(protocol["asr_decoding"])
        raise SystemExit(0)

    monkeypatch.setattr(benchmark, "compare", compare)  # the demo imports it when it runs
    for extra in ([], ["--asr-decoding", "packed"], ["--asr-decoding", "short-window"]):
        with pytest.raises(SystemExit):
            main(["demo", "--out", str(tmp_path / "demo"), "--quiet", *extra])
    assert seen == ["per-utterance", "packed", "short-window"]
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["demo", "--asr-decoding", "joined"])
    assert exit_info.value.code == 2


def test_demo_asr_decoding_choices_are_the_recognisers():
    """demo.py writes the decodings out (parsing the command line imports no NumPy): they must stay the
    recogniser's own."""
    import argparse

    from voxanon.models.recognisers.asr import WHISPER_DECODINGS

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    option = next(a for a in commands.choices["demo"]._actions if "--asr-decoding" in a.option_strings)
    assert tuple(option.choices) == WHISPER_DECODINGS
