"""No unused import or variable, no undefined name: Pyflakes' checks (as ruff's F rules, configured in
pyproject.toml) over the package, tests, benchmarks and scripts."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyflakes_finds_nothing():
    completed = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                                str(ROOT)], cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr
