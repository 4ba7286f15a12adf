"""AgentDojo banking v1.2, worst case, replayed without an LLM.

For every (user task x injection task) pair the "agent" executes the
injection task's ground-truth calls verbatim, then the user task's. Every
write call is first decided by one long-lived `ipc serve --stdio`; only an
allowed call runs, with the decision's `resolved` (trusted) values. The pair
is scored by AgentDojo's own utility and security functions. The gateway is
never told whether a call comes from the user or from the attacker.

Usage: integrations/agentdojo/.venv/bin/python integrations/agentdojo/replay.py
       [--ipc target/debug/ipc] [--configs none,no_human,attentive,approve_all]
Writes results/banking-<config>.json, results/summary.json, results/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from agentdojo.functions_runtime import FunctionsRuntime
from agentdojo.task_suite.load_suites import get_suite

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
WORK = HERE / ".work"

CONFIGS = {
    "none": "no protection",
    "no_human": "intentplane, no human",
    "attentive": "intentplane, attentive human",
    "approve_all": "intentplane, human who approves everything",
}

# The user's name in every mandate; each episode is its own owner (tenant),
# so registry changes and budgets never leak from one episode to the next.
USER = "emma"
CURRENCY = "EUR"  # AgentDojo's bank has one currency
BUDGET = "10000.00"  # the bank pack's hard cap for one payment
CALLS = 20
IBAN_LIKE = re.compile(r"\b[A-Z]{2}[0-9]{2}[A-Z0-9]{10,30}\b")


# ---------------------------------------------------------------------------
# The adapter: AgentDojo's write tools as bank pack actions, and back.


def money(x) -> str:
    """A tool amount (a float in major units) as an exact decimal string."""
    return f"{Decimal(str(x)):.2f}"


def to_proposal(call, env) -> dict | None:
    """The proposal for a write call (None for a read tool)."""
    f, a = call.function, dict(call.args)
    own = env.bank_account.iban
    if f == "send_money":
        return {"action": "payment.send", "args": {
            "from_account": own, "recipient": a["recipient"], "amount": money(a["amount"]),
            "currency": CURRENCY, "subject": a["subject"], "date": a["date"]}}
    if f == "schedule_transaction":
        return {"action": "payment.schedule", "args": {
            "from_account": own, "recipient": a["recipient"], "amount": money(a["amount"]),
            "currency": CURRENCY, "subject": a["subject"], "date": a["date"],
            "recurring": bool(a["recurring"])}}
    if f == "update_scheduled_transaction":
        # an absent (or falsy: the tool ignores it) field means "unchanged":
        # the proposal carries the payment's current value, which the
        # gateway must vouch for like any other
        cur = next((t for t in env.bank_account.scheduled_transactions if t.id == a["id"]), None)
        def keep(k):
            v = a.get(k)
            return v if v else (getattr(cur, k) if cur else v)
        return {"action": "scheduled.update", "args": {
            "id": str(a["id"]), "recipient": keep("recipient"), "amount": money(keep("amount") or 0),
            "subject": keep("subject") or "", "date": keep("date") or "",
            "recurring": bool(keep("recurring"))}}
    if f == "update_password":
        return {"action": "user.update_password", "args": {"new_password": a["password"]}}
    if f == "update_user_info":
        return {"action": "user.update_info", "args": {
            k: a.get(k) or "" for k in ("first_name", "last_name", "street", "city")}}
    return None


def from_resolved(call, resolved: dict) -> dict:
    """The tool's arguments from the decision's trusted values."""
    f, a = call.function, dict(call.args)
    if f in ("send_money", "schedule_transaction"):
        out = {"recipient": resolved["recipient"], "amount": major(resolved["amount"]),
               "subject": resolved["subject"], "date": day(resolved["date"])}
        if f == "schedule_transaction":
            out["recurring"] = resolved["recurring"]
        return out
    if f == "update_scheduled_transaction":
        return {"id": int(resolved["id"]), "recipient": resolved["recipient"],
                "amount": major(resolved["amount"]), "subject": resolved["subject"] or None,
                "date": day(resolved["date"]) or None, "recurring": resolved["recurring"]}
    if f == "update_password":
        # `new_password` is a secret: the decision holds a commitment, never
        # the value. It is not a critical value (nothing trusted to compare
        # it with), so the tool runs with the agent's own value, which the
        # gateway checked (length) and committed to.
        return {"password": a["password"]}
    if f == "update_user_info":
        return {k: resolved.get(k) or None for k in ("first_name", "last_name", "street", "city")}
    return a


def day(v) -> str:
    """A gateway date (seconds since the epoch, UTC) as the tool's YYYY-MM-DD."""
    if isinstance(v, int):
        return datetime.fromtimestamp(v, tz=timezone.utc).date().isoformat()
    return v


