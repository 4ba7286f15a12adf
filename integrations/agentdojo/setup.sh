#!/usr/bin/env bash
# Creates integrations/agentdojo/.venv with agentdojo==0.1.35 (≈1 min, ≈300 MB).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import agentdojo" 2>/dev/null; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check "agentdojo==0.1.35"
fi
.venv/bin/python -c "import importlib.metadata as m; print('agentdojo', m.version('agentdojo'))"
