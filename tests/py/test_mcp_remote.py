"""`ipc mcp` and remote MCP servers, both directions, with the official
Python SDK (PyPI `mcp`):

- a downstream over Streamable HTTP (`url` in `[[servers]]`): the SDK's
  `MCPServer` behind a bearer token (tests/py/remote_server.py), over plain
  HTTP on loopback and over TLS with a throwaway authority (openssl, as
  scripts/pg-cluster makes one); what the server received, and with which
  token, is read from its state file;
- `ipc mcp --listen`: the SDK's Streamable HTTP client against the proxy,
  with the checks of `ipc serve --listen` (the token, `Host`, `Origin`),
  and a guarded call decided as over stdio.
"""

import asyncio
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from tools import require

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
IPC = TARGET / "debug" / "ipc"
HERE = pathlib.Path(__file__).resolve().parent
LANDLORD = "DE44 5001 0517 5407 3249 31"
ATTACKER = "DE75 5121 0800 1245 1261 99"
TOKEN = "remote-test-token-0123456789abcdef"
# generous: the machine running the tests may be loaded
STARTUP = 120

require("ipc binary", IPC.exists(), f"{IPC} is missing: run cargo test first")
require("openssl", shutil.which("openssl") is not None, "the TLS tests make a throwaway authority")

TOOLS = """
[[tools]]
server = "bank"
tool = "read_inbox"
passthrough = true

[[tools]]
server = "bank"
tool = "send_money"
action = "payment.transfer"
[tools.params.from_account]
claim = "account"
[tools.params.payee_iban]
arg = "recipient"
[tools.params.amount]
scale = 100
[tools.params.currency]
[tools.params.subject]
"""


def write_token(path, text):
    """A `token_file` as the proxy takes it: readable by its owner only
    (one others can read is refused)."""
    path.write_text(text)
    os.chmod(path, 0o600)


def write_config(tmp: pathlib.Path, server: str, tools: str = TOOLS) -> pathlib.Path:
    (tmp / "approvals").mkdir(exist_ok=True)
    text = f"""
packs = ["{ROOT}/packs/bank"]
world = "{ROOT}/examples/mcp/world.toml"
store = "{tmp}/intentplane.db"

{server}

[session]
user = "emma"
scopes = ["payments.write"]
budget = "5000.00"
calls = 50
ttl = 3600
issuer_key = "{ROOT}/examples/mcp/keys/issuer.key"
user_key = "{ROOT}/examples/mcp/keys/emma.key"
approvals_dir = "{tmp}/approvals"
[session.claims]
account = "emma-checking"
currency = "EUR"
{tools}
"""
    path = tmp / "intentplane.toml"
    path.write_text(text)
    return path


def authority(tmp: pathlib.Path) -> pathlib.Path:
    """A throwaway authority (ca.pem) that signed a certificate for
    `localhost` and 127.0.0.1 (server.pem, server.key), and another one
    (other-ca.pem) that signed nothing here."""
    t = tmp / "tls"
    t.mkdir()
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca_ext = ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    run = lambda *a: subprocess.run(["openssl", *a], cwd=t, check=True, capture_output=True)
    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=ipc-test-ca", *ca_ext, "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-x509", *ec, "-days", "2", "-subj", "/CN=ipc-other-ca", *ca_ext, "-keyout", "o.key", "-out", "other-ca.pem")
    run("req", *ec, "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr")
    (t / "server.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "server.ext", "-out", "server.pem")
    return t


def calls_in(state: pathlib.Path, tool):
    """The calls of `tool` a demo server's state file records (none before
    its first call)."""
    if not state.exists():
        return []
    return [c for c in json.loads(state.read_text())["calls"] if c["tool"] == tool]


def stop(proc):
    proc.terminate()
    proc.wait(timeout=30)


class Remote:
    """tests/py/remote_server.py in the background: its port and what it
    received."""

    def __init__(self, tmp: pathlib.Path, tls: pathlib.Path | None = None):
        self.state = tmp / "remote-state.json"
        token = tmp / "remote-token"
        token.write_text(TOKEN + "\n")
        args = [sys.executable, str(HERE / "remote_server.py"), "--state", str(self.state), "--token-file", str(token)]
        if tls:
            args += ["--cert", str(tls / "server.pem"), "--key", str(tls / "server.key")]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), line
        self.port = int(line.split()[-1])

    def calls(self, tool):
        return calls_in(self.state, tool)

    def stop(self):
        stop(self.proc)


