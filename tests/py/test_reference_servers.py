"""Issue #24, item 7: `ipc mcp` in front of a reference MCP server nobody
here wrote, `@modelcontextprotocol/server-filesystem` (npm, pinned in
scripts/reference-servers), driven through the official Python SDK with
the shipped config examples/mcp/filesystem/intentplane.toml (its trusted
folder moved to this test's own). What the server did is read from the
disk afterwards: reads pass, injected paths are refused and nothing is
written outside, trusted writes land, a move is asked through
elicitation and happens only when the user accepts.

The server is installed by `scripts/reference-servers` (scripts/test runs
it); without it these tests skip loudly, and fail under `CI`.
"""

import asyncio
import json
import os
import pathlib
import subprocess

import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
IPC = TARGET / "debug" / "ipc"
SERVERS = pathlib.Path(os.environ.get("IPC_REFERENCE_SERVERS", TARGET / "mcp-servers"))
FS = SERVERS / "node_modules" / ".bin" / "mcp-server-filesystem"
EXAMPLE = ROOT / "examples" / "mcp" / "filesystem" / "intentplane.toml"
SHIPPED = "/tmp/intentplane-workspace"

for need, how in [(IPC, "run cargo test first"), (FS, "run scripts/reference-servers")]:
    if not need.exists():
        if os.environ.get("CI"):
            raise RuntimeError(f"{need} is missing: {how}")
        print(f"\n== SKIPPED: {need} is missing ({how})")
        pytest.skip(f"{need} is missing: {how}", allow_module_level=True)


def config(tmp: pathlib.Path) -> pathlib.Path:
    """The shipped config, its folder and server moved to this test's."""
    ws = (tmp / "ws").resolve()
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "readme.md").write_text("hello from the workspace\n")
    (tmp / "outside").mkdir()
    (tmp / "outside" / "secret.txt").write_text("not yours\n")
    text = EXAMPLE.read_text()
    text = text.replace('command = "npx"', f'command = "{FS}"')
    text = text.replace(f'"-y", "@modelcontextprotocol/server-filesystem@2026.8.31", ', "")
    text = text.replace(SHIPPED, str(ws))
    text = text.replace('"../keys/', f'"{ROOT}/examples/mcp/keys/')
    text = text.replace('file = "registries/workspace.json"', f'file = "{tmp}/workspace.json"')
    text = text.replace('store = "intentplane.db"', f'store = "{tmp}/intentplane.db"')
    (tmp / "workspace.json").write_text(
        json.dumps({"emma": [{"id": "workspace", "value": str(ws)}]})
    )
    path = tmp / "intentplane.toml"
    path.write_text(text)
    return path


class Run:
    def __init__(self, tmp, answer=None):
        self.tmp = pathlib.Path(tmp).resolve()
        self.cfg = config(self.tmp)
        self.ws = self.tmp / "ws"
        self.answer = answer
        self.asked = []

    async def elicit(self, context, params):
        self.asked.append(params.message)
        if self.answer == "accept":
            return types.ElicitResult(action="accept", content={})
        return types.ElicitResult(action="decline")

    def play(self, body):
        async def go():
            params = StdioServerParameters(
                command=str(IPC), args=["mcp", "--config", str(self.cfg)]
            )
            async with stdio_client(params) as (r, w):
                async with ClientSession(r, w, elicitation_callback=self.elicit) as s:
                    await s.initialize()
                    return await body(s)

        return asyncio.run(go())


def text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


