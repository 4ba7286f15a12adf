//! Child mandates, side by side with a single mandate (issue 25): issuing a
//! child (typed, checked against its parent and the owner's registries,
//! signed), verifying a token's chain (no cache: what authn does on a new
//! token), and deciding under a chain of depth 3 against deciding under
//! one mandate (memory store, and SQLite with group commit; the token's
//! verification cached, as a gateway runs). Run with scripts/bench-mandates.
//!
//! Workload: Emma's bank pack, ALLOW transfers to the landlord (a saved
//! beneficiary) at level 0, each with a distinct amount.

use intentplane::compile::build;
use intentplane::gateway::world::World;
use intentplane::gateway::{ChildRequest, Gateway, Input, MandateToken, Outcome};
use intentplane::keys::SecretKey;
use intentplane::store::Store;
use intentplane::store::memory::MemoryStore;
use intentplane::store::sqlite::SqliteStore;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Instant;

const LANDLORD: &str = "DE44500105175407324931";

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var("BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or(root.join("target"));
    let tmp = tempfile::tempdir_in(&dir).expect("temp dir");
    let bundle = build(&[root.join("packs/bank")])
        .bundle
        .expect("bank builds");
    let issuer = SecretKey::generate().expect("key");
    issuer
        .write_pair(&tmp.path().join("issuer"))
        .expect("write key");
    let emma = SecretKey::generate().expect("key");
    emma.write_pair(&tmp.path().join("emma"))
        .expect("write key");
    let world_path = tmp.path().join("world.toml");
    std::fs::write(
        &world_path,
        format!(
            "clock = \"2026-11-27T18:40:00Z\"\nmandate_keys = [\"issuer.pub\"]\n[approvers]\nemma = \"emma.pub\"\n[registries]\nbank = {:?}\n",
            root.join("packs/bank/registries").display().to_string()
        ),
    )
    .expect("world");
    let gateway = |store: Arc<dyn Store>| {
        let world = World::load(&world_path, &bundle.table).expect("world loads");
        Gateway::new(&bundle, world, store).expect("gateway")
    };
    let now = intentplane::base::json::parse_time_str("2026-11-27T18:40:00Z").unwrap_or(0);
    let mut claims = Map::new();
    claims.insert("account".into(), json!("emma-checking"));
    claims.insert("currency".into(), json!("EUR"));
    claims.insert("payee".into(), json!([]));
    let root_token = MandateToken::sign(
        intentplane::gateway::Mandate {
            id: "m-root".into(),
            pack: "bank".into(),
            user: "emma".into(),
            owner: "emma".into(),
            scopes: vec!["payments.write".into()],
            claims,
            budget: intentplane::gateway::Budget {
                amount: 1_000_000_000_000_000,
                calls: 1_000_000_000_000_000,
            },
            issued_at: now - 60,
            expires_at: now + 3600,
            sources: Default::default(),
            parent: None,
        },
        &issuer,
    )
    .expect("sign");
    let req = ChildRequest {
        claims: vec![("payee".into(), json!(LANDLORD))],
        ..Default::default()
    };
    println!(
        "# child mandates: {} cores, {n} decisions (ALLOW, level 0, executed)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );

    // issuing a child: typed, checked (a read transaction), signed
    let gw = gateway(Arc::new(MemoryStore::new()));
    let issues = (n / 10).max(100);
    let t = Instant::now();
    let mut child = None;
    for _ in 0..issues {
        child = Some(gw.issue_child(&root_token, &req, &emma).expect("issued"));
    }
    let each = t.elapsed().as_secs_f64() * 1e6 / issues as f64;
    println!("issue a child (user's key)      {each:8.1} µs each");
    let c1 = child.expect("a child");
    let c2 = gw.issue_child(&c1, &req, &emma).expect("issued");
    let c3 = gw.issue_child(&c2, &req, &issuer).expect("issued");

    // verifying a chain, uncached
    for (name, tok) in [
        ("a single mandate", &root_token),
        ("a chain of depth 3", &c3),
    ] {
        let t = Instant::now();
        for _ in 0..issues {
            gw.verify_token(tok).expect("verifies");
        }
        let each = t.elapsed().as_secs_f64() * 1e6 / issues as f64;
        println!("verify {name:<24} {each:8.1} µs each");
    }

    // holding a proposal for its user (SQLite) while another tenant has
    // 1,000 held: a proposal reads only its own tenant's index
    let gw = gateway(Arc::new(
        SqliteStore::open(tmp.path().join("held.db")).expect("sqlite"),
    ));
    let mut other = root_token.mandate.clone();
    other.id = "m-other".into();
    other.user = "noah".into();
    other.owner = "noah".into();
    let other = MandateToken::sign(other, &issuer).expect("sign");
    let mut d = gw
        .propose_child(&other, &ChildRequest::default())
        .expect("proposed");
    for i in 0..1_000 {
        d.mandate.id = format!("m-held-{i}");
        gw.hold_child(&d, "bench").expect("held");
    }
    let holds = 200;
    let t = Instant::now();
    for _ in 0..holds {
        let d = gw.propose_child(&root_token, &req).expect("proposed");
        gw.hold_child(&d, "bench").expect("held");
    }
    let each = t.elapsed().as_secs_f64() * 1e6 / holds as f64;
    println!("propose and hold a child, 1,000 of another tenant held (SQLite) {each:8.1} µs each");

    let inputs = |mandate: &Value, n: usize| -> Vec<Input> {
        (0..n)
            .map(|i| Input {
                proposal: json!({"action": "payment.transfer", "args": {
                    "from_account": "emma-checking", "payee_iban": LANDLORD,
                    "amount": format!("{}.{:02}", 1 + i / 100, i % 100), "currency": "EUR"}}),
                mandate: Some(mandate.clone()),
                approvals: vec![],
                malformed: None,
            })
            .collect()
    };
    let single = serde_json::to_value(&root_token).expect("json");
    let chain = serde_json::to_value(&c3).expect("json");
    for (store_name, group) in [("memory", false), ("sqlite, group commit", true)] {
        for (name, tok) in [("single mandate", &single), ("chain of depth 3", &chain)] {
            let store: Arc<dyn Store> = if group {
                let p = tmp.path().join(format!(
                    "s-{}.db",
                    intentplane::gateway::approval::random_id().expect("random")
                ));
                Arc::new(SqliteStore::open(&p).expect("sqlite"))
            } else {
                Arc::new(MemoryStore::new())
            };
            let gw = gateway(store);
            let ins = inputs(tok, n);
            let t = Instant::now();
            let ds = if group {
                let mut out = vec![];
                for chunk in ins.chunks(256) {
                    out.extend(
                        intentplane::gateway::testkit::decide_batch(&gw, chunk).expect("decided"),
                    );
                }
                out
            } else {
                ins.iter()
                    .map(|i| gw.decide(i).expect("decided"))
                    .collect::<Vec<_>>()
            };
            let secs = t.elapsed().as_secs_f64();
            let allowed = ds.iter().filter(|d| d.decision == Outcome::Allow).count();
            assert_eq!(allowed, n, "{name}: {:?}", ds.first());
            let snap = gw.store().snapshot().expect("snapshot");
            intentplane::store::verify_store(&snap, None).expect("receipts verify");
            println!(
                "decide, {store_name:<21} {name:<17} {:8.0} /s  {:6.1} µs each",
                n as f64 / secs,
                secs * 1e6 / n as f64
            );
        }
    }
}
