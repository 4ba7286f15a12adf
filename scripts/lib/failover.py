"""The failover test and benchmark of scripts/test-failover and
scripts/bench-failover: `ipc serve --listen` instances on a primary and a
synchronous standby (scripts/pg-ha, pg_auto_failover), clients sending
proposals while the primary is killed, then checks read from the surviving
node. Python 3.11, standard library only; every file it writes lives in the
temporary folders it creates (removed at the end, unless KEEP=1).

    python3 scripts/lib/failover.py test  IPC   (scripts/test-failover)
    SHARDS=2 python3 scripts/lib/failover.py test IPC   (two shards: A on
                                              the HA pair, B on a plain cluster)
    python3 scripts/lib/failover.py bench IPC   (scripts/bench-failover)

Exit status 0 when every check holds; the report on stdout.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PG_HA = str(ROOT / "scripts" / "pg-ha")
PG_CLUSTER = str(ROOT / "scripts" / "pg-cluster")
LANDLORD = "DE44500105175407324931"
# the longest an instance may take to answer again after a kill (the
# measured windows are a few seconds to about 15; see docs/high-availability.md)
RECOVERY_BOUND = float(os.environ.get("RECOVERY_BOUND", "60"))
# SHARDS=2: the tenants of shard A (on the HA pair, killed) and of shard B
# (on a plain cluster, never touched)
SHARD_TENANTS = {"A": ("t1", "t2"), "B": ("t3", "t4")}
# the longest B's tenants may go unanswered, at one instance, while A is
# failing over (see B_GAP_BOUND in test(); docs/high-availability.md)
B_GAP_BOUND = float(os.environ.get("B_GAP_BOUND", "1.0"))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(*args: str, cwd: Path | None = None, check: bool = True) -> str:
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True, errors="replace")
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return p.stdout


class Cluster:
    """scripts/pg-ha on a folder of its own (outside the work folder: the
    servers' owner must reach it)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="ipc-ha.", dir="/tmp")
        os.rmdir(self.dir)
        self.url = ""

    def start(self) -> str:
        self.url = run(PG_HA, "start", self.dir).strip()
        return self.url

    def stop(self) -> None:
        run(PG_HA, "stop", self.dir, check=False)

    def primary(self) -> str:
        return run(PG_HA, "primary", self.dir).strip()

    def port(self, node: str) -> int:
        for line in Path(self.dir, "nodes").read_text().splitlines():
            name, port = line.split()
            if name == node:
                return int(port)
        raise KeyError(node)

    def node_url(self, node: str) -> str:
        user = self.url.split("://", 1)[1].split("@", 1)[0]
        return f"postgres://{user}@127.0.0.1:{self.port(node)}/ipc"

    def wait(self, secs: int = 120) -> None:
        run(PG_HA, "wait", self.dir, str(secs))

    def __getattr__(self, name: str):
        # kill_postmaster, kill_node, run, async_, sync
        verb = name.rstrip("_").replace("_", "-")
        return lambda *a: run(PG_HA, verb, self.dir, *a)


class Plain:
    """scripts/pg-cluster: one PostgreSQL, no standby (shard B)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="ipc-plain.", dir="/tmp")
        os.rmdir(self.dir)
        self.url = ""

    def start(self) -> str:
        server = run(PG_CLUSTER, "start", self.dir).strip()
        run("psql", "-X", "-q", server, "-c", "CREATE DATABASE ipc")
        self.url = server.rsplit("/", 1)[0] + "/ipc"
        return self.url

    def stop(self) -> None:
        run(PG_CLUSTER, "stop", self.dir, check=False)


@dataclass
class Instance:
    proc: subprocess.Popen
    addr: str
    acks: list[float] = field(default_factory=list)
    failed: list[float] = field(default_factory=list)
    # by shard (SHARDS=2): "A" or "B"
    acks_by: dict[str, list[float]] = field(default_factory=dict)
    failed_by: dict[str, list[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Setup:
    """A bundle (packs/bank, signed), the world, the mandates and the
    agent host's token, in a work folder. With `shards` (shard name to
    store URL; SHARDS=2), the world maps the tenants of SHARD_TENANTS to
    their shards, each tenant given emma's payees in a registry folder of
    its own, and each tenant has its `main` and `small` mandates
    (`t1/main`, ...); without, the one tenant emma's are `main` and
    `small`."""

    def __init__(self, ipc: str, work: Path, shards: dict[str, str] | None = None) -> None:
        self.ipc, self.work = ipc, work
        w = lambda *a: run(ipc, *a, cwd=work)  # noqa: E731
        for k in ("release", "issuer", "emma"):
            w("keygen", "-o", k)
        w("build", str(ROOT / "packs" / "bank"), "-o", "bundle.json", "--sign", "release.key")
        regs = ROOT / "packs" / "bank" / "registries"
        owners: dict[str, str] = {"emma": ""}
        if shards:
            owners = {t: k for k, ts in SHARD_TENANTS.items() for t in ts}
            # the bank's registries, every tenant with emma's payees
            regs = work / "regs"
            shutil.copytree(ROOT / "packs" / "bank" / "registries", regs)
            ben = json.loads((regs / "beneficiaries.json").read_text())
            ben.update({t: ben["emma"] for t in owners})
            (regs / "beneficiaries.json").write_text(json.dumps(ben, indent=2))
        world = ('mandate_keys = ["issuer.pub"]\nbundle_keys = ["release.pub"]\n'
                 '[approvers]\nemma = "emma.pub"\n'
                 f'[registries]\nbank = "{regs}"\n')
        if shards:
            world += "[store.shards]\n" + "".join(f'{t} = "{shards[k]}"\n' for t, k in owners.items())
        (work / "world.toml").write_text(world)
        self.shard_of = owners  # tenant -> shard ("" without shards)
        self.mandates = {}
        for owner in owners:
            for name, budget, calls in (("main", "10000000.00", "1000000"), ("small", "100.00", "1000")):
                key = f"{owner}/{name}" if shards else name
                w("token", "issue", "--bundle", "bundle.json", "--world", "world.toml", "--key", "issuer.key",
                  "--pack", "bank", "--user", owner, "--scope", "payments.write",
                  "--claim", "account=emma-checking", "--claim", "currency=EUR",
                  "--budget", budget, "--calls", calls, "--ttl", "3600", "-o", f"{key.replace('/', '-')}.json")
                self.mandates[key] = json.loads((work / f"{key.replace('/', '-')}.json").read_text())
        if shards:
            w("shards", "init", "--world", "world.toml")
        # the agent host's token, bound to the tenants
        self.token = os.urandom(18).hex()
        tokens = work / "tokens"
        tokens.write_text(f"{self.token} {','.join(owners)}\n")
        tokens.chmod(0o600)

    def small_ids(self, shard: str = "") -> list[str]:
        """The ids of the small mandates of the tenants of `shard`."""
        return [m["mandate"]["id"] for k, m in self.mandates.items()
                if k.endswith("small") and self.shard_of[k.split("/")[0] if "/" in k else "emma"] == shard]

    def serve(self, store: str | None, i: int) -> Instance:
        """An instance on `store`, or (None) on the world's shards."""
        err = open(self.work / f"serve{i}.log", "w")
        p = subprocess.Popen(
            [self.ipc, "serve", "--bundle", "bundle.json", "--world", "world.toml",
             *(["--store", store] if store else []),
             "--listen", "127.0.0.1:0", "--auth-token-file", "tokens"],
            cwd=self.work, stdout=subprocess.PIPE, stderr=err, text=True)
        line = p.stdout.readline() if p.stdout else ""
        if not line.startswith("listening on http://"):
            p.wait(10)
            tail = (self.work / f"serve{i}.log").read_text()[:3000]
            raise RuntimeError(f"instance {i} did not start: {line!r}:\n{tail}")
        return Instance(p, line.strip().removeprefix("listening on http://").rstrip("/"))

    def body(self, mandate: str, amount: str) -> bytes:
        return json.dumps({
            "mandate": self.mandates[mandate],
            "proposal": {"action": "payment.transfer", "args": {
                "from_account": "emma-checking", "payee_iban": LANDLORD,
                "amount": amount, "currency": "EUR"}},
        }).encode()


