"""Issue 37 item 4: a stage setting out of its range or of the wrong type is a fault of the run, refused in one
line naming ``stage.setting`` with exit 2 before any utterance, in our words rather than Python's."""
from __future__ import annotations

import pytest

from tests.helpers.corpora import make_corpus
from voxanon.data_prep.errors import VoxanonError
from voxanon.pipeline.cli import main
from voxanon.pipeline.stage_settings import Interval, Number, SettingError, checked
from voxanon.pipeline.systems.recipes import build_system, load_system_config


@pytest.mark.parametrize("system, override, setting", [
    ("b2", "mcadams.lp_order=100000", "mcadams.lp_order"),
    ("b2", "mcadams.lp_order=161", "mcadams.lp_order"),          # above half of the 320-sample window
    ("b2", "mcadams.shift_ms=0.001", "mcadams.shift_ms"),
    ("b2", "mcadams.win_ms=0.1", "mcadams.win_ms"),               # 1 sample at 16 kHz (shift_ms follows it)
    ("b2", "mcadams.win_ms=1e9", "mcadams.win_ms"),
    ("b2", "mcadams.alpha_range=0.5", "mcadams.alpha_range"),
    ("b2r", "mcadams.alpha_range=[0.9, 0.5]", "mcadams.alpha_range"),
    ("b2r", "mcadams.alpha_range=[0.5, 2]", "mcadams.alpha_range"),
    ("b2", "mcadams.alpha=[0.5]", "mcadams.alpha"),
    ("b2", "mcadams.lp_order=2.5", "mcadams.lp_order"),
    ("b2", "mcadams.randomise=[1]", "mcadams.randomise"),
])
def test_a_stage_setting_that_cannot_work_is_one_line_before_any_utterance(system, override, setting, tmp_path,
                                                                           capsys):
    data = make_corpus(tmp_path, n_speakers=1, n_utts=1)
    code = main(["anonymise", "--system", system, "--data", str(data.path), "--out", str(tmp_path / "out"),
                 "--workers", "1", "--quiet", "--set", override])
    error = capsys.readouterr().err
    assert code == 2, error
    assert len(error.strip().splitlines()) == 1 and "Traceback" not in error and setting in error, error
    # Our wording, not Python's.
    assert "object is not iterable" not in error and "float() argument" not in error and "must" in error
    assert not (tmp_path / "out").exists()


def test_a_window_in_samples_depends_on_the_systems_sample_rate():
    assert build_system(load_system_config("b2", ["mcadams.win_ms=0.1875", "mcadams.shift_ms=0.0625", "mcadams.lp_order=1"]))
    with pytest.raises(VoxanonError, match=r"mcadams\.win_ms=0\.1875 gives a window of 1 sample"):
        build_system(load_system_config("b2", ["sample_rate=8000", "mcadams.win_ms=0.1875",
                                               "mcadams.shift_ms=0.0625", "mcadams.lp_order=1"]))


@pytest.mark.parametrize("override, message", [
    ("tdpsola.f0_max_hz=9000", r"tdpsola\.f0_max_hz=9000 is above the Nyquist frequency"),
    ("tdpsola.f0_min_hz=1", r"tdpsola\.f0_min_hz must be a number \(Hz\) >= 3"),
    ("tdpsola.f0_min_hz=[75]", r"tdpsola\.f0_min_hz must be a number"),
    ("tdpsola.mean_hz=abc", r"tdpsola\.mean_hz must be a number \(Hz\) > 0"),
])
def test_td_psola_settings_are_checked_when_the_system_is_built(override, message, tmp_path):
    recipe = tmp_path / "psola.yaml"
    recipe.write_text("sample_rate: 16000\nstages: [tdpsola]\n")
    with pytest.raises(VoxanonError, match=message):
        build_system(load_system_config(str(recipe), [override]))


def test_typed_settings_convert_what_they_accept():
    declared = {"order": Number(1, 100, integer=True), "span": Interval(Number(0.0, 1.0, low_inclusive=False))}
    assert checked("s", declared, {"order": 20, "span": [0.5, 0.9]}) == {"order": 20, "span": (0.5, 0.9)}
    assert checked("s", {"x": Number(0.0)}, {"x": "1e-3"}) == {"x": 0.001}   # YAML 1.1 reads 1e-3 as a string
    for value in (True, float("nan"), float("inf"), "abc", None, 0, 101, 2.5):
        with pytest.raises(SettingError, match=r"s\.order must be an integer in \[1, 100\], got"):
            checked("s", declared, {"order": value})
