#!/usr/bin/env bash
# VoiceLab: the two commands a user needs.
#   ./run.sh        set up .venv (and ffmpeg, for streamed audio) if needed, then launch the UI on http://127.0.0.1:7860
#                   (extra flags go to app.py)
#   ./run.sh test   same setup plus test tools and chromium, then the whole test suite (exit status passes through)
set -euo pipefail
cd "$(dirname "$0")"

PYTHON="${PYTHON:-python3}"
VENV=".venv"
MODE=run
[ "${1:-}" = test ] && MODE=test && shift

say() { printf '\033[1m[voicelab]\033[0m %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi
}

apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  say "installing system packages: $*"
  DEBIAN_FRONTEND=noninteractive as_root apt-get update -qq >/dev/null &&
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
      rm -rf "$VENV"
      apt_install python3-venv || { say "python3 -m venv failed; install your distribution's python3-venv"; exit 1; }
      "$PYTHON" -m venv "$VENV"
    fi
  fi
}

install_requirements() {
  local files=(requirements.txt requirements-nodeps.txt)
  [ "$MODE" = test ] && files+=(requirements-dev.txt)
  local stamp="$VENV/.voicelab-installed-$MODE"
  local digest
  digest=$(cat "${files[@]}" | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then return; fi
  say "installing Python packages (first run takes a few minutes)"
  local pip=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
  "${pip[@]}" install --upgrade pip >/dev/null
  "${pip[@]}" install -r requirements.txt
  "${pip[@]}" install --no-deps -r requirements-nodeps.txt
  [ "$MODE" = test ] && "${pip[@]}" install -r requirements-dev.txt
  echo "$digest" >"$stamp"
}

ensure_ffmpeg() {
  # Gradio encodes the live (streamed) audio player's chunks with ffmpeg; without it the tabs show whole audio only.
  command -v ffmpeg >/dev/null 2>&1 && return
  apt_install ffmpeg || say "ffmpeg could not be installed; audio will play when complete instead of as it is made"
}

ensure_chromium() {
  [ -x /usr/bin/chromium ] && return
  apt_install chromium || say "chromium could not be installed; browser tests will be skipped"
}

export GRADIO_ANALYTICS_ENABLED=False
export HF_HUB_OFFLINE=1
ensure_venv
install_requirements
ensure_ffmpeg

case "$MODE" in
  test)
    ensure_chromium
    say "running the test suite"
    set +e
    # Two processes by file (requirements-dev.txt says why), then the tests marked `serial` (load and memory
    # judged against a bound) alone; `./run.sh test -n 0 FILE` runs one file in-process.
    "$VENV/bin/python" -m pytest -n "${VOICELAB_TEST_WORKERS:-2}" --dist loadfile -m "not serial" "$@"
    parallel=$?
    "$VENV/bin/python" -m pytest -m serial "$@"
    serial=$?
    set -e
    # pytest exits 5 when it collected nothing: a failure only if neither phase collected anything.
    if [ "$parallel" = 5 ] && [ "$serial" = 5 ]; then say "no tests were collected"; exit 5; fi
    [ "$parallel" = 5 ] && parallel=0
    [ "$serial" = 5 ] && serial=0
    [ "$parallel" != 0 ] && exit "$parallel"
    exit "$serial"
    ;;
  run)
    exec "$VENV/bin/python" app.py "$@"
    ;;
esac