@dataclass
class Answer:
    kind: str
    key: tuple
    instance: int
    sent: float
    answered: float
    attempts: int
    decision: dict
    shard: str = ""


class Client(threading.Thread):
    """Sends proposals to one instance until told to stop; a request that
    fails (no answer, an HTTP error: nothing decided) is sent again, the
    same, until it is answered with a receipt."""

    counter = itertools.count()
    small = itertools.count(1)
    step = itertools.count(1)

    def __init__(self, n: int, setup: Setup, inst: Instance, idx: int, out: list, failures: list,
                 stop: threading.Event, kinds: tuple[str, ...], tenant: str | None = None) -> None:
        super().__init__(daemon=True)
        self.n, self.setup, self.inst, self.idx = n, setup, inst, idx
        # SHARDS=2: the tenant whose mandates it uses, and its shard
        self.prefix = f"{tenant}/" if tenant else ""
        self.shard = setup.shard_of[tenant] if tenant else ""
        self.out, self.failures, self.stop, self.kinds = out, failures, stop, kinds
        self.conn: http.client.HTTPConnection | None = None
        self.rng = random.Random(n)
        self.mine: list[tuple] = []

    def post(self, body: bytes) -> tuple[int, dict]:
        if self.conn is None:
            host, port = self.inst.addr.rsplit(":", 1)
            self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            self.conn.request("POST", "/v1/decide", body, {
                "Authorization": f"Bearer {self.setup.token}", "Content-Type": "application/json"})
            r = self.conn.getresponse()
            data = r.read()
            return r.status, json.loads(data or b"{}")
        except Exception:
            self.conn.close()
            self.conn = None
            raise

    def next_request(self) -> tuple[str, tuple]:
        kind = self.rng.choice(self.kinds)
        if kind == "duplicate" and not self.mine:
            kind = "new"
        main, small = self.prefix + "main", self.prefix + "small"
        if kind == "new":
            c = next(Client.counter)
            return kind, (main, f"{c // 100 + 1}.{c % 100:02d}")
        if kind == "duplicate":
            return kind, self.rng.choice(self.mine)
        if kind == "over-budget":
            c = next(Client.small)
            return kind, (small, f"{30 + c // 100}.{c % 100:02d}")
        c = next(Client.step)
        return kind, (main, f"{1500 + c // 100}.{c % 100:02d}")

    def run(self) -> None:
        while not self.stop.is_set():
            kind, key = self.next_request()
            body = self.setup.body(*key)
            sent = time.time()
            attempts = 0
            while True:
                attempts += 1
                try:
                    status, d = self.post(body)
                except Exception as e:  # noqa: BLE001 (a connection lost: send again)
                    status, d = 0, {"error": str(e)}
                if status == 200 and d.get("receipt"):
                    now = time.time()
                    self.out.append(Answer(kind, key, self.idx, sent, now, attempts, d, self.shard))
                    with self.inst.lock:
                        self.inst.acks.append(now)
                        self.inst.acks_by.setdefault(self.shard, []).append(now)
                    if kind == "new" and d["decision"] == "ALLOW":
                        self.mine.append(key)
                    break
                now = time.time()
                self.failures.append((now, self.idx, kind, status, str(d)[:300], self.shard))
                with self.inst.lock:
                    self.inst.failed.append(now)
                    self.inst.failed_by.setdefault(self.shard, []).append(now)
                if time.time() - sent > 180:
                    raise RuntimeError(f"no answer for {key} in 180 s")
                time.sleep(0.1)


