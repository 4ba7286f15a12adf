//! `ipc serve --listen` as a service on PostgreSQL (issue #14, item 2):
//! four instances (processes, each with its own port and token file) on one
//! database paying one invoice, spending one budget and using one approval;
//! an instance killed with SIGKILL while it decides; and the database
//! stopped and restarted under load. Each needs PostgreSQL (`IPC_TEST_PG`,
//! see `common/pg.rs`): without it the test says so loudly and passes,
//! except under `CI`.
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "postgres", feature = "http"))]

use crate::common;
use common::http::*;
use common::*;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// `n` instances on `store`, instance `i` under `mandates[i]`, each with
/// a token of its own.
fn instances(w: &TestWorld, store: &str, mandates: &[Value]) -> Vec<Server> {
    logged_instances(w, store, mandates).0
}

/// [`instances`], each writing its stderr to a file of its own (returned
/// in the same order), which the test reads instead of printing it.
fn logged_instances(
    w: &TestWorld,
    store: &str,
    mandates: &[Value],
) -> (Vec<Server>, Vec<std::path::PathBuf>) {
    mandates
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let token = format!(
                "instance-{i}-{}",
                intentplane::gateway::approval::random_id().unwrap()
            );
            let log = w.dir.path().join(format!("instance-{i}.stderr"));
            let file = std::fs::File::create(&log).unwrap();
            let s = launch(w, m, "127.0.0.1:0", store, &token, &[], file.into());
            (s, log)
        })
        .unzip()
}

