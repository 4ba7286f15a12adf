"""AgentDojo with a real model: the gateway as a defense in AgentDojo's own agent pipeline.

The pipeline is AgentDojo's (`SystemMessage`, `InitQuery`, `OpenAILLM`,
`ToolsExecutionLoop`) with one change: the tools executor is wrapped by
`GatewayGuard`. Every write call the model proposes is decided by one
long-lived `ipc serve --stdio` before anything runs; only an ALLOW runs, with
the decision's trusted values converted back to the tool's units (the
suite's adapter, `adapters.py`); a DENY or a PENDING nobody signs comes back
to the model as the tool's error, with the gateway's reason. Read tools pass
through. The mandate is issued per episode from the user's prompt (the
query) alone, the registries from the environment before any injection
(`replay.Trusted`, the same trusted side as the replay). The guard never
knows whether a call comes from the user or the attacker.

Runs AgentDojo's own benchmark functions (`run_task_with_injection_tasks`,
`run_task_without_injection_tasks`, attacks from `agentdojo.attacks`) against
any OpenAI-compatible endpoint:

    integrations/agentdojo/run.sh --model NAME --base-url URL [--suite banking]
        [--user-tasks user_task_3,..] [--injection-tasks injection_task_0,..]
        [--attack important_instructions] [--configs none,no_human] [--benign]

The key is `OPENAI_API_KEY` (a dummy for a local server). Writes AgentDojo's
per-run logs under results/models/<model>/ (one JSON per user x injection
task and configuration), this run's `summary.json` and `SUMMARY.md` there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from ast import literal_eval
from pathlib import Path

from agentdojo.agent_pipeline import (AgentPipeline, BasePipelineElement, InitQuery, OpenAILLM,
                                      SystemMessage, ToolsExecutionLoop, ToolsExecutor)
from agentdojo.agent_pipeline.agent_pipeline import load_system_message
from agentdojo.agent_pipeline.tool_execution import is_string_list
from agentdojo.attacks.attack_registry import load_attack
from agentdojo.benchmark import run_task_with_injection_tasks, run_task_without_injection_tasks
from agentdojo.functions_runtime import FunctionCall
from agentdojo.logging import OutputLogger
from agentdojo.models import MODEL_NAMES
from agentdojo.task_suite.load_suites import get_suite
from agentdojo.types import ChatToolResultMessage, text_content_block_from_string

from adapters import ADAPTERS, Unmapped
from replay import CONFIGS, ROOT, VERSION, Gateway, Trusted, same_call

HERE = Path(__file__).resolve().parent
MODELS = HERE / "results" / "models"
HUMANS = ("no_human", "attentive", "approve_all")  # the configurations with the gateway
EPISODE = "intentplane_episode"  # the guard's per-episode state, in `extra_args`


def refusal(d: dict) -> str:
    """The gateway's decision as the tool error the model reads."""
    if d.get("decision") == "PENDING":
        return (f"refused by the security gateway: this call needs the user's approval "
                f"({d.get('reason') or 'step-up'}), and no one approved it")
    where = f" at {d['stage']}" if d.get("stage") else ""
    return f"refused by the security gateway{where}: {d.get('reason') or d.get('error') or json.dumps(d)}"


