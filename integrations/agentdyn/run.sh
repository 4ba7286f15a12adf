#!/usr/bin/env bash
# One command: every figure of results/ from AgentDyn's logged runs.
# The data is read at run time from `--data DIR`, $AGENTDYN_DATA, or
# ../shared/agentdyn next to the repository; without it, a skip line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
ipc="${IPC:-${CARGO_TARGET_DIR:-$root/target}/debug/ipc}"
if [ ! -x "$ipc" ]; then
  (cd "$root" && cargo build --locked --bin ipc)
fi
exec python3 "$here/replay.py" --ipc "$ipc" "$@"
