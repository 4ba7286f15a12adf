"""Issue #36, item 3: the snippets people paste. Every client snippet of
docs/mcp.md ("Use it with any MCP client"; fenced blocks tagged
`mcp-client=NAME`) is read out of the docs, the shipped demo config's
absolute path put in for `/ABS/PATH/intentplane.toml`, and exactly the
command and arguments it names started through the official Python SDK's
stdio client, from another folder, with only the wheel venv's `bin/` on
the PATH: the tools are listed and one guarded call is decided.

The `uvx --from intentplane` snippets run uv (PyPI `uv`, in the venv) with
its index replaced by a local one holding this wheel and its dependency
(`UV_DEFAULT_INDEX=file://...`): the snippet as written, with no package
published."""

import asyncio
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import BIN, ROOT

DOCS = ROOT / "docs" / "mcp.md"
PLACEHOLDER = "/ABS/PATH/intentplane.toml"
BLOCK = re.compile(r"```(\w+) mcp-client=([\w-]+)\n(.*?)```", re.S)
CLIENTS = {"claude-code", "claude-desktop", "cursor", "vscode"}
ATTACKER = "DE75 5121 0800 1245 1261 99"


def snippets():
    return {name: (lang, text) for lang, name, text in BLOCK.findall(DOCS.read_text())}


def test_every_client_has_both_snippets():
    assert set(snippets()) == CLIENTS | {f"{c}-uvx" for c in CLIENTS}


def command_of(name, lang, text):
    """The command and arguments the client would start."""
    if lang == "sh":
        words = shlex.split(text)
        assert words[:4] == ["claude", "mcp", "add", "intentplane"] and words[4] == "--", words
        return words[5], words[6:]
    doc = json.loads(text)
    key = "servers" if name.startswith("vscode") else "mcpServers"
    entry = doc[key]["intentplane"]
    if key == "servers":
        assert entry["type"] == "stdio", entry
    return entry["command"], entry["args"]


async def session(command, args, env, cwd):
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = {t.name for t in (await s.list_tools()).tools}
            refused = await s.call_tool(
                "send_money", {"recipient": ATTACKER, "amount": 98.70, "currency": "EUR", "subject": "new bank"}
            )
            return tools, refused


@pytest.mark.parametrize("name", sorted(CLIENTS | {f"{c}-uvx" for c in CLIENTS}))
def test_the_snippet_starts_a_proxy_that_decides(name, tmp_path, request):
    lang, text = snippets()[name]
    # the shipped demo config, where a user keeps it (its packs beside)
    shutil.copytree(ROOT / "examples" / "mcp", tmp_path / "examples" / "mcp")
    shutil.copytree(ROOT / "packs" / "bank", tmp_path / "packs" / "bank")
    cfg = tmp_path / "examples" / "mcp" / "intentplane.toml"
    assert PLACEHOLDER in text
    command, args = command_of(name, lang, text.replace(PLACEHOLDER, str(cfg)))
    env = {"PATH": str(BIN), "HOME": os.environ["HOME"]}
    if name.endswith("-uvx"):
        env.update(UV_DEFAULT_INDEX=request.getfixturevalue("index"), UV_CACHE_DIR=str(tmp_path / "uv-cache"),
                   UV_PYTHON=sys.executable, UV_NO_PROGRESS="1")
    elsewhere = tmp_path / "client"
    elsewhere.mkdir()
    tools, refused = asyncio.run(asyncio.wait_for(session(command, args, env, elsewhere), 180))
    assert {"send_money", "read_inbox"} <= tools, tools
    assert refused.is_error
    assert "DENY at stage `provenance`" in refused.content[0].text, refused
    # the store is the config's folder's, not the client's
    assert (cfg.parent / "intentplane.db").exists() and not list(elsewhere.iterdir())
