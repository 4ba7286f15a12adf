"""`intentplane_request_mandate` through the official Python MCP SDK, in
both elicitation eras: the agent proposes the claims it read, the user is
shown each value (its normalised spelling, its origin, whether a registry
of theirs holds it) and ticks the ones to grant; the child mandate decides
the session's later calls. The injected request: an agent that followed
the "we changed banks" e-mail proposes the attacker's IBAN beside the
landlord's; the user sees it marked as not in any registry of theirs and
declines.
"""

import asyncio
import sqlite3

import pytest
from test_mcp_proxy import ATTACKER, LANDLORD, Run, send, text

TOOL = "intentplane_request_mandate"
ERAS = ["2025-11-25", "2026-07-28"]


class User(Run):
    """A session whose user answers every mandate request with `choose`:
    `(message, {checkbox key: title})` -> (action, content)."""

    def __init__(self, tmp, choose, budget="2000.00"):
        super().__init__(tmp, answer="accept", budget=budget)
        self.cfg.write_text(
            self.cfg.read_text().replace("[session]\n", "[session]\nmandate_requests = true\n", 1)
        )
        self.choose = choose
        self.forms = []

    async def elicit(self, context, params):
        boxes = {k: v.get("title", "") for k, v in params.requested_schema.get("properties", {}).items()}
        self.shown.append(params.message)
        self.forms.append(boxes)
        from mcp import types

        action, content = self.choose(params.message, boxes)
        if action == "accept":
            return types.ElicitResult(action="accept", content=content)
        return types.ElicitResult(action=action)

    def run(self, era, body):
        if era == "2026-07-28":
            return asyncio.run(self.play_2026(body))
        return asyncio.run(self.play(body))

    def receipts(self, kind):
        db = sqlite3.connect(self.tmp / "intentplane.db")
        try:
            rows = [r[0] for r in db.execute("select body from receipts order by seq")]
        except sqlite3.OperationalError:
            rows = []
        finally:
            db.close()
        return [r for r in rows if f'"kind":"{kind}"' in r]


def tick_only(known_name):
    """The attentive user: ticks only the values their records know."""

    def choose(message, boxes):
        return "accept", {k: (known_name in t) for k, t in boxes.items()}

    return choose


def decline(message, boxes):
    return "decline", None


REQUEST = {"pack": "bank", "claims": {"payee": [LANDLORD, ATTACKER]}, "budget": "1000.00", "calls": 5}


@pytest.mark.parametrize("era", ERAS)
def test_the_injected_payee_is_shown_as_unknown_and_the_user_declines(tmp_path, era):
    user = User(tmp_path, decline)

    async def body(s):
        listed = await s.list_tools()
        asked = await s.call_tool(TOOL, REQUEST)
        paid = await s.call_tool("send_money", send(ATTACKER, 10))
        return [t.name for t in listed.tools], asked, paid

    names, asked, paid = user.run(era, body)
    assert TOOL in names
    [shown] = user.shown
    # every value, normalised, with its origin; the attacker's marked and
    # not offered: no registry of the user's holds it
    assert "DE44 5001 0517 5407 3249 31" in shown
    assert "registry calls it landlord" in shown
    assert "IN NO REGISTRY OF YOURS" in shown
    assert "DE75 5121 0800 1245 1261 99 - NOT in any registry of yours" in shown, shown
    assert "1,000.00 EUR" in shown
    [boxes] = user.forms
    assert len(boxes) == 1 and "DE44" in list(boxes.values())[0], boxes
    assert asked.is_error and "declined" in text(asked), text(asked)
    assert "receipt #" in text(asked)
    assert paid.is_error and "provenance" in text(paid)
    assert user.executed("send_money") == []
    [r] = user.receipts("mandate")
    assert '"change":"decline"' in r and '"granted":[]' in r
    assert ATTACKER.replace(" ", "") in r  # recorded as not granted


@pytest.mark.parametrize("era", ERAS)
def test_only_the_ticked_values_enter_the_child_and_decide_the_calls(tmp_path, era):
    user = User(tmp_path, tick_only("landlord"))

    async def body(s):
        asked = await s.call_tool(TOOL, REQUEST)
        first = await s.call_tool("send_money", send(LANDLORD, 600))
        # the child's budget (1,000.00), not the session's (2,000.00)
        second = await s.call_tool("send_money", send(LANDLORD, 600, "again"))
        attacker = await s.call_tool("send_money", send(ATTACKER, 10))
        return asked, first, second, attacker

    asked, first, second, attacker = user.run(era, body)
    assert not asked.is_error, text(asked)
    assert "1 of the 2 values asked, 1 not granted" in text(asked)
    granted = text(asked).split("\ngranted:")[1]
    assert LANDLORD in granted and ATTACKER not in granted
    assert not first.is_error, text(first)
    assert second.is_error and "budget" in text(second), text(second)
    assert attacker.is_error and "provenance" in text(attacker)
    assert len(user.executed("send_money")) == 1
    [r] = [r for r in user.receipts("mandate") if '"change":"grant"' in r]
    assert ATTACKER.replace(" ", "") in r  # recorded as not granted


def test_the_child_survives_a_restart(tmp_path):
    user = User(tmp_path, tick_only("landlord"))
    asked = user.run("2025-11-25", lambda s: s.call_tool(TOOL, {**REQUEST, "budget": "100.00"}))
    assert not asked.is_error, text(asked)
    # a new `ipc mcp` process on the same config and store
    paid = user.run("2025-11-25", lambda s: s.call_tool("send_money", send(LANDLORD, 150)))
    assert paid.is_error and "budget" in text(paid), text(paid)
    assert user.executed("send_money") == []


def test_a_client_without_elicitation_gets_the_reason(tmp_path):
    user = User(tmp_path, decline)
    user.answer = None

    async def body(s):
        return await s.call_tool(TOOL, REQUEST)

    r = user.run("2025-11-25", body)
    assert r.is_error and "does not support elicitation" in text(r), text(r)
    assert user.receipts("mandate") == []


@pytest.mark.parametrize(
    "args,needle",
    [
        ({**REQUEST, "accepted": True}, "unknown argument `accepted`"),
        ({"pack": "bank", "claims": {"payee": ["not an iban"]}}, "claim `payee`"),
        ({"pack": "bank", "claims": {"approver": "emma"}}, "declares no claim `approver`"),
    ],
)
def test_the_agent_cannot_accept_nor_smuggle(tmp_path, args, needle):
    user = User(tmp_path, tick_only(""))
    r = user.run("2025-11-25", lambda s: s.call_tool(TOOL, args))
    assert r.is_error and needle in text(r), text(r)
    assert user.shown == [], "refused before the user is asked"
