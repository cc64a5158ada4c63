#!/usr/bin/env bash
# VoiceLab: the two commands a user needs.
#   ./run.sh        set up .venv (and ffmpeg, for streamed audio) if needed, then launch the UI on http://127.0.0.1:7860
#                   (extra flags go to app.py)
#   ./run.sh test   same setup plus test tools and chromium, then the whole test suite (exit status passes through)
# And for the optional CosyVoice backend (docs/cosyvoice.md):
#   ./run.sh --backend cosyvoice --cosyvoice-dir DIR [--cosyvoice-code DIR] [flags]
#                   check the weights, set up .venv-cosy (torch 2.11, requirements-cosyvoice.txt, VoiceLab without its
#                   torch pin) and upstream's code at the pinned commit if needed, then launch the UI on CosyVoice
#   ./run.sh test --backend cosyvoice [pytest args]   the same environment, then the CosyVoice tests
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

ensure_venv() {  # ensure_venv [DIR [VENV-OPTIONS]]: .venv unless told
  local venv="${1:-$VENV}"
  [ "$#" -gt 0 ] && shift
  if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    if ! "$PYTHON" -m venv "$@" "$venv" 2>/dev/null; then
      rm -rf "$venv"
      apt_install python3-venv || { say "python3 -m venv failed; install your distribution's python3-venv"; exit 1; }
      "$PYTHON" -m venv "$@" "$venv"
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

# --- CosyVoice: its own environment (torchaudio exists only up to torch 2.11; VoiceLab pins 2.13) and upstream's code
COSY_VENV=".venv-cosy"
COSY_CODE=".cosy/upstream"
COSY_GIT="${VOICELAB_COSYVOICE_GIT:-https://github.com/FunAudioLLM/CosyVoice}"
COSY_COMMIT="${VOICELAB_COSYVOICE_COMMIT:-ace7c47f41bbd303aa6bf1ea80e6f9fbd595cd40}"  # the commit VoiceLab was verified at

flag_value() {  # flag_value NAME ARGS...: X of --NAME X or --NAME=X ("" when absent)
  local name="--$1" prev="" arg
  shift
  for arg in "$@"; do
    case "$arg" in "$name="*) echo "${arg#*=}"; return ;; esac
    [ "$prev" = "$name" ] && { echo "$arg"; return; }
    prev="$arg"
  done
}

cosy_requirements() {  # requirements.txt without what requirements-cosyvoice.txt pins (torch; its pins win over ours)
  local pinned
  pinned=$(sed -nE 's/^([A-Za-z0-9_.-]+)==.*/\1/p' requirements-cosyvoice.txt | tr 'A-Z_.' 'a-z--' | paste -sd'|' -)
  awk -v pinned="^($pinned)\$" '{ name = tolower($0); sub(/[=<>~ ].*/, "", name); gsub(/[_.]/, "-", name)
    if (name == "" || name !~ pinned) print }' requirements.txt
}

