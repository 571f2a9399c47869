"""scripts/check_install.py: the install's own smoke check of the compiled libraries."""
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_install.py"


def _run(env_path=None):
    env = {"PATH": "/usr/bin:/bin"}
    if env_path is not None:
        env["PYTHONPATH"] = str(env_path)
    return subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.slow  # `make install` runs the same check before the tests
def test_the_installed_environment_passes():
    result = _run()
    assert result.returncode == 0, result.stderr
    assert "torchaudio's extension" in result.stdout


def test_a_torchaudio_built_for_another_torch_fails_in_one_line_naming_the_pair(tmp_path):
    # The state a resolver produced on 2026-11-28: torchaudio 2.11.1 beside torch 2.11.0, whose
    # extension fails to load with an undefined symbol.
    package = tmp_path / "torchaudio"
    package.mkdir()
    (package / "__init__.py").write_text(
        'raise OSError("/venv/lib/python3.11/site-packages/torchaudio/lib/libtorchaudio.so: '
        'undefined symbol: torch_exception_get_what_without_backtrace")\n')
    info = tmp_path / "torchaudio-2.11.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchaudio\nVersion: 2.11.1\n")

    result = _run(tmp_path)

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"torchaudio 2.11.1 with torch {metadata.version('torch')}" in lines[0]
    assert "libtorchaudio.so: undefined symbol: torch_exception_get_what_without_backtrace" in lines[0]
    assert "/venv/" not in lines[0]


def test_the_environment_has_the_bytecode_of_what_the_neural_command_imports():
    # `make install` compiles it (uv installs none): where PYTHONDONTWRITEBYTECODE is set, every voxanon process
    # otherwise compiled torch's, SciPy's and our own sources again (7 CPU s of a 14 CPU s run; docs/benchmarks.md).
    import importlib.util

    import scipy.signal
    import torch

    from voxanon.pipeline.systems.ssl_sas import chain

    missing = [module.__name__ for module in (torch, scipy.signal, chain)
               if not Path(importlib.util.cache_from_source(module.__file__)).exists()]
    assert not missing, f"no bytecode for {missing}: run make install"
