"""An agent's tool, function-calling style, guarded by intentplane in
process (docs/python.md). The model proposes `send_money(...)` with
whatever values it read; the tool asks the gateway, and only an ALLOW
pays. No network: the "model" is a list of tool calls, as a compromised
agent might make them.

Run it from a folder holding `bundle.json`, `world.toml`, `mandate.json`
(the README's tour makes them):

    python examples/python/agent_tool.py bundle.json world.toml mandate.json gateway.db
"""

import json
import sys

from intentplane import Gateway

# the tool as the model sees it (OpenAI / Anthropic function schema)
SEND_MONEY = {
    "name": "send_money",
    "description": "Send money from the user's account",
    "parameters": {
        "type": "object",
        "properties": {
            "iban": {"type": "string"},
            "amount": {"type": "string", "description": "in EUR, e.g. 98.70"},
            "subject": {"type": "string"},
        },
        "required": ["iban", "amount"],
    },
}


def send_money(gw: Gateway, iban: str, amount: str, subject: str = "") -> str:
    """The tool's body: the proposal goes to the gateway; what the model
    reads back is the decision, never an exception."""
    d = gw.decide(
        "payment.transfer",
        {"from_account": "emma-checking", "payee_iban": iban, "amount": amount, "currency": "EUR", "subject": subject},
    )
    if d.decision == "ALLOW":
        return f"sent: {json.dumps(d.result)}"
    if d.decision == "PENDING":
        return f"waiting for {d.approve_by} to approve operation {d.operation_hash}"
    return f"refused at {d.stage}: {d.reason}" + (f" ({d.hint})" if d.hint else "")


TOOLS = {"send_money": send_money}


def run(calls, gw: Gateway) -> list:
    """Each call the model made, dispatched by name, its answer collected."""
    return [TOOLS[c["name"]](gw, **c["arguments"]) for c in calls]


if __name__ == "__main__":
    bundle, world, mandate, store = sys.argv[1:5]
    # what the model asked for after reading an e-mail an attacker wrote
    calls = [
        {"name": "send_money", "arguments": {"iban": "DE44 5001 0517 5407 3249 31", "amount": "98.70", "subject": "rent"}},
        {"name": "send_money", "arguments": {"iban": "DE75 5121 0800 1245 1261 99", "amount": "98.70", "subject": "new bank"}},
    ]
    with Gateway(bundle, world, store=store, mandate=mandate) as gw:
        for line in run(calls, gw):
            print(line)
