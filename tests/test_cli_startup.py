"""A quick command line: ``--help`` of every command and ``voxanon systems`` import no heavy module.

Every command module is imported to build the parser, so one heavy import at the top of any
of them (or of a module it imports) slows every command, ``--help`` included. The checks run in
a fresh interpreter, which records who first imports each heavy module. ``benchmarks/cli.py``
measures the start-up; its CPU time (user + system, which other processes on the machine
change far less than the wall time) is held under the 0.5 s target here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from voxanon.pipeline.systems.stage import Stage
from voxanon.pipeline.systems.recipes import STAGES

# NumPy and the libraries built on it may load for `voxanon systems` (its stages hold arrays), not for a help.
NUMERIC = ("numpy", "soundfile", "kaldiio", "tqdm")
HEAVY = (*NUMERIC, "torch", "torchaudio", "speechbrain", "transformers", "sklearn", "scipy", "librosa", "matplotlib",
         "ray", "pandas", "faster_whisper", "ctranslate2", "numba", "pyarrow", "huggingface_hub", "tokenizers",
         "parselmouth", "pyworld", "amfm_decompy", "ot")

# Run in a fresh interpreter: records the first importer of each heavy module, then prints the
# --help text of every command and sub-command and the output of `voxanon systems`, as JSON.
PROBE = textwrap.dedent("""
    import contextlib, io, json, sys, traceback

    HEAVY = set(sys.argv[1].split(","))
    first_importer = {}

    class Recorder:
        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top in HEAVY and top not in first_importer:
                frames = [f for f in traceback.extract_stack()[:-1]
                          if not f.filename.startswith("<") and "site-packages" not in f.filename]
                first_importer[top] = " <- ".join(f"{f.filename.rsplit('/', 2)[-2]}/{f.filename.rsplit('/', 1)[-1]}"
                                                  f":{f.lineno}" for f in reversed(frames[-4:]))
            return None

    sys.meta_path.insert(0, Recorder())
    from voxanon.pipeline import cli

    def output(argv):
        stream = io.StringIO()
        with contextlib.redirect_stdout(stream):
            try:
                code = cli.main(argv)
            except SystemExit as stop:
                code = stop.code
        return code, stream.getvalue()

    def command_paths(parser, prefix=()):
        yield prefix
        for action in parser._actions:
            seen = set()
            for name, sub in getattr(action, "_name_parser_map", {}).items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield from command_paths(sub, prefix + (name,))

    helps = {" ".join(path): output([*path, "--help"]) for path in command_paths(cli.build_parser())}
    heavy_for_helps = dict(first_importer)
    systems = output(["systems"])
    print(json.dumps({"helps": helps, "systems": systems, "heavy_for_helps": heavy_for_helps,
                      "heavy": first_importer}))
""")


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("cli-startup")
    env = {**os.environ, "VOXANON_HOME": str(folder / "home"), "MPLCONFIGDIR": str(folder / "mpl")}
    completed = subprocess.run([sys.executable, "-c", PROBE, ",".join(HEAVY)], capture_output=True, text=True,
                               env=env, timeout=300)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])


def test_every_help_and_systems_import_no_heavy_module(probed):
    for what, imported in (("every --help", probed["heavy_for_helps"]),
                           ("voxanon systems", {module: where for module, where in probed["heavy"].items()
                                                if module not in NUMERIC})):
        assert imported == {}, f"heavy modules imported by {what} (module: first importer):\n" + "\n".join(
            f"  {module}: {where}" for module, where in sorted(imported.items()))
    # Every command is covered, nested actions included, and each help printed.
    assert {"", "metrics", "systems", "anonymise", "zllr toy", "attack sex", "models import"} <= set(probed["helps"])
    for path, (code, text) in probed["helps"].items():
        assert code == 0 and text.startswith("usage: voxanon"), (path, code, text[:200])


def test_no_help_shows_a_doubled_percent(probed):
    # argparse formats the %-placeholders of help strings, but of a description only when it names %(prog)s.
    for path, (_, text) in probed["helps"].items():
        assert "%%" not in text, f"voxanon {path} --help shows a literal %%:\n{text}"
    assert "speechbrain, sweep; %)" in " ".join(probed["helps"]["metrics"][1].split())


def test_systems_lists_each_system_stages_and_needs(probed):
    code, listing = probed["systems"]
    assert code == 0
    resynth = listing.split("\nresynth\n", 1)[1]
    assert "stages: ssl_sas_input -> f0 -> content -> speaker -> vocoder" in resynth
    assert "needs: checkpoint:ssl-sas" in resynth and "MISSING: checkpoint 'ssl-sas'" in resynth


def test_stage_registry_names_each_class_by_its_name():
    for name in list(STAGES):
        stage_class = STAGES[name]
        assert issubclass(stage_class, Stage) and stage_class.name == name


def test_help_takes_under_half_a_second_of_cpu_and_the_benchmark_prints_each_command():
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "cli.py"
    completed = subprocess.run([sys.executable, str(script), "--runs", "3"], capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr
    rows = {line.split("  ")[0]: line.split() for line in completed.stdout.splitlines()
            if line.startswith("voxanon ")}
    assert set(rows) == {"voxanon --help", "voxanon systems", "voxanon metrics --help"}
    for name, fields in rows.items():
        median, cpu, ratio = float(fields[-5]), float(fields[-3]), float(fields[-1])
        assert 0 < median < 60 and abs(ratio - median / 0.5) < 0.01 + 1e-9, (name, fields)
        if name.endswith("--help"):  # `systems` imports the stages, with NumPy
            assert cpu < 0.5, f"{name}: {cpu:.3f} CPU-seconds to start (target 0.5 s)\n{completed.stdout}"
    assert "target 0.5 s: worst median / target = " in completed.stdout


def test_vocoder_layout_override_is_checked_when_the_set_is_prepared(tmp_path):
    from voxanon.data_prep.errors import VoxanonError
    from voxanon.pipeline.systems.recipes import build_system, load_system_config

    system = build_system(load_system_config("resynth", ["vocoder.layout.not_a_field=true"]))
    vocoder = system.stages[-1]
    with pytest.raises(VoxanonError, match="vocoder.layout has no field.*not_a_field"):
        vocoder.prepare_set(None, tmp_path)
    assert build_system(load_system_config("zllr")).stages[-1].prepare_set(None, tmp_path) == {}
