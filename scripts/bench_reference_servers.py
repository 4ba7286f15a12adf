"""The measurement of scripts/bench-reference-servers (see there)."""

import asyncio
import contextlib
import json
import os
import pathlib
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

ROOT = pathlib.Path(__file__).resolve().parents[1]
IPC = os.environ["IPC"]
SERVERS = pathlib.Path(os.environ.get("IPC_REFERENCE_SERVERS", ROOT / "target" / "mcp-servers"))
FS = SERVERS / "node_modules" / ".bin" / "mcp-server-filesystem"
SUPERGATEWAY = SERVERS / "node_modules" / ".bin" / "supergateway"
EXAMPLE = ROOT / "examples" / "mcp" / "filesystem" / "intentplane.toml"


def config(tmp: pathlib.Path, ws: pathlib.Path, url: str | None = None) -> pathlib.Path:
    """The example's config on this workspace; with `url`, its server is
    that Streamable HTTP endpoint instead of the command."""
    text = EXAMPLE.read_text()
    if url:
        text = re.sub(r'command = "npx"\nargs = \[.*\]\ncwd = ".*"\nenv_pass = \[.*\]\n', f'url = "{url}"\n', text)
        assert url in text
    text = text.replace('command = "npx"', f'command = "{FS}"')
    text = text.replace('"-y", "@modelcontextprotocol/server-filesystem@2026.8.31", ', "")
    text = text.replace("${CONFIG_DIR}/workspace", str(ws))
    text = text.replace('cwd = "workspace"', f'cwd = "{ws}"')
    text = text.replace('"../keys/', f'"{ROOT}/examples/mcp/keys/')
    text = text.replace('file = "registries/workspace.json"', f'file = "{tmp}/workspace.json"')
    text = text.replace('store = "intentplane.db"', f'store = "{tmp}/intentplane.db"')
    text = text.replace("calls = 200", "calls = 1000000")
    (tmp / "workspace.json").write_text(json.dumps({"emma": [{"id": "w", "value": str(ws)}]}))
    p = tmp / "intentplane.toml"
    p.write_text(text)
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def measure(n: int, sessions: dict, ws: pathlib.Path, times: dict, label: str, cpu=None):
    """`n` (plus 20 warm-up) reads and writes through each session,
    alternating (only one kind with ONLY=read or ONLY=write, for a
    profiler). `cpu`, if given, reads the proxy's CPU seconds: then the
    proxy's CPU while each kind of call was in flight, and all of it over
    the measured rounds, are returned (seconds)."""
    only = os.environ.get("ONLY")
    kinds = [k for k in ("read", "write") if only in (None, "", k)]
    in_flight = {k: 0.0 for k in kinds}
    start = None
    for i in range(n + 20):
        if cpu and i == 20:
            start = cpu()
        for kind, s in sessions.items():
            for w in kinds:
                if w == "read":
                    call = ("read_text_file", {"path": str(ws / "read.md")})
                else:
                    # a new content each time: a new operation, decided and sent
                    call = ("write_file", {"path": f"{ws}/w-{label}-{kind}.md", "content": f"{kind} {i}"})
                c0 = cpu() if cpu and kind == "proxy" and i >= 20 else None
                t = time.perf_counter()
                r = await s.call_tool(*call)
                took = time.perf_counter() - t
                assert not (getattr(r, "isError", None) or getattr(r, "is_error", None)), r
                if i >= 20:  # warm-up left out
                    times[(kind, w)].append(took)
                c1 = cpu() if c0 is not None else None
                if c1 is not None:
                    in_flight[w] += c1 - c0
    end = cpu() if start is not None else None
    if start is None or end is None:
        return None
    return in_flight, end - start


def report(n: int, times: dict, title: str):
    ms = lambda xs, q: 1000 * (statistics.median(xs) if q == 50 else sorted(xs)[int(len(xs) * 0.99) - 1])
    print(f"{n} calls each, {title}")
    for w, label in (("read", "passthrough read (read_text_file)"), ("write", "guarded write (write_file)")):
        d, p = times[("direct", w)], times[("proxy", w)]
        if not d:
            continue
        print(f"{label}:")
        for q in (50, 99):
            print(f"  p{q}: direct {ms(d, q):.2f} ms, proxy {ms(p, q):.2f} ms, overhead {ms(p, q) - ms(d, q):.2f} ms")
        r = times.get(("relay", w))
        if r:
            # one more process and two more pipes, nothing parsed
            print(f"  p50 through a relay that only copies lines (examples/null_relay.rs): {ms(r, 50):.2f} ms, overhead {ms(r, 50) - ms(d, 50):.2f} ms")


