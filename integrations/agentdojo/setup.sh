#!/usr/bin/env bash
# Creates integrations/agentdojo/.venv with agentdojo==0.1.35 (≈1 min, ≈300 MB).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c "import ensurepip, venv" 2>/dev/null; then
  echo "== installing python3-venv (apt-get) for the AgentDojo replay" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import agentdojo" 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check "agentdojo==0.1.35"
fi
.venv/bin/python -c "import importlib.metadata as m; print('agentdojo', m.version('agentdojo'))"