def gap_after(acks: list[float], t: float) -> tuple[float, float]:
    """The instance's answers around `t`: the last before it and the first
    after the longest silence that starts at or after the last answer
    before `t`."""
    acks = sorted(acks)
    before = [a for a in acks if a <= t]
    after = [a for a in acks if a > t]
    last = before[-1] if before else t
    if not after:
        return last, float("inf")
    # the first answer after the instance's longest silence from `t` on
    seq = [last] + after
    i = max(range(len(seq) - 1), key=lambda k: seq[k + 1] - seq[k])
    return seq[i], seq[i + 1]


def longest_gap(acks: list[float], start: float, end: float) -> tuple[float, int]:
    """The longest time in [`start`, `end`] without an answer, counted from
    the last answer at or before `start` and up to `end`; and how many
    answers came in between."""
    acks = sorted(acks)
    before = [a for a in acks if a <= start]
    inside = [a for a in acks if start < a <= end]
    seq = [before[-1] if before else start] + inside + [end]
    return max(b - a for a, b in zip(seq, seq[1:])), len(inside)


def psql_rows(url: str, sql: str) -> list[str]:
    return run("psql", "-X", "-At", url, "-c", sql).splitlines()


def cents(amount) -> int:
    if isinstance(amount, int):
        return amount  # minor units
    whole, _, frac = amount.partition(".")
    return int(whole) * 100 + int((frac + "00")[:2])