def proxy_pid(cfg: pathlib.Path) -> int | None:
    """The `ipc mcp` process started with this config (Linux: /proc)."""
    for d in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcp" in argv and str(cfg).encode() in argv:
            return int(d.name)
    return None


def cpu_seconds(pid: int | None) -> float | None:
    """User plus system CPU seconds of a process, all its threads."""
    if pid is None:
        return None
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def empty_times():
    return {(k, w): [] for k in ("direct", "proxy", "relay") for w in ("read", "write")}


async def stdio_downstream(n: int, tmp: pathlib.Path, ws: pathlib.Path):
    cfg = config(tmp, ws)
    direct = StdioServerParameters(command=str(FS), args=[str(ws)], cwd=str(ws), env=dict(os.environ))
    proxy = StdioServerParameters(command=IPC, args=["mcp", "--config", str(cfg)], env=dict(os.environ))
    relay_bin = os.environ.get("RELAY")
    times = empty_times()
    async with contextlib.AsyncExitStack() as stack:
        sessions = {}
        params = [("direct", direct), ("proxy", proxy)]
        if relay_bin:
            params.append(("relay", StdioServerParameters(command=relay_bin, args=[str(FS), str(ws)], cwd=str(ws), env=dict(os.environ))))
        for kind, prm in params:
            r, w = await stack.enter_async_context(stdio_client(prm))
            sessions[kind] = await stack.enter_async_context(ClientSession(r, w))
            await sessions[kind].initialize()
        pid = proxy_pid(cfg)
        # no CPU figures when the proxy's process cannot be found (no /proc)
        cpu = await measure(n, sessions, ws, times, "stdio", (lambda: cpu_seconds(pid)) if pid else None)
    report(n, times, "reference filesystem server on stdio, alternating direct / through ipc mcp")
    if cpu:
        # the proxy's CPU while each call was in flight (/proc's clock
        # ticks, summed over the calls), and while none was (what a call
        # left to do after its answer, such as a write's outcome receipt)
        in_flight, total = cpu
        per = ", ".join(f"{w} {1000 * c / n:.3f} ms" for w, c in in_flight.items())
        between = max(0.0, 1000 * (total - sum(in_flight.values())) / n)
        print(f"CPU of the ipc mcp process per proxied call, while it was in flight: {per}; between calls: {between:.3f} ms per round")
        tick = 1000 / os.sysconf("SC_CLK_TCK")
        if sum(in_flight.values()) * 1000 < 50 * tick:
            print(f"  (from fewer than 50 clock ticks of {tick:.0f} ms: too few calls for a split to mean much)")


async def http_downstream(n: int, tmp: pathlib.Path, ws: pathlib.Path):
    """The same server behind supergateway's Streamable HTTP (stateful):
    the SDK's HTTP client to it directly, and `ipc mcp` (on stdio) with a
    `url` downstream to it."""
    port = free_port()
    gw = subprocess.Popen(
        [str(SUPERGATEWAY), "--stdio", f"{FS} {ws}", "--outputTransport", "streamableHttp",
         "--stateful", "--port", str(port), "--logLevel", "none"],
        cwd=str(ws), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        cfg = config(tmp, ws, url=url)
        proxy = StdioServerParameters(command=IPC, args=["mcp", "--config", str(cfg)], env=dict(os.environ))
        times = empty_times()
        async with streamable_http_client(url) as (r1, w1), stdio_client(proxy) as (r2, w2):
            async with ClientSession(r1, w1) as d, ClientSession(r2, w2) as p:
                await d.initialize()
                await p.initialize()
                await measure(n, {"direct": d, "proxy": p}, ws, times, "http")
        report(n, times, "the same server over Streamable HTTP (supergateway), alternating direct / through ipc mcp (url downstream)")
    finally:
        gw.terminate()
        gw.wait(timeout=30)


async def main(n: int, which: str):
    if os.environ.get("ONLY") not in (None, "", "read", "write"):
        sys.exit(f"error: ONLY is `read` or `write`, not `{os.environ['ONLY']}`")
    tmp = pathlib.Path(tempfile.mkdtemp()).resolve()
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "read.md").write_text("x" * 1000)
    if which in ("all", "stdio"):
        await stdio_downstream(n, tmp, ws)
    if which in ("all", "http"):
        if SUPERGATEWAY.exists():
            h = tmp / "http"
            h.mkdir()
            await http_downstream(n, h, ws)
        elif which == "http":
            # asked for by name: a missing server is a failure, not a skip
            sys.exit(f"error: the HTTP downstream needs {SUPERGATEWAY} (scripts/reference-servers installs it)")
        else:
            print(f"SKIPPED: the HTTP downstream: {SUPERGATEWAY} is missing", file=sys.stderr)


asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 500, sys.argv[2] if len(sys.argv) > 2 else "all"))