/// Posts every `(instance, body)` at once, one thread each; the answers
/// in the same order.
fn all_at_once(servers: &[Server], jobs: &[(usize, Value)]) -> Vec<Resp> {
    std::thread::scope(|sc| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|(i, body)| sc.spawn(move || post(&servers[*i], body)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A decision that executed its operation (not an answer replayed from the
/// store).
fn executed(d: &Value) -> bool {
    d["decision"] == "ALLOW" && d["replayed"] != true
}

/// The store's receipts, read back after the test.
fn receipts_of(url: &str) -> Vec<intentplane::store::ReceiptRecord> {
    intentplane::store::open(Path::new(url), false)
        .unwrap()
        .receipts()
        .unwrap()
}

/// How many times each operation was executed, by the receipts.
fn executions(url: &str) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for r in receipts_of(url) {
        if r.body["decision"] == "ALLOW" && r.body["replayed"] == false {
            *n.entry(r.body["operation_hash"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    n
}

/// `ipc receipts verify` on the store: the chain links, the head matches,
/// and budgets, nonces and executions are those the receipts account for.
fn assert_verifies(url: &str) {
    let v = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["receipts", "verify", url])
        .output()
        .unwrap();
    assert!(
        v.status.success(),
        "{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
}

fn pay_1001() -> Value {
    json!({"action": "invoice.pay", "args": {"invoice_id": "INV-1001",
        "payee_iban": SUPPLIER, "amount": "4200.00", "currency": "EUR"}})
}

/// A distinct 10.00 transfer for each `i` (the subject tells them apart).
fn ten_euros(i: usize) -> Value {
    json!({"action": "payment.transfer", "args": {"from_account": "emma-checking",
        "payee_iban": LANDLORD, "amount": "10.00", "currency": "EUR",
        "subject": format!("rent share {i}")}})
}

/// A mandate for many transfers: 100,000.00 and 1,000 calls.
fn big_mandate(w: &TestWorld) -> Value {
    let mut s = MandateSpec::bank("emma");
    s.budget = 10_000_000;
    s.calls = 1000;
    w.mandate(s)
}

#[test]
fn four_instances_on_postgres_pay_one_invoice_once() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    // four clerks, four mandates: idempotency cannot hide a double payment
    let clerks: Vec<Value> = (0..4).map(|_| w.clerk()).collect();
    let servers = instances(&w, &pg.url, &clerks);
    let jobs: Vec<_> = (0..12).map(|k| (k % 4, pay_1001())).collect();
    let answers = all_at_once(&servers, &jobs);
    let mut paid = 0;
    for r in &answers {
        assert_eq!(r.status, 200, "{}", r.body);
        if executed(&r.body) {
            paid += 1;
        } else if r.body["decision"] != "ALLOW" {
            assert_eq!(r.body["stage"], "policy", "{}", r.body);
        }
    }
    assert_eq!(paid, 1, "the invoice was paid {paid} times: {answers:#?}");
    assert_eq!(executions(&pg.url).values().sum::<usize>(), 1);
    assert_eq!(receipts_of(&pg.url).len(), 12);
    assert_verifies(&pg.url);
}

#[test]
fn four_instances_on_postgres_spend_one_budget_exactly() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    let mut spec = MandateSpec::bank("emma");
    spec.budget = 20_000; // 200.00: twenty transfers of 10.00
    spec.calls = 1000;
    let m = w.mandate(spec);
    let servers = instances(&w, &pg.url, &vec![m; 4]);
    // forty distinct transfers of 10.00, ten on each instance, at once
    let jobs: Vec<_> = (0..40).map(|i| (i % 4, ten_euros(i))).collect();
    let answers = all_at_once(&servers, &jobs);
    let mut allowed = 0;
    for r in &answers {
        assert_eq!(r.status, 200, "{}", r.body);
        if executed(&r.body) {
            allowed += 1;
        } else {
            assert_eq!(
                (&r.body["decision"], &r.body["stage"]),
                (&json!("DENY"), &json!("budget")),
                "{}",
                r.body
            );
        }
    }
    assert_eq!(
        allowed, 20,
        "the budget allows exactly twenty: {answers:#?}"
    );
    let spent: i64 = receipts_of(&pg.url)
        .iter()
        .filter(|r| r.body["decision"] == "ALLOW")
        .map(|r| r.body["consumed"]["amount"].as_i64().unwrap())
        .sum();
    assert_eq!(spent, 20_000, "spent exactly the budget, never more");
    assert_verifies(&pg.url);
    // each instance counts how its store transactions committed: as
    // decided before the lock, or decided again under it; together they
    // hold every decision (one transaction decides one or more)
    let mut transactions = 0;
    for s in &servers {
        let text = get(s, "/metrics").body;
        let text = text.as_str().unwrap();
        let metric = |line: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(line))
                .unwrap_or_else(|| panic!("no `{line}` in {text}"))
                .parse()
                .unwrap()
        };
        let mut own = 0;
        for path in ["decided", "rerun"] {
            let line = format!("ipc_store_transactions_total{{path=\"{path}\"}} ");
            own += metric(&line) as u64;
        }
        transactions += own;
        // every decision's transaction held the head lock, for some time
        let holds = metric("ipc_store_head_lock_holds_total ") as u64;
        assert!(holds >= own, "{holds} holds, {own} transactions: {text}");
        let held = metric("ipc_store_head_lock_seconds_total ");
        assert!(own == 0 || held > 0.0, "{text}");
        assert!(metric("ipc_store_head_lock_max_seconds ") <= held, "{text}");
    }
    assert!((1..=40).contains(&transactions), "{transactions}");
}

#[test]
fn four_instances_on_postgres_use_one_approval_once() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    let servers = instances(&w, &pg.url, &vec![w.emma(); 4]);
    let p = transfer(LANDLORD, json!("1500.00"));
    let d = post(&servers[0], &p).body;
    assert_eq!(d["decision"], "PENDING", "{d}");
    let op = d["operation_hash"].as_str().unwrap().to_string();
    let envelope = json!({"proposal": p, "approvals": [w.approve("emma", &op)]});
    // the one approval, on every instance twice, at once
    let jobs: Vec<_> = (0..8).map(|k| (k % 4, envelope.clone())).collect();
    let answers = all_at_once(&servers, &jobs);
    for r in &answers {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let fresh = answers.iter().filter(|r| executed(&r.body)).count();
    assert_eq!(
        fresh, 1,
        "the approval was used {fresh} times: {answers:#?}"
    );
    assert_eq!(executions(&pg.url).get(&op), Some(&1));
    let consumed: Vec<Value> = receipts_of(&pg.url)
        .iter()
        .filter(|r| r.body["decision"] == "ALLOW" && r.body["replayed"] == false)
        .map(|r| r.body["consumed"]["nonces"].clone())
        .collect();
    assert_eq!(consumed.len(), 1);
    assert_eq!(
        consumed[0].as_array().map(Vec::len),
        Some(1),
        "{consumed:?}"
    );
    assert_verifies(&pg.url);
}

/// Distinct small transfers, each an ALLOW of its own operation.
fn small_transfer(i: usize) -> Value {
    transfer(LANDLORD, json!(format!("{}.{:02}", 1 + i / 100, i % 100)))
}

#[test]
fn an_instance_on_postgres_killed_while_deciding_loses_nothing_and_executes_nothing_twice() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    let m = big_mandate(&w);
    let mut servers = instances(&w, &pg.url, std::slice::from_ref(&m));
    let pid = servers[0].child.id().to_string();
    const N: usize = 240;
    const THREADS: usize = 8;
    let answered = AtomicUsize::new(0);
    // what the first instance answered before it died: operation hashes
    let before: Vec<String> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (s, answered) = (&servers[0], &answered);
                sc.spawn(move || {
                    let mut allowed = vec![];
                    for i in (t..N).step_by(THREADS) {
                        match try_request(
                            s,
                            "POST",
                            "/v1/decide",
                            &small_transfer(i).to_string(),
                            &[],
                        ) {
                            Ok(r) if r.status == 200 => {
                                assert!(executed(&r.body), "{}", r.body);
                                allowed
                                    .push(r.body["operation_hash"].as_str().unwrap().to_string());
                                answered.fetch_add(1, Ordering::SeqCst);
                            }
                            Ok(r) => panic!("{} {}", r.status, r.body),
                            // killed: no answer, and none after it
                            Err(_) => break,
                        }
                    }
                    allowed
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        while answered.load(Ordering::SeqCst) < 40 {
            assert!(Instant::now() < deadline, "no answers");
            std::thread::sleep(Duration::from_millis(5));
        }
        // SIGKILL while the clients keep the decider busy
        let kill = Command::new("kill").args(["-KILL", &pid]).status();
        assert!(kill.unwrap().success());
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(before.len() >= 40 && before.len() < N, "{}", before.len());
    assert_verifies(&pg.url);
    // nothing lost: every answered ALLOW is in the store, executed once
    let done = executions(&pg.url);
    for op in &before {
        assert_eq!(
            done.get(op),
            Some(&1),
            "answered ALLOW {op} is not in the store"
        );
    }
    // a new instance: everything again; what was committed is replayed
    servers.push(instances(&w, &pg.url, std::slice::from_ref(&m)).remove(0));
    let before: HashSet<String> = before.into_iter().collect();
    let mut replayed = 0;
    for i in 0..N {
        let d = post(&servers[1], &small_transfer(i)).body;
        assert_eq!(d["decision"], "ALLOW", "{d}");
        let op = d["operation_hash"].as_str().unwrap();
        if before.contains(op) {
            assert_eq!(d["replayed"], true, "{op} was executed twice");
        }
        replayed += usize::from(d["replayed"] == true);
    }
    assert!(replayed >= before.len(), "{replayed} < {}", before.len());
    let done = executions(&pg.url);
    assert_eq!(done.len(), N);
    assert!(done.values().all(|&n| n == 1), "executed twice: {done:?}");
    assert_verifies(&pg.url);
}

/// A PostgreSQL cluster of this test's own (`scripts/pg-cluster`), so that
/// stopping it disturbs no other test; removed when dropped.
struct Cluster {
    dir: String,
    url: String,
}

impl Cluster {
    fn script() -> String {
        format!("{}/scripts/pg-cluster", env!("CARGO_MANIFEST_DIR"))
    }

    /// A new cluster, or `None` (the loud skip) without PostgreSQL.
    fn start() -> Option<Cluster> {
        common::pg::server()?;
        // a server was named, but this test needs a cluster of its own
        if !common::pg::bindir().is_some_and(|b| b.join("initdb").exists()) {
            common::tools::skip(
                "PostgreSQL's initdb",
                "neither PG_BIN nor `pg_config --bindir` names a folder with initdb",
            );
            return None;
        }
        // a new folder of its own, in the temp folder when other users can
        // pass through it (as root the cluster runs as another user, who
        // must reach the folder), else in /tmp, which every Unix has
        let tmp = std::env::temp_dir();
        let traversable = std::fs::metadata(&tmp)
            .is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o001 != 0);
        let base = if traversable { tmp } else { "/tmp".into() };
        let dir = tempfile::Builder::new()
            .prefix("ipc-restart-pg.")
            .tempdir_in(base)
            .unwrap()
            .keep()
            .display()
            .to_string();
        let out = Command::new(Self::script())
            .args(["start", &dir])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/pg-cluster start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_string();
        Some(Cluster { dir, url })
    }

    fn run(&self, cmd: &str) {
        let out = Command::new(Self::script())
            .args([cmd, &self.dir])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/pg-cluster {cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(Self::script())
            .args(["stop", &self.dir])
            .output();
    }
}

#[test]
fn postgres_restarted_under_load_fails_closed_and_the_instances_reconnect() {
    let Some(pg) = Cluster::start() else {
        return;
    };
    let w = TestWorld::new();
    let m = big_mandate(&w);
    let (servers, logs) = logged_instances(&w, &pg.url, &[m.clone(), m]);
    const N: usize = 120;
    const THREADS: usize = 4;
    let allowed = AtomicUsize::new(0);
    // the probe: decided while the database is down, then after
    let probe = small_transfer(N);
    let (answers, down) = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (s, allowed) = (&servers[t % 2], &allowed);
                sc.spawn(move || {
                    let deadline = Instant::now() + Duration::from_secs(90);
                    let mut answers = vec![];
                    for i in (t..N).step_by(THREADS) {
                        // each proposal until it is decided: the client's retry
                        loop {
                            assert!(Instant::now() < deadline, "no recovery");
                            let r = post(s, &small_transfer(i));
                            if r.status == 200 {
                                allowed.fetch_add(1, Ordering::SeqCst);
                                answers.push(r.body);
                                break;
                            }
                            assert_eq!(r.status, 500, "{}", r.body);
                            assert!(r.body.get("decision").is_none(), "{}", r.body);
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                    answers
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        while allowed.load(Ordering::SeqCst) < 20 {
            assert!(Instant::now() < deadline, "no answers");
            std::thread::sleep(Duration::from_millis(5));
        }
        pg.run("halt");
        // the database is down: every instance fails closed, and says why
        let down: Vec<Resp> = servers.iter().map(|s| post(s, &probe)).collect();
        let pages: Vec<Resp> = servers
            .iter()
            .map(|s| get(s, "/v1/receipts?last=5"))
            .collect();
        pg.run("restart");
        let answers: Vec<Value> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        (answers, down.into_iter().chain(pages).collect::<Vec<_>>())
    });
    for r in &down {
        assert_eq!(r.status, 500, "{}", r.body);
        assert!(r.body.get("decision").is_none(), "{}", r.body);
        let text = r.body["error"].as_str().unwrap_or_default();
        assert!(text.contains("postgresql"), "not a clear error: {text}");
    }
    // each instance said on its stderr why it refused while the database
    // was down (the same clear error), and nothing else went wrong; each
    // line after its timestamp
    for log in &logs {
        let text = std::fs::read_to_string(log).unwrap();
        let errors: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(_, l)| l.starts_with("error:"))
            .map(|(_, l)| l)
            .collect();
        assert!(
            !errors.is_empty(),
            "no error logged during the outage: {text}"
        );
        assert!(
            errors.iter().all(|l| l.contains("postgresql")),
            "an error that is not the database's: {text}"
        );
        assert!(!text.contains("panicked"), "{text}");
    }
    // the same processes decide again: the probe executes once
    let after: Vec<Value> = servers.iter().map(|s| post(s, &probe).body).collect();
    assert!(after.iter().all(|d| d["decision"] == "ALLOW"), "{after:?}");
    assert_eq!(after.iter().filter(|d| executed(d)).count(), 1, "{after:?}");
    for s in &servers {
        let metrics = get(s, "/metrics").body;
        let text = metrics.as_str().unwrap();
        assert!(!text.contains("ipc_store_errors_total 0\n"), "{text}");
    }
    // every ALLOW answered is committed: its receipt holds its operation
    let receipts = receipts_of(&pg.url);
    let by_seq: HashMap<u64, &Value> = receipts.iter().map(|r| (r.seq, &r.body)).collect();
    for d in answers.iter().chain(&after) {
        assert_eq!(d["decision"], "ALLOW", "{d}");
        let seq = d["receipt"]["seq"].as_u64().unwrap();
        let body = by_seq
            .get(&seq)
            .unwrap_or_else(|| panic!("no receipt {seq} for {d}"));
        assert_eq!(body["operation_hash"], d["operation_hash"]);
        assert_eq!(body["decision"], "ALLOW");
    }
    // nothing executed twice, nothing missing
    let done = executions(&pg.url);
    assert_eq!(done.len(), N + 1);
    assert!(done.values().all(|&n| n == 1), "executed twice: {done:?}");
    assert_verifies(&pg.url);
}

/// #41, item 4: the database stopped, `/v1/health` (liveness) still
/// answers 200 but `/v1/ready` answers 503 naming the store, so that a
/// load balancer drains the instance; once the database is back the same
/// process is ready again (and decides).
#[test]
fn ready_is_503_while_postgres_is_down_and_health_stays_200() {
    let Some(pg) = Cluster::start() else {
        return;
    };
    let w = TestWorld::new();
    let (servers, _logs) = logged_instances(&w, &pg.url, &[big_mandate(&w)]);
    let s = &servers[0];
    let r = get(s, "/v1/ready");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["checks"]["store"]["ok"], true, "{}", r.body);
    pg.run("halt");
    assert_eq!(get(s, "/v1/health").status, 200);
    let r = get(s, "/v1/ready");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["ready"], false, "{}", r.body);
    assert_eq!(r.body["checks"]["store"]["ok"], false, "{}", r.body);
    assert_eq!(post(s, &small_transfer(1)).status, 500);
    pg.run("restart");
    // the store's pool reconnects on the next transaction: the probe is
    // asked again until then (the deadline only bounds a hang)
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = get(s, "/v1/ready");
        if r.status == 200 {
            assert_eq!(r.body["ready"], true, "{}", r.body);
            break;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(Instant::now() < deadline, "never ready again: {}", r.body);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(post(s, &small_transfer(2)).body["decision"], "ALLOW");
}

/// A start-up error once the store is open (here a token file whose token
/// is too short to use) is reported with its diagnostic and exit 1: the
/// gateway, and PostgreSQL's connection with it, is not dropped inside the
/// server's runtime (whose client would panic closing it).
#[test]
fn a_start_up_error_after_postgres_is_open_is_a_diagnostic_not_a_panic() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    let mandate = write_mandate(&w, &w.clerk());
    let tokens = w.dir.path().join("short-tokens");
    std::fs::write(&tokens, "short\n").unwrap();
    let out = serve_cmd(&w, &mandate)
        .args(["--store", &pg.url, "--listen", "127.0.0.1:0"])
        .arg("--auth-token-file")
        .arg(&tokens)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("ipc::serve::"), "{stderr}");
}

/// #37: over shards, a shard whose PostgreSQL is down fails its own
/// tenant's requests only: the other shard's tenant is decided meanwhile
/// by the same instance (its requests sent side by side with the failing
/// ones), and the stopped shard's tenant again once its database is back.
#[test]
fn a_shard_whose_postgres_is_down_stops_only_its_own_tenants() {
    let Some(pg) = Cluster::start() else {
        return;
    };
    let w = TestWorld::new();
    let mut text = std::fs::read_to_string(&w.world_path).unwrap();
    text.push_str(&format!(
        "[store.shards]\nemma = \"{}\"\nnoah = \"b.db\"\n",
        pg.url
    ));
    std::fs::write(&w.world_path, text).unwrap();
    let init = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["shards", "init", "--world", &path_str(&w.world_path)])
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let s = launch(
        &w,
        &w.emma(),
        "127.0.0.1:0",
        "",
        TOKEN,
        &[],
        std::process::Stdio::null(),
    );
    let noah = w.mandate(MandateSpec::bank("noah"));
    let emma_pays = |cents: i64| post(&s, &json!({"proposal": transfer_of("emma", cents)}));
    let noah_pays = |cents: i64| {
        post(
            &s,
            &json!({"proposal": transfer_of("noah", cents), "mandate": noah}),
        )
    };
    assert_eq!(emma_pays(1200).body["decision"], "ALLOW");
    assert_eq!(noah_pays(1300).body["decision"], "ALLOW");
    pg.run("halt");
    let (emma, noah_answers): (Vec<Resp>, Vec<Resp>) = std::thread::scope(|sc| {
        let e: Vec<_> = (0..4)
            .map(|k| sc.spawn(move || emma_pays(1400 + k)))
            .collect();
        let n: Vec<_> = (0..4)
            .map(|k| sc.spawn(move || noah_pays(1500 + k)))
            .collect();
        (
            e.into_iter().map(|h| h.join().unwrap()).collect(),
            n.into_iter().map(|h| h.join().unwrap()).collect(),
        )
    });
    for r in &emma {
        assert_eq!(r.status, 500, "{}", r.body);
    }
    for r in &noah_answers {
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["decision"], "ALLOW", "{}", r.body);
    }
    pg.run("restart");
    // the shard's pool reconnects on its next transaction (the deadline
    // only bounds a hang)
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = emma_pays(1600);
        if r.status == 200 {
            assert_eq!(r.body["decision"], "ALLOW", "{}", r.body);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "emma never decided again: {}",
            r.body
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(s);
    assert_eq!(decision_owners(&w.dir.path().join("b.db")).len(), 5);
}