def check(setup: Setup, url: str, answers: list[Answer], shard: str = "") -> list[str]:
    """The checks, from the store at `url` (the surviving node), of the
    answers of `shard`'s tenants (SHARDS=2; each problem then names it)."""
    mine = [a for a in answers if a.shard == shard]
    return [f"shard {shard}: {p}" if shard else p for p in check_store(setup, url, mine, shard)]


def check_store(setup: Setup, url: str, answers: list[Answer], shard: str) -> list[str]:
    problems = []
    receipts = {}
    for line in psql_rows(url, "SELECT json_build_object('seq', seq, 'hash', hash, 'body', body::json) FROM ipc_receipts ORDER BY seq"):
        r = json.loads(line)
        receipts[r["seq"]] = r
    # every acknowledged answer's receipt, the same
    for a in answers:
        ref = a.decision["receipt"]
        r = receipts.get(ref["seq"])
        if r is None:
            problems.append(f"acknowledged receipt {ref['seq']} missing ({a.kind} {a.key})")
        elif r["hash"] != ref["hash"]:
            problems.append(f"receipt {ref['seq']}: hash {r['hash']} in the store, {ref['hash']} answered")
        elif r["body"]["decision"] != a.decision["decision"]:
            problems.append(f"receipt {ref['seq']}: {r['body']['decision']} in the store, {a.decision['decision']} answered")
    # no operation executed twice: one first ALLOW per operation hash
    first: dict[str, int] = {}
    for seq, r in receipts.items():
        b = r["body"]
        if b.get("decision") == "ALLOW" and not b.get("replayed"):
            op = b.get("operation_hash")
            if op in first:
                problems.append(f"operation {op} executed twice: receipts {first[op]} and {seq}")
            first[op] = seq
    executions = int(psql_rows(url, "SELECT count(*) FROM ipc_executions")[0])
    if executions != len(first):
        problems.append(f"{executions} executions recorded, {len(first)} ALLOW receipts that executed")
    # and no operation answered twice as executed (an ALLOW that is not a
    # replay): a second one means its first execution was lost
    executed_answers: dict[str, int] = {}
    for a in answers:
        d = a.decision
        if d["decision"] == "ALLOW" and not d.get("replayed"):
            op = d["operation_hash"]
            executed_answers[op] = executed_answers.get(op, 0) + 1
            if executed_answers[op] == 2:
                problems.append(f"operation {op} answered twice as executed (not replayed)")
    # every ALLOW answered for an operation carries its one result
    results: dict[str, str] = {}
    for a in answers:
        d = a.decision
        if d["decision"] == "ALLOW":
            res = json.dumps(d.get("result"), sort_keys=True)
            if results.setdefault(d["operation_hash"], res) != res:
                problems.append(f"operation {d['operation_hash']} answered with two results")
    # budgets exact: what each mandate spent is the sum of its executed ALLOWs
    spent: dict[str, list[int]] = {}
    for r in receipts.values():
        b = r["body"]
        if b.get("decision") == "ALLOW" and not b.get("replayed"):
            s = spent.setdefault(b["mandate"]["id"], [0, 0])
            s[0] += cents(b["resolved"]["amount"])
            s[1] += 1
    for line in psql_rows(url, "SELECT mandate_id || ' ' || amount || ' ' || calls FROM ipc_budgets"):
        mid, amount, calls = line.split()
        want = spent.get(mid, [0, 0])
        if [int(amount), int(calls)] != want:
            problems.append(f"mandate {mid}: the store spent {amount} in {calls} calls, its receipts {want[0]} in {want[1]}")
    for small in setup.small_ids(shard):
        if spent.get(small, [0])[0] > 10000:
            problems.append(f"the small mandate {small} spent {spent[small][0]} cents of its 10000")
    verify = subprocess.run([setup.ipc, "receipts", "verify", url], capture_output=True, text=True)
    if verify.returncode != 0:
        problems.append(f"ipc receipts verify: {verify.stdout}{verify.stderr}")
    return problems


