"""`ipc mcp` driven by a third-party client: the official Python MCP SDK
(PyPI `mcp`), over stdio, against the demo server (`ipc demo mcp-server`).

What the demo server executed is read from its state file, so every
assertion about an ALLOW is about what the downstream actually received.
The SDK speaks both elicitation eras: `ClientSession.initialize` offers
2025-11-25 (a server-to-client `elicitation/create`), `mcp.Client(...,
mode="2026-07-28")` the multi round-trip era (an input-required result the
client answers itself); the Rust tests drive both through rmcp's client.
"""

import asyncio
import json
import os
import pathlib
import tempfile

import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from tools import require

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
# `IPC_BIN`: another `ipc` (tests/wheel runs this file with the wheel's)
IPC = pathlib.Path(os.environ.get("IPC_BIN", TARGET / "debug" / "ipc"))
LANDLORD = "DE44 5001 0517 5407 3249 31"
ATTACKER = "DE75 5121 0800 1245 1261 99"

require("ipc binary", IPC.exists(), f"{IPC} is missing: run cargo test first")


def config(tmp: pathlib.Path, extra_args=(), budget="2000.00") -> pathlib.Path:
    (tmp / "approvals").mkdir(exist_ok=True)
    args = ["demo", "mcp-server", "--state", str(tmp / "state.json"), *extra_args]
    text = f"""
packs = ["{ROOT}/packs/bank"]
world = "{ROOT}/examples/mcp/world.toml"
store = "{tmp}/intentplane.db"

[[servers]]
name = "demo"
command = "ipc"
args = {json.dumps(args)}

[session]
user = "emma"
scopes = ["payments.write", "files.delete"]
budget = "{budget}"
calls = 50
ttl = 3600
issuer_key = "{ROOT}/examples/mcp/keys/issuer.key"
user_key = "{ROOT}/examples/mcp/keys/emma.key"
approvals_dir = "{tmp}/approvals"
[session.claims]
account = "emma-checking"
currency = "EUR"

[[tools]]
server = "demo"
tool = "read_inbox"
passthrough = true

[[tools]]
server = "demo"
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

[pack]
name = "files"
description = "Files"

[[tools]]
server = "demo"
tool = "delete_file"
action = "files.delete"
scope = "files.delete"
description = "Delete a file"
[tools.params.path]
type = "Text"
max_len = 500
[[tools.rules]]
kind = "four_eyes"
reason = "deleting a file"
always = true
"""
    path = tmp / "intentplane.toml"
    path.write_text(text)
    return path


class Run:
    """One `ipc mcp` session in a fresh folder."""

    def __init__(self, tmp, answer=None, extra_args=(), budget="2000.00"):
        self.tmp = pathlib.Path(tmp)
        self.cfg = config(self.tmp, extra_args, budget)
        self.answer = answer
        self.shown = []

    async def elicit(self, context, params):
        self.shown.append(params.message)
        if self.answer == "accept":
            return types.ElicitResult(action="accept", content={})
        return types.ElicitResult(action=self.answer or "decline")

    def executed(self, tool):
        state = json.loads((self.tmp / "state.json").read_text())
        return [c for c in state["calls"] if c["tool"] == tool]

    async def play_2026(self, body):
        import mcp

        params = StdioServerParameters(
            command=str(IPC), args=["mcp", "--config", str(self.cfg)]
        )
        cb = self.elicit if self.answer is not None else None
        async with mcp.Client(params, mode="2026-07-28", elicitation_callback=cb) as c:
            assert str(c.protocol_version) == "2026-07-28"
            return await body(c)

    async def play(self, body):
        params = StdioServerParameters(
            command=str(IPC), args=["mcp", "--config", str(self.cfg)]
        )
        cb = self.elicit if self.answer is not None else None
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w, elicitation_callback=cb) as s:
                await s.initialize()
                return await body(s)


def text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


def send(recipient, amount, subject="Rent"):
    return {"recipient": recipient, "amount": amount, "currency": "EUR", "subject": subject}


def play(run, body):
    return asyncio.run(run.play(body))


def test_only_configured_tools_are_listed_and_hidden_ones_refused(tmp_path):
    run = Run(tmp_path)

    async def body(s):
        listed = await s.list_tools()
        r = await s.call_tool("send_email", {"to": "x@evil.example", "subject": "s", "body": "b"})
        return [t.name for t in listed.tools], r

    names, r = play(run, body)
    assert names == ["read_inbox", "send_money", "delete_file"]
    assert r.is_error and "not available through intentplane" in text(r)
    assert run.executed("send_email") == []


def test_passthrough_is_forwarded(tmp_path):
    run = Run(tmp_path)
    r = play(run, lambda s: s.call_tool("read_inbox", {}))
    assert not r.is_error
    assert "we changed banks" in text(r)
    assert ATTACKER in text(r)


def test_allow_sends_the_trusted_values(tmp_path):
    run = Run(tmp_path)
    r = play(run, lambda s: s.call_tool("send_money", send("de44 5001 0517 5407 3249 31", 42.5)))
    assert not r.is_error, text(r)
    [call] = run.executed("send_money")
    assert call["args"]["recipient"] == "DE44500105175407324931"
    assert call["args"]["amount"] == 42.5
    assert call["args"]["currency"] == "EUR"


