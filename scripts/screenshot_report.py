"""Render an HTML report to a PNG with headless Chromium, e.g. to check that its tables and figures draw.

    python scripts/screenshot_report.py REPORT.html OUT.png [--window-size 1280,2400]

Needs ``/usr/bin/chromium`` (Debian: ``apt-get update && apt-get install -y chromium``).
Chromium runs with a throw-away profile and no network services, so it fetches nothing.
Exit codes: 0 written, 2 missing input or browser, or the browser failed.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from voxanon.data_prep.atomic import atomic_write_bytes
from voxanon.data_prep.errors import VoxanonError

CHROMIUM = Path("/usr/bin/chromium")
INSTALL_HINT = "install it with: apt-get update && apt-get install -y chromium"
TIMEOUT_SECONDS = 120


def chromium_command(chromium: Path, page: Path, screenshot: Path, profile: Path, window_size: str) -> list[str]:
    return [str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
            f"--user-data-dir={profile}", f"--screenshot={screenshot}", f"--window-size={window_size}",
            page.resolve().as_uri()]


def screenshot(report: Path, out: Path, *, chromium: Path = CHROMIUM, window_size: str = "1280,2400") -> Path:
    """Render ``report`` into the PNG ``out`` (written atomically); returns ``out``."""
    if not chromium.is_file():
        raise VoxanonError(f"Chromium not found at {chromium}; {INSTALL_HINT}")
    if not re.fullmatch(r"[1-9][0-9]*,[1-9][0-9]*", window_size):
        raise VoxanonError(f"window size must read WIDTH,HEIGHT in pixels, got {window_size!r}")
    if not report.is_file():
        raise VoxanonError(f"report not found: {report}")
    # Chromium picks the image format from the extension, so it writes into its temporary
    # profile folder and the PNG is then copied onto ``out`` atomically.
    with tempfile.TemporaryDirectory(prefix="voxanon-chromium-") as scratch:
        profile, shot = Path(scratch) / "profile", Path(scratch) / "screenshot.png"
        command = chromium_command(chromium, report, shot, profile, window_size)
        try:
            finished = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired as error:
            raise VoxanonError(f"Chromium did not finish rendering {report} within {TIMEOUT_SECONDS} s") from error
        if finished.returncode != 0 or not shot.is_file() or shot.stat().st_size == 0:
            raise VoxanonError(f"Chromium could not render {report} (exit {finished.returncode}):\n"
                               f"{finished.stderr.strip()[-2000:]}")
        atomic_write_bytes(out, shot.read_bytes())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Screenshot an HTML report with headless Chromium.")
    parser.add_argument("report", type=Path, help="the report.html to render")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--window-size", default="1280,2400", help="viewport WIDTH,HEIGHT in pixels (default %(default)s)")
    parser.add_argument("--chromium", type=Path, default=CHROMIUM, help="browser binary (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        screenshot(args.report, args.out, chromium=args.chromium, window_size=args.window_size)
    except VoxanonError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