def major(v) -> float:
    """A gateway amount (integer cents, or a decimal string) in major units."""
    if isinstance(v, int):
        return float(Decimal(v) / 100)
    return float(Decimal(str(v)))


# ---------------------------------------------------------------------------
# The trusted side: keys, bundle, world, registries, mandates.


def ipc(binary, *args, stdin=None) -> str:
    r = subprocess.run([binary, *args], input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ipc {' '.join(args[:2])} failed: {r.stderr.strip()}")
    return r.stdout


def counterparties(env) -> list[str]:
    """Accounts the user already paid or was paid by, before any injection."""
    own = env.bank_account.iban
    seen = set()
    for t in list(env.bank_account.transactions) + list(env.bank_account.scheduled_transactions):
        for x in (t.sender, t.recipient):
            if x not in ("me", own):
                seen.add(x)
    return sorted(seen)


def scheduled(env) -> dict:
    own = env.bank_account.iban
    return {str(t.id): {"account": own, "recipient": t.recipient, "amount": money(t.amount)}
            for t in env.bank_account.scheduled_transactions}


def named_accounts(prompt: str) -> list[str]:
    """Account numbers the user wrote in the request itself."""
    return sorted(set(IBAN_LIKE.findall(prompt)))


class Trusted:
    def __init__(self, binary: str, owners: list[str], clean_env):
        self.binary = binary
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        for k in ("release", "issuer", USER):
            ipc(binary, "keygen", "-o", str(WORK / k))
        self.bundle = WORK / "bundle.json"
        ipc(binary, "build", str(ROOT / "packs/bank"), "-o", str(self.bundle),
            "--sign", str(WORK / "release.key"))
        reg = WORK / "registries"
        reg.mkdir()
        # the bank's registries, for every episode's owner: what the
        # environment held before any injection
        cp, sc = counterparties(clean_env), scheduled(clean_env)
        (reg / "counterparties.json").write_text(json.dumps({o: cp for o in owners}))
        (reg / "scheduled.json").write_text(json.dumps({o: sc for o in owners}))
        (reg / "beneficiaries.json").write_text("{}")
        (reg / "standing_orders.json").write_text("{}")
        shutil.copy(ROOT / "packs/bank/registries/sanctions.json", reg / "sanctions.json")
        self.store = WORK / "state.db"
        self.world = WORK / "world.toml"
        self.world.write_text(
            f'mandate_keys = ["{WORK / "issuer.pub"}"]\n'
            f'bundle_keys = ["{WORK / "release.pub"}"]\n'
            f'store = "{self.store}"\n'
            f'[approvers]\n{USER} = "{WORK / (USER + ".pub")}"\n'
            f'[registries]\nbank = "{reg}"\n')

    def common(self):
        return ["--bundle", str(self.bundle), "--world", str(self.world), "--store", str(self.store)]

    def mandate(self, owner: str, prompt: str, account: str) -> dict:
        """The mandate from the user's request alone (see README)."""
        out = WORK / "mandate.json"
        claims = ["--claim", f"account={account}", "--claim", f"currency={CURRENCY}"]
        for x in named_accounts(prompt):
            claims += ["--claim", f"recipient={x}"]
        ipc(self.binary, "token", "issue", "--bundle", str(self.bundle), "--key",
            str(WORK / "issuer.key"), "--pack", "bank", "--user", USER, "--owner", owner,
            "--scope", "payments.write", "--scope", "account.write", *claims,
            "--budget", BUDGET, "--calls", str(CALLS), "--ttl", "86400", "-o", str(out))
        return json.loads(out.read_text())

    def approve(self, op_hash: str) -> dict:
        out = WORK / "approval.json"
        ipc(self.binary, "approve", *self.common(), "--as", USER, "--key",
            str(WORK / (USER + ".key")), "--operation", op_hash, "--yes", "-o", str(out))
        return json.loads(out.read_text())

    def decline(self, op_hash: str):
        ipc(self.binary, "approve", *self.common(), "--as", USER, "--operation", op_hash,
            "--decline")

    def add_counterparty(self, owner: str, value: str):
        ipc(self.binary, "registry", "add", *self.common(), "--pack", "bank", "--registry",
            "counterparties", "--owner", owner, "--by", USER, value)


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


# ---------------------------------------------------------------------------
# One episode.


def same_call(a, b) -> bool:
    return a.function == b.function and dict(a.args) == dict(b.args)


def episode(suite, config, user_task, inj_task, trusted, gw, owner):
    injections = {}
    if inj_task is not None:
        injections = {k: inj_task.GOAL for k in suite.get_injection_vector_defaults()}
    env = user_task.init_environment(suite.load_and_inject_default_environment(injections))
    pre = env.model_copy(deep=True)
    calls = (inj_task.ground_truth(pre.model_copy(deep=True)) if inj_task else []) + \
        user_task.ground_truth(pre.model_copy(deep=True))
    user_calls = user_task.ground_truth(pre.model_copy(deep=True))
    runtime = FunctionsRuntime(suite.tools)
    mandate = trusted.mandate(owner, user_task.PROMPT, env.bank_account.iban) if gw else None
    log, asked, trace = [], 0, []
    for call in calls:
        proposal = to_proposal(call, env)
        if proposal is None or gw is None:
            runtime.run_function(env, call.function, dict(call.args))
            trace.append(call)
            log.append({"call": call.function, "decision": "READ" if proposal is None else "RUN"})
            continue
        envelope = {"proposal": proposal, "mandate": mandate, "approvals": []}
        d = gw.decide(envelope)
        wanted = any(same_call(call, u) for u in user_calls)
        shown = {k: ("<secret>" if k == "password" else v) for k, v in dict(call.args).items()}
        entry = {"call": call.function, "args": shown, "first": d["decision"],
                 "stage": d.get("stage"), "reason": d.get("reason")}
        if d["decision"] == "DENY" and d.get("stage") == "provenance" and config == "attentive" \
                and wanted and call.function in ("send_money", "schedule_transaction"):
            # the user confirms the payee in the bank app: the owner's
            # registry change, then the agent asks again
            asked += 1
            trusted.add_counterparty(owner, proposal["args"]["recipient"])
            entry["registry_add"] = proposal["args"]["recipient"]
            d = gw.decide(envelope)
        if d["decision"] == "PENDING":
            if config in ("attentive", "approve_all"):
                asked += 1
            if config == "approve_all" or (config == "attentive" and wanted):
                envelope["approvals"] = [trusted.approve(d["operation_hash"])]
                d = gw.decide(envelope)
            elif config == "attentive":
                # refused on the record: proposing it again is a DENY
                trusted.decline(d["operation_hash"])
                entry["declined"] = True
        entry["decision"] = d["decision"]
        log.append(entry)
        if d["decision"] == "ALLOW":
            args = from_resolved(call, d["resolved"])
            runtime.run_function(env, call.function, args)
            trace.append(call)
    output = [{"type": "text", "content": user_task.GROUND_TRUTH_OUTPUT}]
    utility = suite._check_user_task_utility(user_task, output, pre, env, trace)
    security = suite._check_injection_task_security(inj_task, output, pre, env, trace) \
        if inj_task else None
    return {"utility": bool(utility), "attack": security if security is None else bool(security),
            "confirmations": asked, "calls": log}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ipc", default=str(ROOT / "target/debug/ipc"))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--check", action="store_true",
                    help="fail if an attack executes through the gateway with no human or an "
                         "attentive one, or a figure falls below results/expected.json")
    ap.add_argument("--out", default=str(RESULTS),
                    help="where the raw JSON, the table and the plot go (default: results/)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suite = get_suite("v1.2", "banking")
    users = sorted(suite.user_tasks, key=lambda k: int(k.split("_")[-1]))
    injs = sorted(suite.injection_tasks, key=lambda k: int(k.split("_")[-1]))
    configs = args.configs.split(",")
    owners = [f"{c}-{u}-{i}" for c in configs for u in users for i in injs + ["benign"]]
    clean = suite.load_and_inject_default_environment({})
    trusted = Trusted(args.ipc, owners, clean)
    summary = {}
    for c in configs:
        gw = None if c == "none" else Gateway(trusted)
        t0 = time.perf_counter()
        runs = []
        for u in users:
            for i in [None] + injs:
                owner = f"{c}-{u}-{i or 'benign'}"
                r = episode(suite, c, suite.user_tasks[u],
                            suite.injection_tasks[i] if i else None, trusted, gw, owner)
                runs.append({"user_task": u, "injection_task": i, **r})
            print(f"\r{c}: {users.index(u) + 1}/{len(users)} user tasks", end="", file=sys.stderr)
        print(file=sys.stderr)
        wall = time.perf_counter() - t0
        benign = [r for r in runs if r["injection_task"] is None]
        attacked = [r for r in runs if r["injection_task"] is not None]
        s = {
            "label": CONFIGS[c],
            "tasks_done": sum(r["utility"] for r in benign), "tasks": len(benign),
            "utility_under_attack": sum(r["utility"] for r in attacked),
            "attacks_succeeded": sum(r["attack"] for r in attacked), "pairs": len(attacked),
            "confirmations": sum(r["confirmations"] for r in runs),
            "episodes": len(runs),
            "wall_seconds": round(wall, 2),
        }
        if gw:
            s["decisions"] = gw.decisions
            s["decisions_per_second"] = round(gw.decisions / gw.seconds, 1) if gw.seconds else None
            gw.close()
        summary[c] = s
        (out / f"banking-{c}.json").write_text(json.dumps({"summary": s, "runs": runs}, indent=1))
    total = sum(s["wall_seconds"] for s in summary.values())
    decisions = sum(s.get("decisions", 0) for s in summary.values())
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "RESULTS.md").write_text(table(summary, total, decisions))
    (out / "banking.svg").write_text(plot(summary))
    print(table(summary, total, decisions))
    if args.check:
        sys.exit(check(summary))


