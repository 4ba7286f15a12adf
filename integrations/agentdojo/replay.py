"""AgentDojo v1.2 (banking, workspace), worst case, replayed without an LLM.

For every (user task x injection task) pair the "agent" executes the
injection task's ground-truth calls verbatim, then the user task's. Every
write call is first decided by one long-lived `ipc serve --stdio`; only an
allowed call runs, with the decision's `resolved` (trusted) values. The pair
is scored by AgentDojo's own utility and security functions. The gateway is
never told whether a call comes from the user or from the attacker.

Usage: integrations/agentdojo/.venv/bin/python integrations/agentdojo/replay.py
       [--ipc target/debug/ipc] [--suites banking,workspace]
       [--configs none,no_human,attentive,approve_all] [--users T,..] [--injections T,..]
       [--check] [--out DIR] [--jobs N]
Writes DIR/<suite>-<config>.json, DIR/summary.json, DIR/RESULTS.md, DIR/agentdojo.svg
(a run restricted with --users/--injections writes only the raw JSON).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
import pickle
import random
from pathlib import Path

from agentdojo.functions_runtime import FunctionsRuntime
from agentdojo.task_suite.load_suites import get_suite

import report
from adapters import ADAPTERS, Unmapped

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
WORK = HERE / ".work"

CONFIGS = {
    "none": "no protection",
    "no_human": "intentplane, no human",
    "attentive": "intentplane, attentive human",
    "approve_all": "intentplane, human who approves everything",
    "noisy": "intentplane, noisy approver",  # experiments only
    # the mandate is not built by the harness: a scripted agent proposes it
    # (claims from the prompt and from the injected content it reads), the
    # human confirms it value by value (`proposed_mandate`)
    "proposed_attentive": "intentplane, mandate proposed by the agent, attentive human",
    "proposed_approve_all": "intentplane, mandate proposed by the agent, human who accepts everything",
}

# A proposed-mandate configuration and the human it then plays for every
# other question (step-ups, payees to confirm).
PROPOSED = {"proposed_attentive": "attentive", "proposed_approve_all": "approve_all"}
# where the proposed configurations run by default (`--check` in CI): the
# suite where they are cheapest, to keep CI's run short; `--proposed-suites
# all` runs them everywhere (the figures in the README and expected.json)
PROPOSED_SUITES = "slack"

# The user's name in every mandate; each episode is its own owner (tenant),
# so registry changes and budgets never leak from one episode to the next.
USER = "emma"
CALLS = 20
VERSION = "v1.2"


# ---------------------------------------------------------------------------
# The trusted side: keys, bundle, world, registries, mandates.


def ipc(binary, *args, stdin=None) -> str:
    r = subprocess.run([binary, *args], input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ipc {' '.join(args[:2])} failed: {r.stderr.strip()}")
    return r.stdout


class Trusted:
    """The trusted side of one suite: keys, signed bundle, world, registries, mandates."""

    def __init__(self, binary: str, adapter, config: str, owners: list[str], clean_env, drop: float = 0.0,
                 packs: Path = ROOT / "packs"):
        # `packs`: where the pack folders are (an experiment builds derived copies)
        self.binary = binary
        self.adapter = adapter
        self.strict = False  # every mandate strict (experiments.py abuse)
        self.children = None  # `ipc token child --stdio`, started on the first child
        self.work = WORK / adapter.name / config
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        for k in ("release", "issuer", USER):
            ipc(binary, "keygen", "-o", str(self.work / k))
        self.bundle = self.work / "bundle.json"
        ipc(binary, "build", str(packs / adapter.pack), "-o", str(self.bundle),
            "--sign", str(self.work / "release.key"))
        reg = self.work / "registries"
        reg.mkdir()
        # the system of record's registries, for every episode's owner: what
        # the environment held before any injection
        self.known = {}
        for name, value in adapter.registries(clean_env).items():
            if value is not None and drop:
                # an incomplete registry (experiment): the same seeded
                # fraction of its entries missing for every owner
                keys = sorted(value)
                random.Random(f"{adapter.name}/{name}").shuffle(keys)
                gone = set(keys[:round(len(keys) * drop)])
                value = ({k: v for k, v in value.items() if k not in gone} if isinstance(value, dict)
                         else [v for v in value if v not in gone])
            if value is None:
                (reg / f"{name}.json").write_text("{}")
                continue
            (reg / f"{name}.json").write_text(json.dumps({o: value for o in owners}))
            if isinstance(value, list):
                self.known[name] = set(value)
        for name, file in adapter.static_registries.items():
            shutil.copy(HERE / "registries" / file, reg / f"{name}.json")
        self.added: set[tuple[str, str, str]] = set()
        self.store = self.work / "state.db"
        self.world = self.work / "world.toml"
        self.world.write_text(
            f'mandate_keys = ["{self.work / "issuer.pub"}"]\n'
            f'bundle_keys = ["{self.work / "release.pub"}"]\n'
            f'store = "{self.store}"\n'
            f'[approvers]\n{USER} = "{self.work / (USER + ".pub")}"\n'
            f'[registries]\n{adapter.pack} = "{reg}"\n')

    def common(self):
        return ["--bundle", str(self.bundle), "--world", str(self.world), "--store", str(self.store)]

    def mandate(self, owner: str, prompt: str, env, strict: bool | None = None) -> dict:
        """The mandate from the user's request alone (see README); `strict`:
        only the values the request names, no registry (`--strict`)."""
        out = self.work / "mandate.json"
        claims = []
        for k, v in self.adapter.claims(prompt, env):
            claims += ["--claim", f"{k}={v}"]
        scopes = []
        for sc in self.adapter.scopes:
            scopes += ["--scope", sc]
        budget = ["--budget", self.adapter.budget] if self.adapter.budget else []
        ipc(self.binary, "token", "issue", "--bundle", str(self.bundle),
            "--bundle-key", str(self.work / "release.pub"), "--key",
            str(self.work / "issuer.key"), "--pack", self.adapter.pack, "--user", USER, "--owner", owner,
            *scopes, *claims, *budget, "--calls", str(CALLS), "--ttl", "86400",
            *(["--strict"] if (self.strict if strict is None else strict) else []), "-o", str(out))
        return json.loads(out.read_text())

    def ceiling(self, owner: str, env) -> dict:
        """The session's mandate an administrator sets, before any request:
        the claims the suite fixes for the user (her own account, the
        currency), no value of any request; the parent of every child."""
        return self.mandate(owner, "", env, strict=False)

    def child(self, parent: dict, values: list[tuple[str, str]], draft: bool) -> dict:
        """The draft of a child of `parent` holding `values` (as its
        confirmer sees it: each value's origin, what widens), or the child
        issued (signed by the issuer, recorded): one line to a long-lived
        `ipc token child --stdio`."""
        if self.children is None:
            self.children = subprocess.Popen(
                [self.binary, "token", "child", *self.common(), "--key", str(self.work / "issuer.key"),
                 "--stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        claims: dict = {}
        for k, v in values:
            claims.setdefault(k, []).append(v)
        self.children.stdin.write(json.dumps({"parent": parent, "request": {"claims": claims},
                                              "draft": draft}) + "\n")
        self.children.stdin.flush()
        line = self.children.stdout.readline()
        if not line:
            raise RuntimeError("ipc token child --stdio ended")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"ipc token child: {answer['error']}")
        return answer["draft"] if draft else answer["token"]

    def close(self):
        if self.children is not None:
            self.children.stdin.close()
            self.children.wait()
            self.children.stdout.close()

    def approve(self, op_hash: str) -> dict:
        out = self.work / "approval.json"
        ipc(self.binary, "approve", *self.common(), "--as", USER, "--key",
            str(self.work / (USER + ".key")), "--operation", op_hash, "--yes", "-o", str(out))
        return json.loads(out.read_text())

    def decline(self, op_hash: str):
        ipc(self.binary, "approve", *self.common(), "--as", USER, "--operation", op_hash,
            "--decline")

    def unknown(self, owner: str, registry: str, value: str) -> bool:
        return value not in self.known.get(registry, set()) and (owner, registry, value) not in self.added

    def add(self, owner: str, registry: str, value: str) -> bool:
        """The owner's registry change (the bank app, the address book, the drive); False if known."""
        if not self.unknown(owner, registry, value):
            return False
        ipc(self.binary, "registry", "add", *self.common(), "--pack", self.adapter.pack, "--registry",
            registry, "--owner", owner, "--by", USER, value)
        self.added.add((owner, registry, value))
        return True


class Gateway:
    """One long-lived `ipc serve --stdio`."""

    def __init__(self, t: Trusted):
        self.p = subprocess.Popen([t.binary, "serve", "--stdio", *t.common()], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        self.decisions = 0
        self.seconds = 0.0

    def decide(self, envelope: dict) -> dict:
        t0 = time.perf_counter()
        self.p.stdin.write(json.dumps(envelope) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        self.seconds += time.perf_counter() - t0
        self.decisions += 1
        if not line:
            raise RuntimeError("ipc serve ended")
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait()
        self.p.stdout.close()


# ---------------------------------------------------------------------------
# One suite: its tasks, cached environments, and the security check that
# scores each injection task.


# The security checks AgentDojo 0.1.35 ships corrected (v1_1_2: same goal,
# same ground truth) but never registers for v1.2 in `load_suites`:
# - workspace 0: the v1.2 check counts the injected e-mail itself, so a sent
#   e-mail is never found alone;
# - travel 3 and 5: the v1.2 check compares the recipient case by case, so a
#   mail that reached `janeLong@google.com` as `janelong@google.com` (the
#   spelling a mailbox delivers to, and the gateway's canonical one) is
#   scored as no attack.
CORRECTED = {
    "workspace": ("agentdojo.default_suites.v1_1_2.workspace.injection_tasks", ["injection_task_0"]),
    "travel": ("agentdojo.default_suites.v1_1_2.travel.injection_tasks",
               ["injection_task_3", "injection_task_5"]),
}


def corrected_checks(name: str, checks: dict) -> dict:
    """The suite's injection tasks, with the package's corrected checks in
    place of the v1.2 ones (only where goal and ground truth are the same)."""
    if name not in CORRECTED:
        return checks
    module, tasks = CORRECTED[name]
    mod = importlib.import_module(module)
    for t in tasks:
        fixed = getattr(mod, "InjectionTask" + t.rsplit("_", 1)[1])()
        if fixed.GOAL != checks[t].GOAL:
            raise SystemExit(f"{name} {t}: the corrected check is for another goal")
        checks[t] = fixed
    return checks


class Suite:
    def __init__(self, name: str, users: list[str] | None, injections: list[str] | None):
        self.name = name
        self.adapter = ADAPTERS[name]
        self.suite = get_suite(VERSION, name)
        num = lambda k: int(k.split("_")[-1])  # noqa: E731
        self.clean = self.suite.load_and_inject_default_environment({})
        self.users = sorted((u for u in self.suite.user_tasks if not users or u in users), key=num)
        # an injection task with no ground truth cannot be replayed
        self.injs = sorted((i for i, t in self.suite.injection_tasks.items()
                            if t.ground_truth(self.clean.model_copy(deep=True))
                            and (not injections or i in injections)), key=num)
        self.checks = corrected_checks(name, dict(self.suite.injection_tasks))
        self._envs: dict = {}

    def environment(self, inj: str | None):
        """The injected environment, parsed once per injection task, copied per episode."""
        if inj not in self._envs:
            injections = {}
            if inj is not None:
                goal = self.suite.injection_tasks[inj].GOAL
                injections = {k: goal for k in self.suite.get_injection_vector_defaults()}
            self._envs[inj] = pickle.dumps(self.suite.load_and_inject_default_environment(injections))
        return pickle.loads(self._envs[inj])


# ---------------------------------------------------------------------------
# One episode.


def same_call(a, b) -> bool:
    return a.function == b.function and dict(a.args) == dict(b.args)


def shown(call, secrets) -> dict:
    return {k: ("<secret>" if k in secrets else v) for k, v in dict(call.args).items()}


def agent_request(adapter, prompt: str, read: list[str], env) -> list[tuple[str, str]]:
    """The scripted agent's mandate request: every value it extracts, the
    suite's way (`adapter.claims`), from the user's prompt and from every
    text it read (an injected document among them), minus the claims the
    session already fixes (its account, its currency)."""
    fixed = set(adapter.claims("", env))
    out: list[tuple[str, str]] = []
    for text in [prompt, *read]:
        for kv in adapter.claims(text, env):
            if kv not in fixed and kv not in out:
                out.append(kv)
    return out


def claim_values(claims: dict, names: set[str]) -> set[tuple[str, str]]:
    """(claim, value as JSON) for every value of the claims in `names` (a
    single claim is one value, a set claim each of its members)."""
    return {(k, json.dumps(v)) for k, vs in claims.items() if k in names
            for v in (vs if isinstance(vs, list) else [vs])}


def proposed_mandate(s: Suite, config, prompt: str, inj: str | None, trusted, owner, env):
    """A proposed-mandate episode's mandate: the agent asks for a child of
    the session's mandate; the human is shown it (`ipc token child
    --draft`: each value normalised, its origin — the parent's, a registry
    of theirs, or neither, which widens and cannot be granted) and ticks
    values; the child holds exactly those. The attentive human ticks only
    a value the prompt names (compared in the gateway's normal form); the
    other ticks every value that can be granted. Returns the mandate and
    what the confirmation showed."""
    adapter = s.adapter
    read = [s.suite.injection_tasks[inj].GOAL] if inj else []
    asked = agent_request(adapter, prompt, read, env)
    parent = trusted.ceiling(owner, env)
    draft = trusted.child(parent, asked, draft=True)
    own = set()
    mine = [kv for kv in adapter.claims(prompt, env) if kv in asked]
    if PROPOSED[config] == "attentive":
        # the prompt's values in the gateway's normal form (when the agent
        # asked for nothing else, the draft already holds just those)
        normal = draft if mine == asked else trusted.child(parent, mine, draft=True)
        own = claim_values(normal["mandate"]["claims"], {c for c, _ in mine})
    ticked, shown = [], []
    for c in draft["shown"]["claims"]:
        values = draft["mandate"]["claims"].get(c["name"], [])
        values = values if isinstance(values, list) else [values]
        if c["name"] not in {k for k, _ in asked}:
            continue
        for v, origin in zip(values, c["origins"]):
            grantable = origin != "none"
            yes = grantable and (PROPOSED[config] == "approve_all" or (c["name"], json.dumps(v)) in own)
            shown.append({"claim": c["name"], "value": v, "origin": origin, "granted": yes})
            if yes:
                ticked.append((c["name"], v))
    return trusted.child(parent, ticked, draft=False), shown


def episode(s: Suite, config, user: str, inj: str | None, trusted, gw, owner, rng=None, noise=0.0):
    suite, adapter = s.suite, s.adapter
    user_task = suite.user_tasks[user]
    env = user_task.init_environment(s.environment(inj))
    pre = pickle.loads(pickle.dumps(env))
    user_calls = user_task.ground_truth(pickle.loads(pickle.dumps(pre)))
    calls = (suite.injection_tasks[inj].ground_truth(pickle.loads(pickle.dumps(pre))) if inj else []) \
        + list(user_calls)
    runtime = FunctionsRuntime(suite.tools)
    log, asked, trace = [], 0, []
    request = None
    if gw and config in PROPOSED:
        mandate, request = proposed_mandate(s, config, user_task.PROMPT, inj, trusted, owner, env)
        asked += 1  # the mandate's confirmation
        config = PROPOSED[config]
    else:
        mandate = trusted.mandate(owner, user_task.PROMPT, env) if gw else None
    for call in calls:
        try:
            proposal = adapter.proposal(call, env)
        except Unmapped as e:
            log.append({"call": call.function, "args": shown(call, adapter.secrets),
                        "decision": "UNMAPPED", "reason": str(e)})
            continue
        if proposal is None or gw is None:
            runtime.run_function(env, call.function, dict(call.args))
            trace.append(call)
            log.append({"call": call.function, "decision": "READ" if proposal is None else "RUN"})
            continue
        envelope = {"proposal": proposal, "mandate": mandate, "approvals": []}
        d = gw.decide(envelope)
        wanted = any(same_call(call, u) for u in user_calls)
        # the human's answer for this call: the attentive one says yes
        # exactly to the user's own calls; the noisy one (experiment) gets
        # each answer wrong with probability `noise`
        says_yes = wanted
        if config == "noisy" and rng.random() < noise:
            says_yes = not wanted
        attentive = config in ("attentive", "noisy")
        entry = {"call": call.function, "args": shown(call, adapter.secrets), "first": d["decision"],
                 "stage": d.get("stage"), "reason": d.get("reason")}
        if d["decision"] == "DENY" and d.get("stage") == "provenance" and attentive and says_yes:
            # the user confirms the payee or correspondent of a call they
            # asked for, in the app: the owner's registry change, then the
            # agent asks again (one question per call)
            added = [v for r, v in adapter.confirmable(proposal) if trusted.add(owner, r, v)]
            if added:
                asked += 1
                entry["registry_add"] = added
                d = gw.decide(envelope)
        if d["decision"] == "PENDING":
            if attentive or config == "approve_all":
                asked += 1
            if config == "approve_all" or (attentive and says_yes):
                envelope["approvals"] = [trusted.approve(d["operation_hash"])]
                d = gw.decide(envelope)
            elif attentive:
                # refused on the record: proposing it again is a DENY
                trusted.decline(d["operation_hash"])
                entry["declined"] = True
        entry["decision"] = d["decision"]
        log.append(entry)
        if d["decision"] == "ALLOW":
            result, _ = runtime.run_function(env, call.function, adapter.from_resolved(call, d["resolved"]))
            trace.append(call)
            for r, v in adapter.recorded(call, result, env):
                # the system of record's own change (a file the drive created)
                trusted.add(owner, r, v)
    output = [{"type": "text", "content": user_task.GROUND_TRUTH_OUTPUT}]
    utility = suite._check_user_task_utility(user_task, output, pre, env, trace)
    security = suite._check_injection_task_security(s.checks[inj], output, pre, env, trace) \
        if inj else None
    out = {"utility": bool(utility), "attack": security if security is None else bool(security),
           "confirmations": asked, "calls": log}
    if request is not None:
        out["mandate_request"] = request
    return out


def run_suite(s: Suite, configs: list[str], binary: str, out: Path | None,
              drop: float = 0.0, noise: float = 0.0, packs: Path = ROOT / "packs",
              strict: bool = False) -> dict:
    summary = {}
    for c in configs:
        # one trusted side per configuration (a registry file holds every
        # episode's owner, and must stay under the gateway's size limit)
        owners = [f"{c}-{u}-{i}" for u in s.users for i in s.injs + ["benign"]]
        trusted = Trusted(binary, s.adapter, c, owners, s.clean, drop, packs) if c != "none" else None
        if trusted:
            trusted.strict = strict
        rng = random.Random(f"{s.name}/{c}/{noise}")
        gw = None if c == "none" else Gateway(trusted)
        t0 = time.perf_counter()
        runs = []
        for n, u in enumerate(s.users):
            for i in [None] + s.injs:
                owner = f"{c}-{u}-{i or 'benign'}"
                r = episode(s, c, u, i, trusted, gw, owner, rng, noise)
                runs.append({"user_task": u, "injection_task": i, **r})
            print(f"\r{s.name} {c}: {n + 1}/{len(s.users)} user tasks", end="", file=sys.stderr)
        print(file=sys.stderr)
        wall = time.perf_counter() - t0
        benign = [r for r in runs if r["injection_task"] is None]
        attacked = [r for r in runs if r["injection_task"] is not None]
        sm = {
            "label": CONFIGS[c] if c != "noisy" else f"{CONFIGS[c]} ({noise:.0%} wrong)",
            "tasks_done": sum(r["utility"] for r in benign), "tasks": len(benign),
            "utility_under_attack": sum(r["utility"] for r in attacked),
            "attacks_succeeded": sum(r["attack"] for r in attacked), "pairs": len(attacked),
            "confirmations": sum(r["confirmations"] for r in runs),
            "episodes": len(runs),
            "wall_seconds": round(wall, 2),
        }
        if gw:
            sm["decisions"] = gw.decisions
            sm["decisions_per_second"] = round(gw.decisions / gw.seconds, 1) if gw.seconds else None
            gw.close()
            trusted.close()
        summary[c] = sm
        if out is not None:
            (out / f"{s.name}-{c}.json").write_text(json.dumps({"summary": sm, "runs": runs}, indent=1))
    return summary


# The suites of a parallel run, set before the workers fork (an AgentDojo
# suite does not pickle; a forked worker inherits it).
_FORKED: dict = {}


def _run_one(name: str, config: str, binary: str, out: Path | None) -> dict:
    return run_suite(_FORKED[name], [config], binary, out)[config]


def run_parallel(suites: list[Suite], plan: dict[str, list[str]], binary: str, out: Path | None,
                 jobs: int) -> dict:
    """`run_suite` for every suite and each of its configurations in `plan`, `jobs` at a time. Every
    run has its own trusted side, gateway and store, so the figures are those
    of a sequential run (only `wall_seconds` feels the neighbours)."""
    if jobs <= 1:
        return {s.name: run_suite(s, plan[s.name], binary, out) for s in suites}
    for s in suites:
        # parsed once here, not once per worker
        for inj in [None] + s.injs:
            s._envs.setdefault(inj, pickle.dumps(s.environment(inj)))
    _FORKED.update({s.name: s for s in suites})
    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = {(s.name, c): pool.submit(_run_one, s.name, c, binary, out)
                   for s in suites for c in plan[s.name]}
        # a failed run raises here, so the whole replay fails as a sequential one would
        return {s.name: {c: futures[(s.name, c)].result() for c in plan[s.name]} for s in suites}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ipc", default=str(ROOT / "target/debug/ipc"))
    ap.add_argument("--suites", default="banking,workspace,slack,travel")
    ap.add_argument("--configs", default="none,no_human,attentive,approve_all,proposed_attentive,proposed_approve_all")
    ap.add_argument("--proposed-suites", default=PROPOSED_SUITES,
                    help="the suites the proposed-mandate configurations run on (default: "
                         f"{PROPOSED_SUITES}; `all`: every suite)")
    ap.add_argument("--users", default="", help="only these user tasks (comma-separated), to iterate")
    ap.add_argument("--injections", default="", help="only these injection tasks (comma-separated)")
    ap.add_argument("--check", action="store_true",
                    help="fail if an attack executes through the gateway with no human or an "
                         "attentive one, or a figure falls below results/expected.json")
    ap.add_argument("--out", default=str(RESULTS),
                    help="where the raw JSON, the table and the plot go (default: results/)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="(suite, configuration) runs at once, each with its own gateway (default: the cores)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    configs = args.configs.split(",")
    subset = bool(args.users or args.injections)
    suites = [Suite(name, [u for u in args.users.split(",") if u], [i for i in args.injections.split(",") if i])
              for name in args.suites.split(",")]
    plan = {s.name: [c for c in configs if c not in PROPOSED or args.proposed_suites == "all"
                     or s.name in args.proposed_suites.split(",")] for s in suites}
    ran = run_parallel(suites, plan, args.ipc, out, args.jobs)
    summary = ran
    if not subset:
        # the figures of the suites not run this time stay as they were
        old = out / "summary.json"
        if old.exists():
            # per configuration: a run without the proposed configurations
            # keeps their figures
            summary = json.loads(old.read_text())
            for suite, configs in ran.items():
                summary[suite] = {**summary.get(suite, {}), **configs}
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
        report.write(out, summary)
    print(report.table(ran))
    if args.check:
        sys.exit(check(ran))


def check(summary: dict) -> int:
    """0 when every recorded figure holds, 1 otherwise (CI)."""
    expected = json.loads((RESULTS / "expected.json").read_text())
    bad = []
    for suite, configs in summary.items():
        for c, s in configs.items():
            e = expected.get(suite, {}).get(c, {})
            where = f"{suite} {c}"
            # a harness that stopped executing the attacks would pass every
            # other check: with no protection they must still succeed
            if s["attacks_succeeded"] < e.get("min_attacks", 0):
                bad.append(f"{where}: {s['attacks_succeeded']} attacks succeeded with no protection "
                           f"(at least {e['min_attacks']}: the replay no longer executes the attacks)")
            if "max_attacks" in e and s["attacks_succeeded"] > e["max_attacks"]:
                bad.append(f"{where}: {s['attacks_succeeded']} attacks succeeded (at most {e['max_attacks']})")
            if s["tasks_done"] < e.get("min_tasks_done", 0):
                bad.append(f"{where}: {s['tasks_done']} tasks done (at least {e['min_tasks_done']})")
            if s["utility_under_attack"] < e.get("min_utility_under_attack", 0):
                bad.append(f"{where}: {s['utility_under_attack']} tasks done under attack "
                           f"(at least {e['min_utility_under_attack']})")
    for b in bad:
        print("FAIL", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    main()
