"""A scripted stand-in for a model: an OpenAI chat-completions endpoint replaying a fixed conversation.

No model is reachable from the machines the harness is tested on, so the
test of the pipeline (`test_pipeline.py`) talks to this server instead,
through AgentDojo's own `OpenAILLM` and the `openai` client. The script is a
JSON file:

    {"model": "...", "turns": [
      {"expect": "text the last message must contain", "tool_calls": [{"name": "f", "arguments": {...}}]},
      {"content": "the final answer"}]}

The reply to a request is turn n, where n is the number of assistant messages
the request already holds: a conversation starts over whenever the client
starts one (each episode, each configuration), and the server keeps no state
between requests but the log of what it was sent (`requests`). A turn's
`expect` (optional) must be in the last message the model was sent (the tool
output carrying an injection, the gateway's refusal), or the server answers
400: a conversation that went another way fails instead of replaying blindly.

Standard library only. Run alone: `python standin.py SCRIPT [--port N]`
prints the base URL (`http://127.0.0.1:N/v1`).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def text_of(message: dict) -> str:
    """A chat message's text: a string, or the text parts of a list."""
    c = message.get("content")
    if isinstance(c, list):
        return "\n".join(p.get("text", "") for p in c if isinstance(p, dict))
    return c or ""


def reply(script: dict, messages: list[dict]) -> tuple[int, dict]:
    """The scripted turn for a conversation so far: (HTTP status, body)."""
    turns = script["turns"]
    n = sum(1 for m in messages if m.get("role") == "assistant")
    if n >= len(turns):
        return 400, {"error": {"message": f"the script has {len(turns)} turns, asked for turn {n + 1}",
                               "type": "invalid_request_error", "code": "script_ended"}}
    turn = turns[n]
    last = text_of(messages[-1]) if messages else ""
    if turn.get("expect") and turn["expect"] not in last:
        return 400, {"error": {"message": f"turn {n + 1} expects `{turn['expect']}` in the last message, "
                                          f"which was: {last[:500]}",
                               "type": "invalid_request_error", "code": "script_mismatch"}}
    calls = [{"id": f"call_{n}_{k}", "type": "function",
              "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
             for k, c in enumerate(turn.get("tool_calls", []))]
    message = {"role": "assistant", "content": turn.get("content")}
    if calls:
        message["tool_calls"] = calls
    return 200, {"id": f"chatcmpl-standin-{n}", "object": "chat.completion", "created": int(time.time()),
                 "model": script.get("model", "standin"),
                 "choices": [{"index": 0, "message": message, "logprobs": None,
                              "finish_reason": "tool_calls" if calls else "stop"}],
                 "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}


class StandIn(ThreadingHTTPServer):
    """The server: a script, and every request body it received."""

    daemon_threads = True

    def __init__(self, script: dict, port: int = 0):
        super().__init__(("127.0.0.1", port), Handler)
        self.script = script
        self.requests: list[dict] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def start(self) -> "StandIn":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def _send(self, status: int, body: dict):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [
                {"id": self.server.script.get("model", "standin"), "object": "model", "owned_by": "standin"}]})
        else:
            self._send(404, {"error": {"message": f"no route `{self.path}`"}})

    def do_POST(self):  # noqa: N802
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route `{self.path}`"}})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            messages = list(body["messages"])
        except (ValueError, KeyError, TypeError) as e:
            self._send(400, {"error": {"message": f"not a chat-completions request: {e}"}})
            return
        with self.server.lock:
            self.server.requests.append(body)
        self._send(*reply(self.server.script, messages))

    def log_message(self, format, *args):  # noqa: A002 (quiet)
        pass


def main():
    ap = argparse.ArgumentParser(description="a scripted OpenAI-compatible endpoint")
    ap.add_argument("script", type=Path)
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args()
    server = StandIn(json.loads(args.script.read_text()), args.port)
    print(server.base_url, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
