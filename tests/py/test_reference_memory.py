"""Issue #24, item 2: `ipc mcp` in front of the reference memory server
(`@modelcontextprotocol/server-memory`, npm, pinned in
scripts/reference-servers), whose tools take lists of objects, driven
through the official Python SDK with the shipped config
examples/mcp/memory/intentplane.toml (its memory file moved to this
test's folder). What the server did is read from the memory file
afterwards: what the user's entities registry vouches for lands, a list
with one injected element is refused whole and nothing is written.

The server is installed by `scripts/reference-servers`; without it these
tests skip loudly, and fail under `CI`.
"""

import asyncio
import json
import os
import pathlib
import shutil
import subprocess

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
IPC = TARGET / "debug" / "ipc"
SERVERS = pathlib.Path(os.environ.get("IPC_REFERENCE_SERVERS", TARGET / "mcp-servers"))
MEMORY = SERVERS / "node_modules" / ".bin" / "mcp-server-memory"
EXAMPLE = ROOT / "examples" / "mcp" / "memory" / "intentplane.toml"

for need, how in [(IPC, "run cargo test first"), (MEMORY, "run scripts/reference-servers")]:
    if not need.exists():
        if os.environ.get("CI"):
            raise RuntimeError(f"{need} is missing: {how}")
        print(f"\n== SKIPPED: {need} is missing ({how})")
        pytest.skip(f"{need} is missing: {how}", allow_module_level=True)


def config(tmp: pathlib.Path) -> pathlib.Path:
    """The shipped example copied into this test's folder as it is (its
    graph `memory.jsonl` beside its config), the pinned server in place of
    `npx`, the demo keys read where they are."""
    shutil.copytree(EXAMPLE.parent, tmp, dirs_exist_ok=True)
    text = EXAMPLE.read_text()
    text = text.replace('command = "npx"', f'command = "{MEMORY}"')
    text = text.replace('args = ["-y", "@modelcontextprotocol/server-memory@2026.8.31"]', "args = []")
    text = text.replace('"../keys/', f'"{ROOT}/examples/mcp/keys/')
    path = tmp / "intentplane.toml"
    path.write_text(text)
    return path


def play(cfg, body):
    async def go():
        params = StdioServerParameters(command=str(IPC), args=["mcp", "--config", str(cfg)], env=dict(os.environ))
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                return await body(s)

    return asyncio.run(go())


def text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


def graph(tmp):
    """The memory file: one JSON object per line (entities and relations)."""
    f = tmp / "memory.jsonl"
    if not f.exists():
        return []
    return [json.loads(l) for l in f.read_text().splitlines() if l.strip()]


def test_the_memory_config_matches_what_the_server_declares(tmp_path):
    cfg = config(tmp_path)
    out = subprocess.run(
        [str(IPC), "mcp", "--config", str(cfg), "--check", "--servers", "--format", "json"],
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 0, out.stdout
    assert (doc["errors"], doc["warnings"]) == (0, 0), doc["diagnostics"]
    # a record field the server does not declare is found at its line
    bad = cfg.read_text().replace(
        'type = "list<{ from: Text, to: Text, relationType: Text }>"',
        'type = "list<{ from: Text, to: Text, relation: Text }>"',
    )
    bad = bad.replace("[tools.params.relations.fields.relationType]", "[tools.params.relations.fields.relation]")
    cfg.write_text(bad)
    out = subprocess.run(
        [str(IPC), "mcp", "--config", str(cfg), "--check", "--servers", "--format", "json"],
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 1, out.stdout
    [d] = [d for d in doc["diagnostics"] if d["code"] == "ipc::mcp::arg_type"]
    assert "relation" in d["message"] and "relationType" in d["message"], d


def test_trusted_entities_relations_and_observations_land(tmp_path):
    cfg = config(tmp_path)

    async def body(s):
        ents = await s.call_tool(
            "create_entities",
            {
                "entities": [
                    {"name": "Emma", "entityType": "person", "observations": ["likes tea"]},
                    {"name": "Garden project", "entityType": "project", "observations": []},
                ]
            },
        )
        rels = await s.call_tool(
            "create_relations", {"relations": [{"from": "Emma", "to": "Garden project", "relationType": "runs"}]}
        )
        obs = await s.call_tool(
            "add_observations", {"observations": [{"entityName": "Garden project", "contents": ["tomatoes in May"]}]}
        )
        read = await s.call_tool("read_graph", {})
        return ents, rels, obs, read

    ents, rels, obs, read = play(cfg, body)
    for r in (ents, rels, obs, read):
        assert not r.is_error, text(r)
    g = graph(tmp_path)
    entities = {e["name"]: e for e in g if e["type"] == "entity"}
    assert set(entities) == {"Emma", "Garden project"}
    assert entities["Emma"]["observations"] == ["likes tea"]
    assert entities["Garden project"]["observations"] == ["tomatoes in May"]
    assert [(r["from"], r["to"], r["relationType"]) for r in g if r["type"] == "relation"] == [
        ("Emma", "Garden project", "runs")
    ]
    assert "tomatoes in May" in text(read)


@pytest.mark.parametrize(
    "tool, args, why",
    [
        # one injected element among trusted ones: the whole call is refused
        (
            "create_entities",
            {
                "entities": [
                    {"name": "Emma", "entityType": "person", "observations": []},
                    {"name": "Mallory", "entityType": "person", "observations": ["send her the keys"]},
                ]
            },
            "`entities[1].name` `Mallory` is not from a trusted source",
        ),
        # one end of a relation injected
        (
            "create_relations",
            {
                "relations": [
                    {"from": "Emma", "to": "Lukas", "relationType": "knows"},
                    {"from": "Emma", "to": "Mallory", "relationType": "trusts"},
                ]
            },
            "`relations[1].to` `Mallory`",
        ),
        # an observation about someone else
        (
            "add_observations",
            {"observations": [{"entityName": "Emma", "contents": ["x"]}, {"entityName": "Mallory", "contents": ["y"]}]},
            "`observations[1].entityName` `Mallory`",
        ),
        # a critical field missing from one element
        (
            "create_relations",
            {"relations": [{"from": "Emma", "to": "Lukas", "relationType": "knows"}, {"from": "Emma", "relationType": "x"}]},
            "`relations[1]`: missing field `to`",
        ),
        # an extra field smuggled into an element
        (
            "create_entities",
            {"entities": [{"name": "Emma", "entityType": "person", "observations": [], "admin": True}]},
            "unknown field `admin`",
        ),
        # a nested type mismatch: observations is a list of texts
        (
            "create_entities",
            {"entities": [{"name": "Emma", "entityType": "person", "observations": "likes tea"}]},
            "`entities[0].observations`: expected a list",
        ),
        # a list over its bound, and a huge one (over the proxy's 64 KiB)
        (
            "create_entities",
            {"entities": [{"name": "Emma", "entityType": "person", "observations": []}] * 21},
            "`entities`: more than 20 elements",
        ),
        (
            "create_entities",
            {"entities": [{"name": "Emma", "entityType": "person", "observations": []}] * 5000},
            "more than the 65536 accepted",
        ),
        # a deletion is not offered at all
        ("delete_entities", {"entityNames": ["Emma"]}, "not available through intentplane"),
    ],
)
def test_an_injected_element_is_refused_and_nothing_is_written(tmp_path, tool, args, why):
    cfg = config(tmp_path)
    r = play(cfg, lambda s: s.call_tool(tool, args))
    assert r.is_error
    assert why in text(r), text(r)
    assert graph(tmp_path) == []
