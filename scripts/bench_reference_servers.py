"""The measurement of scripts/bench-reference-servers (see there)."""

import asyncio
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = pathlib.Path(__file__).resolve().parents[1]
IPC = os.environ["IPC"]
SERVERS = pathlib.Path(os.environ.get("IPC_REFERENCE_SERVERS", ROOT / "target" / "mcp-servers"))
FS = SERVERS / "node_modules" / ".bin" / "mcp-server-filesystem"
EXAMPLE = ROOT / "examples" / "mcp" / "filesystem" / "intentplane.toml"


def config(tmp: pathlib.Path, ws: pathlib.Path) -> pathlib.Path:
    text = EXAMPLE.read_text()
    text = text.replace('command = "npx"', f'command = "{FS}"')
    text = text.replace('"-y", "@modelcontextprotocol/server-filesystem@2026.8.31", ', "")
    text = text.replace("/tmp/intentplane-workspace", str(ws))
    text = text.replace('"../keys/', f'"{ROOT}/examples/mcp/keys/')
    text = text.replace('file = "registries/workspace.json"', f'file = "{tmp}/workspace.json"')
    text = text.replace('store = "intentplane.db"', f'store = "{tmp}/intentplane.db"')
    text = text.replace("calls = 200", "calls = 1000000")
    (tmp / "workspace.json").write_text(json.dumps({"emma": [{"id": "w", "value": str(ws)}]}))
    p = tmp / "intentplane.toml"
    p.write_text(text)
    return p


async def main(n: int):
    tmp = pathlib.Path(tempfile.mkdtemp()).resolve()
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "read.md").write_text("x" * 1000)
    cfg = config(tmp, ws)
    direct = StdioServerParameters(command=str(FS), args=[str(ws)], cwd=str(ws), env=dict(os.environ))
    proxy = StdioServerParameters(command=IPC, args=["mcp", "--config", str(cfg)], env=dict(os.environ))
    times = {(k, w): [] for k in ("direct", "proxy") for w in ("read", "write")}
    async with stdio_client(direct) as (r1, w1), stdio_client(proxy) as (r2, w2):
        async with ClientSession(r1, w1) as d, ClientSession(r2, w2) as p:
            await d.initialize()
            await p.initialize()
            for i in range(n + 20):
                for kind, s in (("direct", d), ("proxy", p)):
                    t = time.perf_counter()
                    r = await s.call_tool("read_text_file", {"path": str(ws / "read.md")})
                    read = time.perf_counter() - t
                    assert not r.isError if hasattr(r, "isError") else not r.is_error
                    # a new content each time: a new operation, decided and sent
                    t = time.perf_counter()
                    r = await s.call_tool("write_file", {"path": f"{ws}/w-{kind}.md", "content": f"{kind} {i}"})
                    write = time.perf_counter() - t
                    err = getattr(r, "isError", None) or getattr(r, "is_error", None)
                    assert not err, r
                    if i >= 20:  # warm-up left out
                        times[(kind, "read")].append(read)
                        times[(kind, "write")].append(write)
    ms = lambda xs, q: 1000 * (statistics.median(xs) if q == 50 else sorted(xs)[int(len(xs) * 0.99) - 1])
    print(f"{n} calls each, reference filesystem server, alternating direct / through ipc mcp")
    for w, label in (("read", "passthrough read (read_text_file)"), ("write", "guarded write (write_file)")):
        d, p = times[("direct", w)], times[("proxy", w)]
        print(f"{label}:")
        for q in (50, 99):
            print(f"  p{q}: direct {ms(d, q):.2f} ms, proxy {ms(p, q):.2f} ms, overhead {ms(p, q) - ms(d, q):.2f} ms")


asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 500))