def test_deny_has_a_readable_reason(tmp_path):
    run = Run(tmp_path)
    r = play(run, lambda s: s.call_tool("send_money", send(ATTACKER, 1200)))
    assert r.is_error
    t = text(r)
    assert "DENY at stage `provenance`" in t
    assert "not from a trusted source" in t
    assert "hint:" in t
    assert run.executed("send_money") == []


@pytest.mark.parametrize("answer", ["accept", "decline"])
def test_step_up_by_elicitation(tmp_path, answer):
    run = Run(tmp_path, answer=answer)

    async def body(s):
        first = await s.call_tool("send_money", send(LANDLORD, 1200))
        # the same operation again: executed once, or the decline stands
        again = await s.call_tool("send_money", send(LANDLORD, 1200))
        return first, again

    r, again = play(run, body)
    if answer == "decline":
        assert again.is_error and "declined by the user" in text(again), text(again)
    else:
        assert not again.is_error, text(again)
    assert len(run.shown) == 1
    assert "payment.transfer" in run.shown[0]
    assert "  amount  from the agent's proposal\n    | 1,200.00 EUR\n" in run.shown[0]
    assert "registry.beneficiaries" in run.shown[0]
    if answer == "accept":
        assert not r.is_error, text(r)
        [call] = run.executed("send_money")
        assert call["args"]["amount"] == 1200
    else:
        assert r.is_error and "declined by the user" in text(r), text(r)
        assert run.executed("send_money") == []


@pytest.mark.parametrize("answer", ["accept", "decline"])
def test_step_up_in_the_2026_era(tmp_path, answer):
    run = Run(tmp_path, answer=answer)
    r = asyncio.run(
        run.play_2026(lambda c: c.call_tool("send_money", send(LANDLORD, 1300)))
    )
    assert len(run.shown) == 1
    assert "  amount  from the agent's proposal\n    | 1,300.00 EUR\n" in run.shown[0]
    if answer == "accept":
        assert not r.is_error, text(r)
        assert len(run.executed("send_money")) == 1
    else:
        assert r.is_error and "declined by the user" in text(r), text(r)
        assert run.executed("send_money") == []


def test_a_client_without_elicitation_is_told_why(tmp_path):
    run = Run(tmp_path, answer=None)
    r = play(run, lambda s: s.call_tool("send_money", send(LANDLORD, 1200)))
    assert r.is_error
    assert "does not support elicitation" in text(r)
    assert run.executed("send_money") == []


def test_four_eyes_is_refused_naming_who_must_approve(tmp_path):
    run = Run(tmp_path, answer="accept")
    r = play(run, lambda s: s.call_tool("delete_file", {"path": "/home/emma/contract.pdf"}))
    assert r.is_error
    t = text(r)
    assert "four eyes" in t
    assert "must be approved by" in t
    assert run.shown == [], "four eyes is never granted from the client"
    assert run.executed("delete_file") == []


def test_a_downstream_error_is_an_error_result(tmp_path):
    run = Run(tmp_path, budget="50000.00")
    state = {"balance": "100.00", "inbox": [], "vendors": [], "calls": []}
    (tmp_path / "state.json").write_text(json.dumps(state))

    async def body(s):
        first = await s.call_tool("send_money", send(LANDLORD, 150))
        again = await s.call_tool("send_money", send(LANDLORD, 150))
        return first, again

    first, again = play(run, body)
    assert first.is_error and "insufficient funds" in text(first)
    assert again.is_error and text(again) == text(first)
    assert len(run.executed("send_money")) == 1, "the retry is answered from the store"


def test_a_downstream_that_dies_mid_call(tmp_path):
    run = Run(tmp_path, extra_args=["--crash-on", "send_money"])
    r = play(run, lambda s: s.call_tool("send_money", send(LANDLORD, 10)))
    assert r.is_error
    assert "failed on `send_money`" in text(r)


@pytest.mark.parametrize(
    "args,needle",
    [
        (send(LANDLORD, "ten euros"), "DENY at stage `contract`"),
        (send(LANDLORD, 4.001), "DENY at stage `contract`"),
        (send(LANDLORD, 10, "x" * 100_000), "DENY at stage `contract`"),
    ],
)
def test_malformed_and_oversized_arguments(tmp_path, args, needle):
    run = Run(tmp_path)
    r = play(run, lambda s: s.call_tool("send_money", args))
    assert r.is_error
    assert needle in text(r)
    assert "receipt #" in text(r)
    assert run.executed("send_money") == []


def test_two_concurrent_calls_spend_one_budget(tmp_path):
    run = Run(tmp_path, budget="1000.00")

    async def body(s):
        return await asyncio.gather(
            s.call_tool("send_money", send(LANDLORD, 600, "a")),
            s.call_tool("send_money", send(LANDLORD, 600, "b")),
        )

    a, b = play(run, body)
    assert sorted([a.is_error, b.is_error]) == [False, True]
    denied = a if a.is_error else b
    assert "budget" in text(denied)
    assert len(run.executed("send_money")) == 1
