"""A remote MCP server for the tests of `ipc mcp` with a `url` downstream:
the official Python SDK's `MCPServer` over Streamable HTTP (uvicorn), with
the demo server's `read_inbox` and `send_money`, behind a bearer token,
optionally over TLS.

    python remote_server.py --state F --token-file T [--cert C --key K]

Prints `listening on PORT` once it accepts connections (the port is picked
by the system). Every call that reaches a tool is appended to the state
file (JSON: `{"calls": [{"tool", "args", "authorization"}]}`), so the
tests assert on what the server actually received and with which token.
"""

import argparse
import json
import pathlib
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

parser = argparse.ArgumentParser()
parser.add_argument("--state", required=True)
parser.add_argument("--token-file", required=True)
parser.add_argument("--cert")
parser.add_argument("--key")
opts = parser.parse_args()

STATE = pathlib.Path(opts.state)
TOKEN = pathlib.Path(opts.token_file).read_text().strip()
seen = {"authorization": None}


def record(tool, args):
    state = json.loads(STATE.read_text()) if STATE.exists() else {"calls": []}
    state["calls"].append({"tool": tool, "args": args, "authorization": seen["authorization"]})
    STATE.write_text(json.dumps(state))


server = MCPServer("remote-test-server")


@server.tool(description="Read the user's e-mail inbox", annotations=ToolAnnotations(readOnlyHint=True))
def read_inbox() -> str:
    record("read_inbox", {})
    return "1 message: the landlord's rent reminder"


@server.tool(description="Send money from the user's account")
def send_money(from_account: str, recipient: str, amount: float, currency: str, subject: str = "") -> str:
    args = {"from_account": from_account, "recipient": recipient, "amount": amount, "currency": currency}
    if subject:
        args["subject"] = subject
    record("send_money", args)
    return f"sent {amount} {currency} to {recipient}"


app = server.streamable_http_app(host="127.0.0.1")


async def guarded(scope, receive, send):
    """The bearer token on every request, else a 401 (as a real remote
    server would answer)."""
    if scope["type"] == "http":
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization", b"").decode()
        if auth != f"Bearer {TOKEN}":
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"www-authenticate", b"Bearer"), (b"content-type", b"text/plain")],
                }
            )
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        seen["authorization"] = auth
    await app(scope, receive, send)


sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
config = uvicorn.Config(
    guarded,
    log_level="warning",
    ssl_certfile=opts.cert,
    ssl_keyfile=opts.key,
    lifespan="on",
)
srv = uvicorn.Server(config)


async def main():
    # the lifespan of the SDK's app starts its session manager
    async def announce():
        import asyncio

        while not srv.started:
            await asyncio.sleep(0.01)
        print(f"listening on {port}", flush=True)

    import asyncio

    await asyncio.gather(srv.serve(sockets=[sock]), announce())


if __name__ == "__main__":
    import asyncio

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
