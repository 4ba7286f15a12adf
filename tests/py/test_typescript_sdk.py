"""Issue #40, item 1: a refusal every MCP SDK can read. The official
TypeScript SDK (npm `@modelcontextprotocol/sdk`, pinned in
scripts/reference-servers; what the Inspector and TypeScript hosts use)
checks a result's `structuredContent` against the tool's `outputSchema`
and throws when it does not match; a DENY's decision object never does.
Over every shipped example (the demo, filesystem, memory, git) a
refused call must reach the TypeScript caller as a readable tool result
(`isError`, the reason in the text), the decision in `_meta`, and
`structuredContent` only where the tool declares no schema; a read passes.
"""

import json
import os
import pathlib
import subprocess

import pytest
from tools import require

import test_reference_memory as memory
import test_reference_servers as servers
from test_mcp_proxy import ATTACKER, IPC, config as demo_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
SDK = servers.SERVERS / "node_modules" / "@modelcontextprotocol" / "sdk"
CLIENT = ROOT / "tests" / "py" / "ts_client.mjs"

require("TypeScript MCP SDK", SDK.exists(), f"{SDK} is missing: run scripts/reference-servers")


def ts(cfg, calls, cwd):
    out = subprocess.run(
        ["node", str(CLIENT), str(IPC), json.dumps(["mcp", "--config", str(cfg)]), json.dumps(calls)],
        env=dict(os.environ, TS_SDK=str(SDK), TS_CWD=str(cwd)),
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def examples(tmp):
    """Each shipped example set up as its own tests do: (name, config, a
    refused call, a read)."""
    (tmp / "demo").mkdir()
    (tmp / "fs").mkdir()
    (tmp / "memory").mkdir()
    (tmp / "git").mkdir()
    yield "demo", demo_config(tmp / "demo"), ["send_money", {"recipient": ATTACKER, "amount": 98.7, "currency": "EUR", "subject": "x"}], ["read_inbox", {}]
    fs = servers.config(tmp / "fs")
    yield "filesystem", fs, ["write_file", {"path": str(tmp / "fs" / "outside" / "x.txt"), "content": "x"}], ["list_allowed_directories", {}]
    yield "memory", memory.config(tmp / "memory"), ["create_entities", {"entities": [{"name": "Mallory", "entityType": "person", "observations": []}]}], ["read_graph", {}]
    g = servers.git_config(tmp / "git")
    yield "git", g, ["git_add", {"repo_path": str(tmp / "git" / "other"), "files": ["x.txt"]}], ["git_status", {"repo_path": str(tmp / "git" / "repo")}]


def test_every_shipped_examples_refusal_is_readable_from_typescript(tmp_path):
    schemas = 0
    for name, cfg, refused, read in examples(tmp_path):
        doc = ts(cfg, [refused, read], cfg.parent)
        declared = {t["name"]: t["outputSchema"] for t in doc["tools"]}
        deny, ok = doc["calls"]
        assert deny["threw"] is None, f"{name}: {deny['threw']}"
        assert deny["isError"] and "DENY at stage `provenance`" in deny["text"], f"{name}: {deny}"
        decision = deny["meta"]["intentplane/decision"]
        assert decision["decision"] == "DENY" and decision["stage"] == "provenance", f"{name}: {decision}"
        if declared[refused[0]]:
            schemas += 1
            assert deny["structured"] is None, f"{name}: {deny}"
        else:
            assert deny["structured"] == decision, f"{name}: {deny}"
        assert ok["threw"] is None and not ok["isError"], f"{name}: {ok}"
    # the memory example's tools declare an outputSchema: the case that threw
    assert schemas >= 1