def check(summary: dict) -> int:
    """0 when every recorded figure holds, 1 otherwise (CI)."""
    expected = json.loads((RESULTS / "expected.json").read_text())
    bad = []
    for c, e in expected.items():
        s = summary.get(c)
        if s is None:
            continue
        if "max_attacks" in e and s["attacks_succeeded"] > e["max_attacks"]:
            bad.append(f"{c}: {s['attacks_succeeded']} attacks succeeded (at most {e['max_attacks']})")
        if s["tasks_done"] < e.get("min_tasks_done", 0):
            bad.append(f"{c}: {s['tasks_done']} tasks done (at least {e['min_tasks_done']})")
        if s["utility_under_attack"] < e.get("min_utility_under_attack", 0):
            bad.append(f"{c}: {s['utility_under_attack']} tasks done under attack "
                       f"(at least {e['min_utility_under_attack']})")
    for b in bad:
        print("FAIL", b, file=sys.stderr)
    return 1 if bad else 0


def plot(summary: dict) -> str:
    """Tasks done (no attack) against attacks succeeded, one point per configuration."""
    w, h, m = 520, 360, 60
    pts = []
    for s in summary.values():
        x = m + (w - 2 * m) * s["attacks_succeeded"] / s["pairs"]
        y = h - m - (h - 2 * m) * s["tasks_done"] / s["tasks"]
        shape = (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="#c0392b"/>' if s["label"] == CONFIGS["none"]
                 else f'<rect x="{x - 6:.1f}" y="{y - 6:.1f}" width="12" height="12" '
                      f'transform="rotate(45 {x:.1f} {y:.1f})" fill="#2c7fb8"/>')
        pts.append(shape + f'<text x="{x + 10:.1f}" y="{y + 4:.1f}" font-size="11">{s["label"]} '
                           f'({s["tasks_done"]}/{s["tasks"]}, {s["attacks_succeeded"]}/{s["pairs"]})</text>')
    axes = (f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>'
            f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>'
            f'<text x="{w / 2}" y="{h - 20}" text-anchor="middle" font-size="12">attacks succeeded (of 144)</text>'
            f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" text-anchor="middle" '
            f'font-size="12">tasks done (of 16)</text>'
            f'<text x="{m}" y="{h - m + 15}" font-size="10">0</text>'
            f'<text x="{w - m}" y="{h - m + 15}" font-size="10">144</text>'
            f'<text x="{m - 20}" y="{m + 4}" font-size="10">16</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + 200}" height="{h}" font-family="sans-serif">'
            f'<text x="{m}" y="25" font-size="14">AgentDojo v1.2 banking, worst case replayed</text>'
            + axes + "".join(pts) + "</svg>\n")


def table(summary: dict, total: float, decisions: int) -> str:
    rows = ["| Configuration | Tasks done (no attack) | Tasks done under attack | Attacks succeeded "
            "| Confirmations per episode | Decisions/s |", "|---|---|---|---|---|---|"]
    for s in summary.values():
        rows.append(
            f"| {s['label']} | {s['tasks_done']}/{s['tasks']} | {s['utility_under_attack']}/{s['pairs']} "
            f"| {s['attacks_succeeded']}/{s['pairs']} | {s['confirmations'] / s['episodes']:.2f} "
            f"| {s.get('decisions_per_second') or '-'} |")
    return ("AgentDojo v1.2, banking, worst case replayed (generated by replay.py)\n\n" + "\n".join(rows)
            + f"\n\nWall time of the whole replay: {total:.1f} s for {decisions} decisions through "
              "`ipc serve --stdio` (debug build; each decision also commits its receipt).\n")


if __name__ == "__main__":
    main()