@pytest.fixture
def remote(tmp_path):
    r = Remote(tmp_path)
    yield r
    r.stop()


def http_server(url, extra=""):
    return f'[[servers]]\nname = "bank"\nurl = "{url}"\n{extra}'


def text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def send(recipient, amount="1200.00"):
    return {"recipient": recipient, "amount": float(amount), "currency": "EUR", "subject": "Rent"}


class User:
    def __init__(self, answer):
        self.answer = answer
        self.shown = []

    async def elicit(self, context, params):
        self.shown.append(params.message)
        if self.answer == "accept":
            return types.ElicitResult(action="accept", content={})
        return types.ElicitResult(action=self.answer)


def over_stdio(cfg, body, user=None):
    async def go():
        params = StdioServerParameters(command=str(IPC), args=["mcp", "--config", str(cfg)])
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w, elicitation_callback=user.elicit if user else None) as s:
                await s.initialize()
                return await body(s)

    return asyncio.run(asyncio.wait_for(go(), STARTUP))


def ipc(*args, env=None):
    return subprocess.run([str(IPC), *args], capture_output=True, text=True, timeout=STARTUP, env=env)


# ---------------------------------------------------------------------------
# A downstream over Streamable HTTP


def test_an_http_downstream_with_a_bearer_token(tmp_path, remote):
    write_token(tmp_path / "token", TOKEN + "\n")
    cfg = write_config(tmp_path, http_server(f"http://127.0.0.1:{remote.port}/mcp", 'token_file = "token"'))
    user = User("accept")

    async def body(s):
        inbox = await s.call_tool("read_inbox", {})
        assert not inbox.is_error and "rent reminder" in text(inbox)
        denied = await s.call_tool("send_money", send(ATTACKER))
        assert denied.is_error and "DENY at stage `provenance`" in text(denied), text(denied)
        paid = await s.call_tool("send_money", send(LANDLORD.lower()))
        assert not paid.is_error, text(paid)

    over_stdio(cfg, body, user)
    # the remote server received the token, the trusted values, and never
    # the attacker's IBAN
    sent = remote.calls("send_money")
    assert [c["args"] for c in sent] == [
        {"from_account": "emma-checking", "recipient": "DE44500105175407324931", "amount": 1200.0,
         "currency": "EUR", "subject": "Rent"}
    ]
    assert {c["authorization"] for c in sent + remote.calls("read_inbox")} == {f"Bearer {TOKEN}"}
    assert len(user.shown) == 1 and "Confirm this operation" in user.shown[0]


def test_a_refused_token_stops_the_proxy_at_start_up(tmp_path, remote):
    cfg = write_config(tmp_path, http_server(f"http://127.0.0.1:{remote.port}/mcp", 'token_env = "IPC_TEST_REMOTE_TOKEN"'))
    env = dict(os.environ, IPC_TEST_REMOTE_TOKEN="not-the-token-0123456789")
    for args in (["mcp", "--config", str(cfg)], ["mcp", "--config", str(cfg), "--check", "--servers"]):
        r = ipc(*args, env=env)
        assert r.returncode == 1, r
        assert "ipc::mcp::unauthorized" in r.stderr + r.stdout, r
    # the token from the environment is accepted
    env["IPC_TEST_REMOTE_TOKEN"] = TOKEN
    r = ipc("mcp", "--config", str(cfg), "--check", "--servers", env=env)
    assert r.returncode == 0, r
    # unset: the config itself is refused, nothing is connected to
    env.pop("IPC_TEST_REMOTE_TOKEN")
    r = ipc("mcp", "--config", str(cfg), "--check", env=env)
    assert r.returncode == 1 and "ipc::mcp::env" in r.stdout, r