def report_failure(problems: list[str]) -> None:
    kinds: dict[str, int] = {}
    for p in problems:
        k = ("acknowledged receipt missing" if "missing" in p else
             "acknowledged receipt replaced (another hash at its sequence number)" if " answered" in p and "hash" in p else
             "executed twice" if "twice" in p else
             "budget" if "mandate" in p else p.split(":")[0])
        kinds[k] = kinds.get(k, 0) + 1
    print(f"FAILED: {len(problems)} problems: {kinds}\n  " + "\n  ".join(problems[:20]))


def summary(answers: list[Answer]) -> str:
    by: dict[str, int] = {}
    for a in answers:
        d = a.decision
        k = f"{a.kind}:{d['decision']}{'(replayed)' if d.get('replayed') else ''}"
        by[k] = by.get(k, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(by.items()))


def steady(i: Instance, now: float, shard: str = "") -> bool:
    """The instance answers again: an answer after its last failed attempt,
    and none failed for 2 s (of `shard`'s tenants, when given)."""
    with i.lock:
        acks = i.acks_by.get(shard, []) if shard else i.acks
        failed = i.failed_by.get(shard, []) if shard else i.failed
        last_ack = acks[-1] if acks else 0.0
        last_failed = failed[-1] if failed else 0.0
    return last_ack > last_failed and now - last_failed > 2


def load_round(cluster: Cluster, instances: list[Instance], what: str, kill_at: float,
               sharded: bool = False) -> dict:
    """Kills the pair's primary (`what`) and waits for every instance to
    answer again; with `sharded`, the pair is shard A's, and the round also
    measures, at each instance, shard B's longest gap between answers from
    the kill until the instance answered A's tenants again."""
    primary = cluster.primary()
    log(f"{what} the primary {primary}")
    t = time.time()
    if what == "kill -9 the postmaster of":
        cluster.kill_postmaster(primary)
    else:
        cluster.kill_node(primary)
    # every instance answering again: at least 2 s after the kill (the
    # requests in flight may still be answered), an answer after its last
    # failed attempt, and no failed attempt for 2 s
    watched = "A" if sharded else ""
    deadline = t + RECOVERY_BOUND + 30
    while time.time() < deadline:
        now = time.time()
        if now - t > 2 and all(steady(i, now, watched) for i in instances):
            break
        time.sleep(0.2)
    time.sleep(1)
    windows, b = [], []
    for i in instances:
        with i.lock:
            acks = list(i.acks_by.get("A", [])) if sharded else list(i.acks)
            b_acks = list(i.acks_by.get("B", []))
            b_failed = list(i.failed_by.get("B", []))
        last, first = gap_after(acks, t)
        windows.append((last - t, first - t))
        if sharded:
            gap, n = longest_gap(b_acks, t, min(first, time.time()))
            # the same instance's B gaps while nothing failed: the 5 s
            # before the kill
            base, _ = longest_gap(b_acks, t - 5, t)
            failed = sum(1 for f in b_failed if t <= f <= first)
            b.append({"gap": gap, "answers": n, "before": base, "failed": failed})
    return {"killed": primary, "what": what, "at": t, "windows": windows, "b": b}


