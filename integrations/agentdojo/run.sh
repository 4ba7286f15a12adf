#!/usr/bin/env bash
# One command: venv, gateway binary, the banking and workspace replays in every
# configuration, the raw JSON, the Markdown table and the SVG plot under
# results/. `--check` then fails if any attack executed through the
# gateway or a figure fell below results/expected.json.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
"$here/setup.sh" >/dev/null
ipc="${IPC:-${CARGO_TARGET_DIR:-$root/target}/debug/ipc}"
if [ ! -x "$ipc" ]; then
  (cd "$root" && cargo build --locked --bin ipc)
fi
# `--model NAME --base-url URL`: a real model through AgentDojo's pipeline (pipeline.py)
script=replay.py
for a in "$@"; do if [ "$a" = --model ]; then script=pipeline.py; fi; done
"$here/.venv/bin/python" "$here/$script" --ipc "$ipc" "$@"