def test_no_token_and_an_unreachable_server_stop_the_proxy(tmp_path, remote):
    cfg = write_config(tmp_path, http_server(f"http://127.0.0.1:{remote.port}/mcp"))
    r = ipc("mcp", "--config", str(cfg))
    assert r.returncode == 1 and "ipc::mcp::unauthorized" in r.stderr, r
    write_token(tmp_path / "token", TOKEN)
    remote.stop()
    cfg = write_config(tmp_path, http_server(f"http://127.0.0.1:{remote.port}/mcp", 'token_file = "token"'))
    r = ipc("mcp", "--config", str(cfg))
    assert r.returncode == 1 and "ipc::mcp::connect" in r.stderr, r
    assert remote.calls("read_inbox") == []


def test_the_declared_schema_check_reads_an_http_downstream(tmp_path, remote):
    write_token(tmp_path / "token", TOKEN)
    tools = TOOLS.replace('arg = "recipient"', 'arg = "recipent"')
    cfg = write_config(tmp_path, http_server(f"http://127.0.0.1:{remote.port}/mcp", 'token_file = "token"'), tools)
    r = ipc("mcp", "--config", str(cfg), "--check", "--servers", "--format", "json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1 and not doc["ok"]
    codes = [d["code"] for d in doc["diagnostics"]]
    assert "ipc::mcp::undeclared_arg" in codes, doc
    # the server declares `recipient`: the help names it
    assert any("recipient" in (d.get("help") or "") for d in doc["diagnostics"]), doc


def test_tls_with_a_private_authority(tmp_path):
    tls = authority(tmp_path)
    remote = Remote(tmp_path, tls)
    try:
        write_token(tmp_path / "token", TOKEN)
        url = f"https://localhost:{remote.port}/mcp"
        # the authority that signed the server's certificate: accepted
        cfg = write_config(tmp_path, http_server(url, 'token_file = "token"\nca_file = "tls/ca.pem"'))

        async def body(s):
            r = await s.call_tool("read_inbox", {})
            assert not r.is_error, text(r)

        over_stdio(cfg, body)
        assert len(remote.calls("read_inbox")) == 1
        # another authority, or the public roots: refused, nothing sent
        for extra in ('ca_file = "tls/other-ca.pem"', ""):
            cfg = write_config(tmp_path, http_server(url, f'token_file = "token"\n{extra}'))
            r = ipc("mcp", "--config", str(cfg))
            assert r.returncode == 1 and "ipc::mcp::tls" in r.stderr, r
            r = ipc("mcp", "--config", str(cfg), "--check", "--servers")
            assert r.returncode == 1 and "ipc::mcp::tls" in r.stdout + r.stderr, r
        assert len(remote.calls("read_inbox")) == 1
    finally:
        remote.stop()


def test_plain_http_only_to_loopback(tmp_path):
    write_token(tmp_path / "token", TOKEN)
    cfg = write_config(tmp_path, http_server("http://mcp.example.com/mcp", 'token_file = "token"'))
    r = ipc("mcp", "--config", str(cfg), "--check")
    assert r.returncode == 1 and "ipc::mcp::server_url" in r.stdout, r


# ---------------------------------------------------------------------------
# `ipc mcp --listen`


DEMO = """[[servers]]
name = "bank"
command = "ipc"
args = ["demo", "mcp-server", "--state", "{state}"]
"""


class Listening:
    """`ipc mcp --listen 127.0.0.1:0` in front of the demo server."""

    def __init__(self, tmp: pathlib.Path, tokens="listen-token-0123456789abcdef *\n"):
        self.tmp = tmp
        (tmp / "tokens").write_text(tokens)
        os.chmod(tmp / "tokens", 0o600)
        cfg = write_config(tmp, DEMO.format(state=tmp / "state.json"))
        self.proc = subprocess.Popen(
            [str(IPC), "mcp", "--config", str(cfg), "--listen", "127.0.0.1:0", "--auth-token-file", str(tmp / "tokens")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        line = self.proc.stdout.readline()
        assert line.startswith("listening on http://"), (line, self.proc.stderr.read() if not line else "")
        self.base = line.split()[-1]
        self.url = self.base + "/mcp"

    def executed(self, tool):
        return calls_in(self.tmp / "state.json", tool)

    def play(self, body, token="listen-token-0123456789abcdef", user=None):
        async def go():
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
                async with streamable_http_client(self.url, http_client=http) as (r, w):
                    async with ClientSession(r, w, elicitation_callback=user.elicit if user else None) as s:
                        await s.initialize()
                        return await body(s)

        return asyncio.run(asyncio.wait_for(go(), STARTUP))

    def stop(self):
        stop(self.proc)


@pytest.fixture
def listening(tmp_path):
    l = Listening(tmp_path)
    yield l
    l.stop()


INIT = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT = "application/json, text/event-stream"


def post(url, headers):
    return httpx2.post(url, json=INIT, headers={"Accept": ACCEPT, **headers}, timeout=60)


def test_listen_refuses_no_token_a_wrong_one_a_bad_host_and_a_web_page(listening):
    good = {"Authorization": "Bearer listen-token-0123456789abcdef"}
    assert post(listening.url, {}).status_code == 401
    assert post(listening.url, {"Authorization": "Bearer listen-token-0123456789abcdeX"}).status_code == 401
    assert post(listening.url, {"Authorization": "listen-token-0123456789abcdef"}).status_code == 401
    assert post(listening.url, {**good, "Host": "attacker.example"}).status_code == 421
    assert post(listening.url, {**good, "Origin": "https://attacker.example"}).status_code == 403
    assert post(listening.url, {**good, "Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert post(listening.base + "/other", good).status_code == 404
    ok = post(listening.url, good)
    assert ok.status_code == 200 and "intentplane" in ok.text, ok.text
    # the SDK's client with a wrong token does not get a session
    with pytest.raises(BaseException):
        listening.play(lambda s: s.list_tools(), token="not-the-token-0123456789")


def test_listen_decides_a_guarded_call_as_over_stdio(listening):
    user = User("accept")

    async def body(s):
        tools = sorted(t.name for t in (await s.list_tools()).tools)
        assert tools == ["read_inbox", "send_money"]
        denied = await s.call_tool("send_money", send(ATTACKER))
        assert denied.is_error, text(denied)
        assert "DENY at stage `provenance`" in text(denied) and "receipt #" in text(denied)
        paid = await s.call_tool("send_money", send(LANDLORD))
        assert not paid.is_error, text(paid)
        return denied

    listening.play(body, user=user)
    assert [c["args"]["recipient"] for c in listening.executed("send_money")] == ["DE44500105175407324931"]
    assert len(user.shown) == 1
    # a declined step-up: nothing runs
    declining = User("decline")

    async def again(s):
        r = await s.call_tool("send_money", send(LANDLORD, "1300.00"))
        assert r.is_error and "declined" in text(r), text(r)

    listening.play(again, user=declining)
    assert len(listening.executed("send_money")) == 1 and len(declining.shown) == 1


def test_listen_refuses_a_token_of_another_tenant(tmp_path):
    l = Listening(tmp_path, "acme-token-0123456789abcdef acme\nemma-token-0123456789abcdef emma\n")
    try:
        r = post(l.url, {"Authorization": "Bearer acme-token-0123456789abcdef"})
        assert r.status_code == 403 and "emma" in r.text, r.text
        assert post(l.url, {"Authorization": "Bearer emma-token-0123456789abcdef"}).status_code == 200
    finally:
        l.stop()


def test_listen_on_tcp_needs_a_token_file(tmp_path):
    cfg = write_config(tmp_path, DEMO.format(state=tmp_path / "state.json"))
    r = ipc("mcp", "--config", str(cfg), "--listen", "127.0.0.1:0")
    assert r.returncode == 2 and "ipc::serve::auth_required" in r.stderr, r
    r = ipc("mcp", "--config", str(cfg), "--listen", "0.0.0.0:0")
    assert r.returncode == 2 and "ipc::serve::exposed_without_auth" in r.stderr, r