def start_all(ipc: str, sharded: bool = False):
    """The HA pair, the work folder and its setup; with `sharded`, also a
    plain cluster for shard B, the pair holding shard A."""
    cluster = Cluster()
    plain = Plain() if sharded else None
    work = Path(tempfile.mkdtemp(prefix="ipc-failover."))
    try:
        t0 = time.time()
        url = cluster.start()
        log(f"pg_auto_failover up in {time.time() - t0:.1f} s: {url}")
        shards = None
        if plain:
            shards = {"A": url, "B": plain.start()}
            log(f"shard A on the pair ({', '.join(SHARD_TENANTS['A'])}), shard B on {plain.url} "
                f"({', '.join(SHARD_TENANTS['B'])})")
        setup = Setup(ipc, work, shards)
    except BaseException:
        cluster.stop()
        if plain:
            plain.stop()
        shutil.rmtree(work, ignore_errors=True)
        raise
    return cluster, work, setup, plain


def cleanup(cluster: Cluster, work: Path, instances: list[Instance], plain: Plain | None = None) -> None:
    for i in instances:
        i.proc.terminate()
    for i in instances:
        try:
            i.proc.wait(10)
        except subprocess.TimeoutExpired:
            i.proc.kill()
    if os.environ.get("KEEP"):
        log(f"kept: {work} and {cluster.dir}{f' and {plain.dir}' if plain else ''}")
        return
    cluster.stop()
    if plain:
        plain.stop()
    shutil.rmtree(work, ignore_errors=True)


def failure_kinds(failures: list) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for f in failures:
        text = f[4]
        k = ("commit unknown" if "lost during commit" in text else
             "store unreachable" if "cannot open store" in text else
             "connection" if f[3] == 0 else f"http {f[3]}")
        kinds[k] = kinds.get(k, 0) + 1
    return kinds