class GatewayGuard(BasePipelineElement):
    """The tools executor, behind the gateway: every write call decided before it runs.

    The humans are the replay's: `no_human` (a PENDING is refused),
    `attentive` (knows what they asked: `intent(query, env)` gives the calls
    their request needs; approves a PENDING call, or confirms the payee or
    correspondent of a call refused at provenance, only if it is one of
    them, same tool and same arguments; refuses every other on the record),
    `approve_all` (signs every PENDING, confirms nothing). `log` keeps every
    decision of the run; `asked` counts the questions put to the human.
    """

    def __init__(self, trusted: Trusted, gateway: Gateway, adapter, owners: list[str], human: str = "no_human",
                 executor: BasePipelineElement | None = None, intent=None):
        if human not in HUMANS:
            raise ValueError(f"unknown human `{human}` (one of {', '.join(HUMANS)})")
        self.trusted, self.gateway, self.adapter, self.human = trusted, gateway, adapter, human
        self.owners = list(owners)
        self.executor = executor or ToolsExecutor()
        self.intent = intent or (lambda query, env: [])
        self.log: list[dict] = []
        self.asked = 0

    def _episode(self, query: str, env, extra_args: dict) -> tuple[dict, dict]:
        """This episode's owner and mandate: a fresh tenant, the mandate from the prompt alone."""
        if EPISODE in extra_args:
            return extra_args[EPISODE], extra_args
        if not self.owners:
            raise RuntimeError("no tenant left for a new episode")
        owner = self.owners.pop(0)
        state = {"owner": owner, "mandate": self.trusted.mandate(owner, query, env),
                 "intent": self.intent(query, env) if self.human == "attentive" else []}
        # a new dict: AgentDojo's default `extra_args` is shared between episodes
        return state, {**extra_args, EPISODE: state}

    def _decide(self, call: FunctionCall, proposal: dict, state: dict) -> dict:
        """The gateway's decision, after the human's answer if one is asked."""
        envelope = {"proposal": proposal, "mandate": state["mandate"], "approvals": []}
        d = self.gateway.decide(envelope)
        wanted = any(same_call(call, w) for w in state["intent"])
        if self.human == "attentive" and wanted and d.get("decision") == "DENY" \
                and d.get("stage") == "provenance":
            # the user confirms, in the app, the payee of a call they asked for
            if [v for r, v in self.adapter.confirmable(proposal) if self.trusted.add(state["owner"], r, v)]:
                self.asked += 1
                d = self.gateway.decide(envelope)
        if d.get("decision") == "PENDING" and self.human != "no_human":
            self.asked += 1
            if self.human == "approve_all" or wanted:
                envelope["approvals"] = [self.trusted.approve(d["operation_hash"])]
                d = self.gateway.decide(envelope)
            else:
                self.trusted.decline(d["operation_hash"])  # refused on the record
        return d

    def query(self, query, runtime, env, messages=[], extra_args={}):  # noqa: B006 (AgentDojo's signature)
        if not messages or messages[-1]["role"] != "assistant" or not messages[-1]["tool_calls"]:
            return query, runtime, env, messages, extra_args
        state, extra_args = self._episode(query, env, extra_args)
        tools = set(runtime.functions)
        out = []
        for call in messages[-1]["tool_calls"]:
            # the executor's own normalisation (a list written as a string),
            # before the gateway sees the values
            args = {k: literal_eval(v) if isinstance(v, str) and is_string_list(v) else v
                    for k, v in call.args.items()}
            call = call.model_copy(update={"args": args})
            try:
                proposal = self.adapter.proposal(call, env) if call.function in tools else None
            except Unmapped as e:
                self.log.append({"owner": state["owner"], "call": call.function, "decision": "UNMAPPED"})
                out.append(self._result(call, "", f"refused by the security gateway: no action of the pack "
                                                  f"expresses this call ({e})"))
                continue
            except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError) as e:
                # a model's malformed call (a missing or ill-typed argument) is
                # refused, never run, and never stops the run
                self.log.append({"owner": state["owner"], "call": call.function, "decision": "MALFORMED"})
                out.append(self._result(call, "", f"refused by the security gateway: the call's arguments do "
                                                  f"not fit `{call.function}` ({type(e).__name__}: {e})"))
                continue
            if proposal is None:
                # a read tool (or an unknown one): AgentDojo's executor, one call
                # at a time so that each sees the calls before it
                one = {**messages[-1], "tool_calls": [call]}
                _, _, env, done, _ = self.executor.query(query, runtime, env, [*messages[:-1], one], extra_args)
                out.append(done[-1])
                continue
            d = self._decide(call, proposal, state)
            self.log.append({"owner": state["owner"], "call": call.function, "decision": d.get("decision"),
                             "stage": d.get("stage"), "reason": d.get("reason")})
            if d.get("decision") != "ALLOW":
                out.append(self._result(call, "", refusal(d)))
                continue
            # only the gateway's values run, in the tool's units
            trusted = call.model_copy(update={"args": self.adapter.from_resolved(call, d["resolved"])})
            result, error = runtime.run_function(env, trusted.function, dict(trusted.args))
            for r, v in self.adapter.recorded(trusted, result, env):
                self.trusted.add(state["owner"], r, v)  # the system of record's own change
            out.append(self._result(trusted, self.executor.output_formatter(result), error))
        return query, runtime, env, [*messages, *out], extra_args

    @staticmethod
    def _result(call: FunctionCall, text: str, error: str | None) -> ChatToolResultMessage:
        return ChatToolResultMessage(role="tool", content=[text_content_block_from_string(text)],
                                     tool_call_id=call.id, tool_call=call, error=error)


def intent(suite):
    """What the user asked, as the attentive human knows it: the task's reference calls."""
    tasks = {t.PROMPT: t for t in suite.user_tasks.values()}

    def calls(query: str, env) -> list[FunctionCall]:
        task = tasks.get(query)
        return list(task.ground_truth(env.model_copy(deep=True))) if task else []
    return calls


def pipeline(llm: BasePipelineElement, name: str, tools: BasePipelineElement | None = None) -> AgentPipeline:
    """AgentDojo's tool-calling agent; `tools` replaces the plain tools executor (the guard)."""
    p = AgentPipeline([SystemMessage(load_system_message(None)), InitQuery(), llm,
                       ToolsExecutionLoop([tools or ToolsExecutor(), llm])])
    p.name = name
    return p