cosy_install() {
  local files=(requirements-cosyvoice.txt requirements.txt requirements-nodeps.txt)
  [ "$MODE" = test ] && files+=(requirements-dev.txt)
  local stamp="$COSY_VENV/.voicelab-installed-$MODE" digest
  digest=$(cat "${files[@]}" | sha256sum | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then return; fi
  say "installing CosyVoice's packages into $COSY_VENV (torch and torchaudio 2.11 are several GB; first run only)"
  local pip=("$COSY_VENV/bin/python" -m pip --disable-pip-version-check -q)
  "${pip[@]}" install --upgrade pip >/dev/null
  cosy_requirements >"$COSY_VENV/requirements-voicelab.txt"
  "${pip[@]}" install -r requirements-cosyvoice.txt -r "$COSY_VENV/requirements-voicelab.txt"
  "${pip[@]}" install --no-deps -r requirements-nodeps.txt
  [ "$MODE" = test ] && "${pip[@]}" install -r requirements-dev.txt
  echo "$digest" >"$stamp"
}

cosy_code() {  # upstream's code at the pinned commit in .cosy/upstream, cloned once
  if [ "$(git -C "$COSY_CODE" rev-parse HEAD 2>/dev/null)" = "$COSY_COMMIT" ]; then return; fi
  if [ -d "$COSY_CODE/.git" ]; then
    say "moving $COSY_CODE to upstream's commit ${COSY_COMMIT:0:7}"
    git -C "$COSY_CODE" checkout -q "$COSY_COMMIT" && return
  fi
  local partial="$COSY_CODE.partial"
  rm -rf "$partial" && mkdir -p "$(dirname "$COSY_CODE")"
  say "getting upstream's CosyVoice code ($COSY_GIT at ${COSY_COMMIT:0:7}) into $COSY_CODE"
  if command -v git >/dev/null 2>&1 && git clone -q "$COSY_GIT" "$partial" 2>/dev/null &&
    git -C "$partial" checkout -q "$COSY_COMMIT" 2>/dev/null; then
    rm -rf "$COSY_CODE" && mv "$partial" "$COSY_CODE" && return
  fi
  rm -rf "$partial"
  say "could not clone $COSY_GIT here (no network or no git?): on a machine that can, run 'git clone $COSY_GIT CosyVoice && git -C CosyVoice checkout $COSY_COMMIT', bring the CosyVoice folder here and add --cosyvoice-code CosyVoice"
  exit 1
}

cosyvoice_main() {  # ./run.sh [test] --backend cosyvoice ...: ends in the app or the tests, never returns
  local given code
  given=$(flag_value cosyvoice-code "$@")
  given="${given:-${VOICELAB_COSYVOICE_CODE:-}}"
  code="${given:-$COSY_CODE}"
  say "CosyVoice: environment $COSY_VENV (torch 2.11, requirements-cosyvoice.txt, VoiceLab without its torch pin); upstream's code ${given:-$COSY_CODE (FunAudioLLM/CosyVoice at ${COSY_COMMIT:0:7})}"
  case "$MODE $* " in
    "run "*" --help "* | "run "*" -h "*) ;;
    "run "*) "$PYTHON" -m voicelab.backends.cosyvoice.preflight --weights "$@" || exit 2 ;;  # before any download
  esac
  # VOICELAB_COSYVOICE_SYSTEM_PACKAGES=1: the environment sees the system's packages (an image's CUDA torch 2.11)
  ensure_venv "$COSY_VENV" ${VOICELAB_COSYVOICE_SYSTEM_PACKAGES:+--system-site-packages}
  cosy_install
  [ -n "$given" ] || cosy_code
  ensure_ffmpeg
  local extra=()
  [ -n "$given" ] || extra=(--cosyvoice-code "$COSY_CODE")
  if [ "$MODE" = run ]; then exec "$COSY_VENV/bin/python" app.py "$@" "${extra[@]}"; fi
  local args=() skip=0 arg
  for arg in "$@"; do  # pytest does not know --backend
    if [ "$skip" = 1 ]; then skip=0; continue; fi
    case "$arg" in --backend) skip=1 ;; --backend=*) ;; *) args+=("$arg") ;; esac
  done
  [ "${#args[@]}" = 0 ] && args=(tests/test_cosyvoice_*.py tests/test_ui_cosyvoice_gpu.py)
  say "running the CosyVoice tests"
  VOICELAB_COSYVOICE_CODE="$code" exec "$COSY_VENV/bin/python" -m pytest -n 0 "${args[@]}"
}

export GRADIO_ANALYTICS_ENABLED=False
export HF_HUB_OFFLINE=1
[ "$(flag_value backend "$@")" = cosyvoice ] && cosyvoice_main "$@"
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
    # Without arguments only the files that hold serial tests are collected (collecting every file costs ~15 s).
    serial_args=("$@")
    [ "$#" = 0 ] && mapfile -t serial_args < <(grep -rlE --include='test_*.py' 'mark\.serial' tests | sort)
    "$VENV/bin/python" -m pytest -m serial "${serial_args[@]}"
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
