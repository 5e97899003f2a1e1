#!/usr/bin/env bash
# Install Debian's headless-capable Chromium for the report's browser tests, if it is missing.
# Idempotent and quiet; exits 0 with a message when it cannot install (the browser tests then skip).
set -u
for candidate in chromium chromium-browser; do
  if command -v "$candidate" >/dev/null 2>&1; then
    exit 0
  fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_chromium: apt-get not found; browser tests will be skipped" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
    SUDO="sudo -n"
  else
    echo "install_chromium: not root and no passwordless sudo; browser tests will be skipped" >&2
    exit 0
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; then
  $SUDO apt-get update -qq >/dev/null 2>&1 || true
  if ! $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; then
    echo "install_chromium: apt-get could not install chromium; browser tests will be skipped" >&2
    exit 0
  fi
fi
if command -v chromium >/dev/null 2>&1; then
  echo "install_chromium: installed $(chromium --version 2>/dev/null | head -1)"
fi
exit 0