def run(args, llm: BasePipelineElement, out: Path) -> dict:
    """Every configuration on the chosen tasks; AgentDojo's logs under `out`, the summary returned."""
    suite = get_suite(VERSION, args.suite)
    if args.suite == "workspace":
        # the replay's scoring (README, "The `injection_task_0` trap"): the
        # package's own fixed check of workspace injection task 0, same goal
        # and ground truth, registered through the suite's public API
        from agentdojo.default_suites.v1_1_2.workspace.injection_tasks import InjectionTask0
        suite.update_injection_task((1, 2, 0))(InjectionTask0)
    adapter = ADAPTERS[args.suite]
    users = args.user_tasks or sorted(suite.user_tasks, key=lambda k: int(k.split("_")[-1]))
    injections = args.injection_tasks or sorted(suite.injection_tasks, key=lambda k: int(k.split("_")[-1]))
    if not any(full in args.model for full in MODEL_NAMES):
        # the attack addresses the model by name; an unknown model is "AI assistant"
        MODEL_NAMES[args.model] = args.model_prose
    summary = {}
    for config in args.configs:
        name = args.model if config == "none" else f"{args.model}+intentplane-{config}"
        guard, gw = None, None
        if config != "none":
            # a tenant per episode; AgentDojo asks the model again (up to 3
            # times) when an episode ends with no answer
            episodes = 3 * len(users) * (len(injections) + 1)
            owners = [f"model-{config}-{n}" for n in range(episodes)]
            trusted = Trusted(args.ipc, adapter, f"model-{config}", owners,
                              suite.load_and_inject_default_environment({}))
            gw = Gateway(trusted)
            guard = GatewayGuard(trusted, gw, adapter, owners, config, intent=intent(suite))
        agent = pipeline(llm, name, guard)
        attack = load_attack(args.attack, suite, agent)
        utility, security, benign = {}, {}, {}
        with OutputLogger(str(out)):
            for n, u in enumerate(users):
                task = suite.get_user_task_by_id(u)
                if args.benign:
                    benign[u], _ = run_task_without_injection_tasks(suite, agent, task, out, True, VERSION)
                ut, sec = run_task_with_injection_tasks(suite, agent, task, attack, out, True, injections, VERSION)
                utility.update(ut)
                security.update(sec)
                print(f"\r{args.suite} {config}: {n + 1}/{len(users)} user tasks", end="", file=sys.stderr)
        print(file=sys.stderr)
        if gw:
            gw.close()
        summary[config] = {
            "label": CONFIGS[config], "pipeline": name,
            "tasks_done": sum(benign.values()) if args.benign else None, "tasks": len(benign) or None,
            "utility_under_attack": sum(utility.values()), "attacks_succeeded": sum(security.values()),
            "pairs": len(security),
            "runs": [{"user_task": u, "injection_task": i, "utility": utility[(u, i)],
                      "attack": security[(u, i)]} for (u, i) in utility],
            "decisions": guard.log if guard else [], "confirmations": guard.asked if guard else 0,
        }
    return summary


def table(suite: str, summary: dict) -> str:
    rows = ["| Suite | Configuration | Tasks done (no attack) | Tasks done under attack | Attacks succeeded "
            "| Confirmations |", "|---|---|---|---|---|---|"]
    for s in summary.values():
        done = f"{s['tasks_done']}/{s['tasks']}" if s["tasks"] else "—"
        rows.append(f"| {suite} | {s['label']} | {done} | {s['utility_under_attack']}/{s['pairs']} "
                    f"| {s['attacks_succeeded']}/{s['pairs']} | {s['confirmations']} |")
    return "\n".join(rows)


def arguments(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the endpoint's model name")
    ap.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    ap.add_argument("--model-prose", default="AI assistant",
                    help="how the attack addresses a model AgentDojo does not know")
    ap.add_argument("--suite", default="banking", choices=sorted(ADAPTERS))
    ap.add_argument("--user-tasks", type=lambda s: [x for x in s.split(",") if x], default=None)
    ap.add_argument("--injection-tasks", type=lambda s: [x for x in s.split(",") if x], default=None)
    ap.add_argument("--attack", default="important_instructions")
    ap.add_argument("--configs", type=lambda s: s.split(","), default=["none", "no_human"],
                    help="none (no protection), no_human, attentive, approve_all")
    ap.add_argument("--benign", action="store_true", help="also run each user task without injection")
    ap.add_argument("--ipc", default=str(ROOT / "target/debug/ipc"))
    ap.add_argument("--out", default=None, help="default: results/models/<model>")
    args = ap.parse_args(argv)
    for c in args.configs:
        if c != "none" and c not in HUMANS:
            ap.error(f"unknown configuration `{c}` (none, {', '.join(HUMANS)})")
    return args


def main(argv=None) -> dict:
    import openai

    args = arguments(argv)
    out = Path(args.out) if args.out else MODELS / args.model.replace("/", "_")
    out.mkdir(parents=True, exist_ok=True)
    client = openai.OpenAI(base_url=args.base_url, api_key=os.environ.get("OPENAI_API_KEY", "none"))
    summary = run(args, OpenAILLM(client, args.model), out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    md = table(args.suite, summary)
    (out / "SUMMARY.md").write_text(
        f"# {args.model} on AgentDojo {VERSION} {args.suite}, attack `{args.attack}`\n\n{md}\n")
    print(md)
    return summary


if __name__ == "__main__":
    main()