def test(ipc: str) -> int:
    n_instances = int(os.environ.get("INSTANCES", "3"))
    n_clients = int(os.environ.get("CLIENTS", "6"))
    n_shards = int(os.environ.get("SHARDS", "1"))
    if n_shards not in (1, 2):
        print(f"SHARDS is 1 or 2, not {n_shards}")
        return 2
    sharded = n_shards == 2
    if sharded and n_clients < 2 * n_instances:
        print(f"SHARDS=2 needs CLIENTS >= 2 x INSTANCES (a client of each shard at every instance), "
              f"not {n_clients} for {n_instances}")
        return 2
    started = time.time()
    cluster, work, setup, plain = start_all(ipc, sharded)
    instances: list[Instance] = []
    try:
        for i in range(n_instances):
            # sharded: no --store, the world's shards
            instances.append(setup.serve(None if sharded else cluster.url, i))
        if os.environ.get("ASYNC"):
            # the standby out of the write quorum: what the guarantee
            # needs is gone, and the checks may fail (docs/high-availability.md)
            cluster.async_()
            log("ASYNC: the standby is asynchronous (synchronous_standby_names empty)")
        log(f"{n_instances} instances: {', '.join(i.addr for i in instances)}; {n_clients} clients")
        answers: list[Answer] = []
        failures: list = []
        stop = threading.Event()
        kinds = ("new", "new", "new", "duplicate", "duplicate", "over-budget", "step-up")

        def tenant(c: int) -> str | None:
            # sharded: client c goes to instance c mod INSTANCES; the first
            # INSTANCES clients are shard A's, the next shard B's, and so
            # on: every instance has clients of both
            if not sharded:
                return None
            return SHARD_TENANTS["AB"[(c // n_instances) % 2]][c % 2]
        clients = [Client(c, setup, instances[c % n_instances], c % n_instances, answers, failures, stop, kinds,
                          tenant(c))
                   for c in range(n_clients)]
        if sharded:
            log("clients: " + ", ".join(f"{c.prefix.rstrip('/')}@{c.idx}" for c in clients)
                + " (tenant@instance)")
        for c in clients:
            c.start()
        time.sleep(8)
        rounds = []
        rounds.append(load_round(cluster, instances, "kill -9 the postmaster of", time.time(), sharded))
        log("waiting for the pair (the killed node rejoins as the standby)")
        cluster.wait(180)
        if os.environ.get("ASYNC"):
            cluster.async_()
        time.sleep(5 if sharded else 3)
        rounds.append(load_round(cluster, instances, "kill -9 the keeper and postgres of", time.time(), sharded))
        stop.set()
        for c in clients:
            c.join(200)
        survivor = cluster.primary()
        log(f"load over: {len(answers)} answers with a receipt, {len(failures)} failed attempts (sent again)")
        for shard in ("A", "B") if sharded else ("",):
            mine = [a for a in answers if a.shard == shard]
            log(f"{f'shard {shard}: ' if shard else ''}{summary(mine)}")
        for r in rounds:
            ws = ", ".join(f"{first:.2f} s" for _, first in r["windows"])
            log(f"{r['what']} {r['killed']}: each instance answered {'A' if sharded else ''}{' ' if sharded else ''}"
                f"again {ws} after the kill")
            if sharded:
                log("  shard B meanwhile, each instance: longest gap "
                    + ", ".join(f"{b['gap']:.3f} s ({b['answers']} answers, {b['failed']} failed)" for b in r["b"])
                    + "; in the 5 s before the kill: "
                    + ", ".join(f"{b['before']:.3f} s" for b in r["b"]))
        # what the failed attempts were answered
        for shard in ("A", "B") if sharded else ("",):
            mine = [f for f in failures if f[5] == shard]
            log(f"{f'shard {shard}: ' if shard else ''}failed attempts: {failure_kinds(mine)}")
        retried = [a for a in answers if a.attempts > 1]
        log(f"{len(retried)} requests answered after a retry: {summary(retried) or '-'}")
        url = cluster.node_url(survivor)
        log(f"checks from the surviving node {survivor}: {url}{f' and from shard B: {plain.url}' if plain else ''}")
        if plain:
            problems = check(setup, url, answers, "A") + check(setup, plain.url, answers, "B")
            sc = subprocess.run([ipc, "shards", "check", "--world", "world.toml"], cwd=work,
                                capture_output=True, text=True)
            if sc.returncode != 0:
                problems.append(f"ipc shards check: {sc.stdout}{sc.stderr}")
        else:
            problems = check(setup, url, answers)
        for r in rounds:
            for k, (_, first) in enumerate(r["windows"]):
                if first > RECOVERY_BOUND:
                    problems.append(f"instance {k} answered again {first:.1f} s after {r['what']} {r['killed']} (bound {RECOVERY_BOUND} s)")
            for k, (b, (_, first)) in enumerate(zip(r["b"], r["windows"])):
                # B kept being answered: its longest silence at the
                # instance while A was away is under B_GAP_BOUND and under
                # half of A's window there
                if b["gap"] > B_GAP_BOUND or b["gap"] > first / 2:
                    problems.append(f"instance {k} left shard B unanswered for {b['gap']:.2f} s while shard A "
                                    f"was away {first:.2f} s after {r['what']} {r['killed']} (bound "
                                    f"{B_GAP_BOUND} s and half of A's window)")
                if b["failed"]:
                    problems.append(f"instance {k} failed {b['failed']} attempts of shard B while shard A was away "
                                    f"after {r['what']} {r['killed']}")
        for i, inst in enumerate(instances):
            if inst.proc.poll() is not None:
                problems.append(f"instance {i} ended (exit {inst.proc.returncode})")
        log(f"total {time.time() - started:.0f} s")
        if problems:
            report_failure(problems)
            return 1
        print("PASSED: every acknowledged receipt present with its hash and sequence number, no operation "
              "executed twice, budgets exact, the chain verifies, every instance answered again"
              + (f"; on both shards, and `ipc shards check` passes; shard B answered throughout shard A's "
                 f"failovers (longest gap {max(b['gap'] for r in rounds for b in r['b']):.3f} s, "
                 f"bound {B_GAP_BOUND} s)" if sharded else ""))
        return 0
    finally:
        cleanup(cluster, work, instances, plain)


def latency(setup: Setup, inst: Instance, n: int, clients: int) -> tuple[float, float, float]:
    """`n` new transfers by `clients` closed-loop clients: p50, p99 (ms) and
    decisions per second."""
    answers: list[Answer] = []
    failures: list = []
    stop = threading.Event()
    cs = [Client(100 + c, setup, inst, 0, answers, failures, stop, ("new",)) for c in range(clients)]
    t = time.time()
    for c in cs:
        c.start()
    while len(answers) < n:
        time.sleep(0.05)
    stop.set()
    for c in cs:
        c.join()
    took = time.time() - t
    lat = sorted((a.answered - a.sent) * 1000 for a in answers)
    if failures:
        raise RuntimeError(f"{len(failures)} failures in the latency run: {failures[:3]}")
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)], len(answers) / took


def commit_latency(cluster: Cluster, work: Path) -> float:
    """The mean latency (ms) of a one-row INSERT's transaction by one
    pgbench client for 5 s: the commit alone, without the gateway."""
    run("psql", "-X", "-q", cluster.url, "-c", "CREATE TABLE IF NOT EXISTS bench_commit (n int)")
    script = work / "commit.sql"
    script.write_text("INSERT INTO bench_commit VALUES (1);\n")
    out = run("pgbench", "-n", "-c", "1", "-T", "5", "-f", str(script), cluster.url)
    for line in out.splitlines():
        if line.startswith("latency average"):
            return float(line.split("=")[1].split()[0])
    raise RuntimeError(f"no latency in pgbench's output: {out}")


def bench(ipc: str) -> int:
    runs = int(os.environ.get("RUNS", "3"))
    n = int(os.environ.get("DECISIONS", "400"))
    cluster, work, setup, _ = start_all(ipc)
    instances: list[Instance] = []
    try:
        inst = setup.serve(cluster.url, 0)
        instances.append(inst)
        latency(setup, inst, 50, 1)  # warm up
        print(f"# decisions: {n} new transfers per row, over HTTP, one ipc serve, loopback")
        print(f"{'standby':<44} {'clients':>7} {'p50 ms':>8} {'p99 ms':>8} {'dec/s':>8}")
        for mode in ("sync", "async", "sync"):
            if mode == "async":
                cluster.async_()
            else:
                cluster.sync()
            time.sleep(2)
            names = run("psql", "-X", "-At", cluster.url, "-c", "SHOW synchronous_standby_names").strip()
            label = f"{mode} ({names or 'none'})"
            for clients in (1, 8):
                p50, p99, rate = latency(setup, inst, n, clients)
                print(f"{label:<44} {clients:>7} {p50:>8.2f} {p99:>8.2f} {rate:>8.0f}", flush=True)
            commit = commit_latency(cluster, work)
            print(f"{label:<44} {'commit':>7} {commit:>8.3f} {'':>8} {1000 / commit:>8.0f}   (pgbench: one INSERT and its COMMIT)", flush=True)
        # the failover's unavailability window, under light load
        windows = {"kill -9 the postmaster of": [], "kill -9 the keeper and postgres of": []}
        answers: list[Answer] = []
        failures: list = []
        for what in windows:
            for k in range(runs):
                cluster.wait(180)
                time.sleep(2)
                stop = threading.Event()
                cs = [Client(200 + c, setup, inst, 0, answers, failures, stop, ("new",)) for c in range(2)]
                inst.acks.clear()
                inst.failed.clear()
                for c in cs:
                    c.start()
                time.sleep(3)
                r = load_round(cluster, [inst], what, time.time())
                stop.set()
                for c in cs:
                    c.join(200)
                w = r["windows"][0][1]
                windows[what].append(w)
                log(f"{what} {r['killed']}: answered again after {w:.2f} s")
                if "keeper" in what:
                    cluster.run(r["killed"])
        for what, ws in windows.items():
            print(f"failover window, {what} the primary: median {statistics.median(ws):.2f} s "
                  f"(runs: {', '.join(f'{w:.2f}' for w in ws)})")
        problems = check(setup, cluster.node_url(cluster.primary()), answers)
        if problems:
            report_failure(problems)
            return 1
        print("checks: every acknowledged receipt present, no operation executed twice, budgets exact, the chain verifies")
        return 0
    finally:
        cleanup(cluster, work, instances)


if __name__ == "__main__":
    mode, ipc = sys.argv[1], os.path.realpath(sys.argv[2])
    sys.exit(test(ipc) if mode == "test" else bench(ipc))