def test_the_shipped_config_matches_what_the_server_declares(tmp_path):
    run = Run(tmp_path)
    out = subprocess.run(
        [str(IPC), "mcp", "--config", str(run.cfg), "--check", "--servers", "--format", "json"],
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 0, out.stdout
    assert (doc["errors"], doc["warnings"]) == (0, 0), doc["diagnostics"]
    # a misspelt argument is found at its line, with the server's names
    bad = run.cfg.read_text().replace("[tools.params.content]", "[tools.params.content]\narg = \"contents\"")
    run.cfg.write_text(bad)
    out = subprocess.run(
        [str(IPC), "mcp", "--config", str(run.cfg), "--check", "--servers", "--format", "json"],
        capture_output=True,
        text=True,
    )
    doc = json.loads(out.stdout)
    assert out.returncode == 1
    [d] = [d for d in doc["diagnostics"] if d["code"] == "ipc::mcp::undeclared_arg"]
    line = bad.splitlines()[d["labels"][0]["line"] - 1]
    assert line == 'arg = "contents"'
    assert "`content`" in d["help"]


def test_reads_pass_and_trusted_writes_land(tmp_path):
    run = Run(tmp_path)

    async def body(s):
        dirs = text(await s.call_tool("list_allowed_directories", {}))
        read = await s.call_tool("read_text_file", {"path": str(run.ws / "notes" / "readme.md")})
        rel = await s.call_tool("write_file", {"path": "./notes/todo.md", "content": "buy milk\n"})
        absolute = await s.call_tool(
            "write_file", {"path": f"{run.ws}//notes/./abs.md", "content": "absolute\n"}
        )
        mkdir = await s.call_tool("create_directory", {"path": "drafts"})
        return dirs, read, rel, absolute, mkdir

    dirs, read, rel, absolute, mkdir = run.play(body)
    assert str(run.ws) in dirs
    assert not read.is_error and "hello from the workspace" in text(read)
    assert not rel.is_error, text(rel)
    assert (run.ws / "notes" / "todo.md").read_text() == "buy milk\n"
    assert not absolute.is_error, text(absolute)
    assert (run.ws / "notes" / "abs.md").read_text() == "absolute\n"
    assert not mkdir.is_error, text(mkdir)
    assert (run.ws / "drafts").is_dir()


@pytest.mark.parametrize(
    "path",
    [
        "../../.ssh/authorized_keys",
        "../outside/secret.txt",
        "notes/../../outside/secret.txt",
        "{tmp}/outside/secret.txt",
        "{ws}/../outside/secret.txt",
        "{ws}-evil/x.txt",
        "~/.ssh/authorized_keys",
        "/etc/cron.d/x",
    ],
)
def test_injected_paths_are_refused_and_nothing_is_written(tmp_path, path):
    run = Run(tmp_path)
    path = path.format(tmp=run.tmp, ws=run.ws)
    before = sorted(p for p in run.tmp.rglob("*") if p.name != "intentplane.db" and "intentplane.db" not in p.name)

    r = run.play(lambda s: s.call_tool("write_file", {"path": path, "content": "ssh-ed25519 AAAA attacker"}))
    assert r.is_error
    t = text(r)
    assert "DENY at stage" in t, t
    after = sorted(p for p in run.tmp.rglob("*") if p.name != "intentplane.db" and "intentplane.db" not in p.name)
    assert after == before
    assert (run.tmp / "outside" / "secret.txt").read_text() == "not yours\n"
    assert not (run.tmp / ".ssh").exists()


def test_a_hidden_tool_is_refused(tmp_path):
    run = Run(tmp_path)
    edits = [{"oldText": "hello", "newText": "owned"}]
    r = run.play(lambda s: s.call_tool("edit_file", {"path": "notes/readme.md", "edits": edits}))
    assert r.is_error and "not available through intentplane" in text(r)
    assert (run.ws / "notes" / "readme.md").read_text() == "hello from the workspace\n"


@pytest.mark.parametrize("answer", ["accept", "decline"])
def test_a_move_is_asked_through_elicitation(tmp_path, answer):
    run = Run(tmp_path, answer=answer)
    src, dst = run.ws / "notes" / "readme.md", run.ws / "notes" / "moved.md"

    async def body(s):
        return await s.call_tool("move_file", {"source": "notes/readme.md", "destination": "notes/moved.md"})

    r = run.play(body)
    assert len(run.asked) == 1, run.asked
    assert "moving a file" in run.asked[0]
    if answer == "accept":
        assert not r.is_error, text(r)
        assert dst.read_text() == "hello from the workspace\n" and not src.exists()
    else:
        assert r.is_error and "DENY" in text(r)
        assert src.exists() and not dst.exists()


def test_a_move_out_of_the_workspace_is_refused_before_anyone_is_asked(tmp_path):
    run = Run(tmp_path, answer="accept")
    r = run.play(
        lambda s: s.call_tool(
            "move_file", {"source": "notes/readme.md", "destination": str(run.tmp / "outside" / "stolen.md")}
        )
    )
    assert r.is_error and "DENY at stage `provenance`" in text(r), text(r)
    assert run.asked == []
    assert (run.ws / "notes" / "readme.md").exists()
    assert not (run.tmp / "outside" / "stolen.md").exists()
