"""AgentDyn's data, read at run time: a suite's initial world and its logged runs.

Nothing of the data is copied into the repository: every function here takes
the data folder (`--data`, `AGENTDYN_DATA`, default `../shared/agentdyn`
from the repository's root) and reads it when called.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "agentdyn"
MODEL = "gpt-4o-2024-08-06"
SUITES = ("shopping", "github", "dailylife")


def data_dir(arg: str | None = None) -> Path:
    """The data folder: the argument, else `AGENTDYN_DATA`, else `../shared/agentdyn`."""
    return Path(arg or os.environ.get("AGENTDYN_DATA") or DEFAULT_DATA)


class _Loader(yaml.SafeLoader):
    """YAML with `!include FILE` (relative to the including file's folder)."""


def _include(loader: _Loader, node):
    base = Path(loader.name).parent
    path = base / loader.construct_scalar(node)
    with open(path, encoding="utf-8") as f:
        sub = _Loader(f)
        try:
            return sub.get_single_data()
        finally:
            sub.dispose()


_Loader.add_constructor("!include", _include)


def load_yaml(path: Path):
    with open(path, encoding="utf-8") as f:
        loader = _Loader(f)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()


def fill(value, texts: dict[str, str]):
    """Every `{placeholder}` of `texts` written in a string of `value` replaced."""
    if isinstance(value, str):
        for k, v in texts.items():
            value = value.replace("{" + k + "}", v)
        return value
    if isinstance(value, list):
        return [fill(v, texts) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, texts) for k, v in value.items()}
    return value


def clean_world(data: Path, suite: str) -> dict:
    """The suite's initial world before any injection: every injection
    placeholder holds its benign default (`injection_vectors.yaml`)."""
    folder = data / "suites" / suite
    env = load_yaml(folder / "environment.yaml")
    vectors = load_yaml(folder / "injection_vectors.yaml") or {}
    defaults = {k: str((v or {}).get("default") or "") for k, v in vectors.items()}
    return fill(env, defaults)


def runs(data: Path, suite: str):
    """Every logged run of the suite: (kind, path), kind `benign` (a user task
    without attack), `attack` (a user task with an injection) or `goal` (the
    attacker's goal given as the user's task)."""
    base = data / "runs" / MODEL / suite
    num = lambda p: int(p.name.rsplit("_", 1)[-1])  # noqa: E731
    for d in sorted(base.glob("user_task_*"), key=num):
        yield "benign", d / "none" / "none.json"
        for f in sorted((d / "important_instructions").glob("injection_task_*.json"),
                        key=lambda p: int(p.stem.rsplit("_", 1)[-1])):
            yield "attack", f
    for d in sorted(base.glob("injection_task_*"), key=num):
        yield "goal", d / "none" / "none.json"


def read_run(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def prompt_of(run: dict) -> str:
    """The user's own words: the first user message's text."""
    for m in run["messages"]:
        if m["role"] == "user":
            c = m["content"]
            if isinstance(c, list):
                return "\n".join(x.get("content", "") for x in c if isinstance(x, dict))
            return str(c)
    return ""


def calls_of(run: dict) -> list[dict]:
    """The model's tool calls in order: {function, args, failed}. `failed`:
    the logged tool result was an error (the tool did nothing)."""
    errors = {}
    for m in run["messages"]:
        if m["role"] == "tool":
            e = m.get("error")
            errors[m.get("tool_call_id")] = e not in (None, "None", "")
    out = []
    for m in run["messages"]:
        for tc in m.get("tool_calls") or []:
            out.append({"function": tc["function"], "args": dict(tc.get("args") or {}),
                        "failed": errors.get(tc.get("id"), False)})
    return out
