//! The property: the attacker controls every proposal. Proptest generates
//! sequences of proposals over everything an agent can send — any action
//! name, keys and values; references, including other tenants' ids;
//! smuggled keys (origin, scope, context, approval_level...); wrong types;
//! disguised IBANs; huge and nested values; genuine, expired, tampered and
//! foreign tokens; approvals by the right and the wrong people, and for
//! other operations — against the bank and accounts-payable packs.
//!
//! An oracle written from the world's ground truth (the registry files and
//! the mandates as data, parsed here, not through gateway code) checks every
//! executed action: a genuine, unexpired token with the scope; every
//! critical value equal, after an independent normalisation, to a trusted
//! value of that owner; budgets and hard caps; the approval level an
//! independent table requires; an invoice paid once.
//!
//! Default: 6,000 proposals (60 cases × 100). `IPC_FUZZ_CASES=1000` runs
//! 100,000.

mod common;
use common::*;
use intentplane::gateway::{Decision, Gateway, Outcome};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;

const PER_CASE: usize = 100;

fn world() -> &'static TestWorld {
    static W: OnceLock<TestWorld> = OnceLock::new();
    W.get_or_init(TestWorld::new)
}

// ---- ground truth, read independently from the registry files ----------

fn registry(pack: &str, name: &str) -> Value {
    let p = root()
        .join("packs")
        .join(pack)
        .join("registries")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// An IBAN as the oracle compares it: no spaces, upper case, ASCII only.
fn iban(s: &str) -> Option<String> {
    let t: String = s
        .chars()
        .filter(|c| *c != ' ')
        .collect::<String>()
        .to_uppercase();
    (t.len() >= 15 && t.chars().all(|c| c.is_ascii_alphanumeric())).then_some(t)
}

fn money(v: &Value) -> i64 {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let (u, f) = s.split_once('.').unwrap_or((&s, ""));
    u.parse::<i64>().unwrap() * 100 + format!("{f:0<2}").parse::<i64>().unwrap()
}

struct Truth {
    beneficiaries: HashMap<String, Vec<(Option<String>, String)>>,
    sanctions: BTreeSet<String>,
    orders: HashMap<String, Map<String, Value>>,
    vendors: HashMap<String, Map<String, Value>>,
    invoices: HashMap<String, Map<String, Value>>,
    callbacks: HashMap<String, Map<String, Value>>,
    vop: Map<String, Value>,
}

fn truth() -> Truth {
    let owners = |v: Value| -> HashMap<String, Map<String, Value>> {
        v.as_object()
            .unwrap()
            .iter()
            .map(|(o, r)| (o.clone(), r.as_object().unwrap().clone()))
            .collect()
    };
    let ben = registry("bank", "beneficiaries");
    Truth {
        beneficiaries: ben
            .as_object()
            .unwrap()
            .iter()
            .map(|(o, list)| {
                let vals = list
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| match e {
                        Value::String(s) => (None, iban(s).unwrap()),
                        o => (
                            o["id"].as_str().map(str::to_string),
                            iban(o["value"].as_str().unwrap()).unwrap(),
                        ),
                    })
                    .collect();
                (o.clone(), vals)
            })
            .collect(),
        sanctions: registry("bank", "sanctions")["*"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| iban(s.as_str().unwrap()).unwrap())
            .collect(),
        orders: owners(registry("bank", "standing_orders")),
        vendors: owners(registry("ap", "vendors")),
        invoices: owners(registry("ap", "invoices")),
        callbacks: owners(registry("ap", "callbacks")),
        vop: registry("ap", "vop")["*"].as_object().unwrap().clone(),
    }
}

// ---- the mandates the attacker's proposals travel with ----------------

struct M {
    token: Value,
    /// `None`: not genuine (expired, tampered, foreign key): never executes.
    valid: Option<MandateData>,
}

#[derive(Clone)]
struct MandateData {
    id: String,
    user: String,
    owner: String,
    scopes: Vec<String>,
    claims: Map<String, Value>,
    budget: i64,
    calls: u64,
}

fn mandates(w: &TestWorld) -> Vec<M> {
    let mut out = vec![];
    let mut add = |spec: MandateSpec, valid: bool, w: &TestWorld| {
        let data = MandateData {
            id: spec.id.clone(),
            user: spec.user.clone(),
            owner: spec.owner.clone(),
            scopes: spec.scopes.clone(),
            claims: spec.claims.clone(),
            budget: spec.budget,
            calls: spec.calls,
        };
        let token = w.mandate(spec);
        out.push(M {
            token,
            valid: valid.then_some(data),
        });
    };
    add(MandateSpec::bank("emma"), true, w);
    let mut low = MandateSpec::bank("emma");
    low.budget = 15_000;
    low.calls = 3;
    add(low, true, w);
    add(MandateSpec::bank("noah"), true, w);
    add(
        MandateSpec::bank("emma").claim("payee", json!([SUPPLIER])),
        true,
        w,
    );
    let mut scopeless = MandateSpec::bank("emma");
    scopeless.scopes = vec!["account.write".into()];
    add(scopeless, true, w);
    let mut expired = MandateSpec::bank("emma");
    expired.ttl = -10;
    add(expired, false, w);
    let mut big =
        MandateSpec::for_pack("ap", "clerk", "acme", &["payments.write", "vendors.write"]);
    big.budget = 5_000_000;
    add(big, true, w);
    add(
        MandateSpec::for_pack(
            "ap",
            "clerk",
            "globex",
            &["payments.write", "vendors.write"],
        ),
        true,
        w,
    );
    // tampered: a valid token whose budget the agent raised
    let mut t = w.mandate(MandateSpec::bank("emma"));
    t["mandate"]["budget"]["amount"] = json!(900_000_000);
    out.push(M {
        token: t,
        valid: None,
    });
    // signed by a key the gateway does not trust
    let rogue = intentplane::keys::SecretKey::generate().unwrap();
    let spec = MandateSpec::bank("emma");
    let m = intentplane::gateway::Mandate {
        id: spec.id,
        pack: spec.pack,
        user: spec.user,
        owner: spec.owner,
        scopes: spec.scopes,
        claims: spec.claims,
        budget: intentplane::gateway::Budget {
            amount: 100_000_000,
            calls: 100,
        },
        issued_at: now() - 10,
        expires_at: now() + 1000,
    };
    let tok = intentplane::gateway::MandateToken::sign(m, &rogue).unwrap();
    out.push(M {
        token: serde_json::to_value(tok).unwrap(),
        valid: None,
    });
    out
}

// ---- what the attacker can write ---------------------------------------

const ACTIONS: &[&str] = &[
    "payment.transfer",
    "standing_order.update",
    "user.update_password",
    "user.update_info",
    "invoice.pay",
    "vendor.change_iban",
    "record.read",
    "email.send",
    "commit.merge",
    "PAYMENT.TRANSFER",
    "payment.transfer ",
    "payment",
    "",
    "nuke",
];

const PARAMS: &[&str] = &[
    "from_account",
    "payee_iban",
    "amount",
    "currency",
    "subject",
    "order_id",
    "new_password",
    "first_name",
    "invoice_id",
    "vendor_id",
    "callback_id",
    "new_iban",
    // smuggled
    "origin",
    "scope",
    "context",
    "approval_level",
    "provenance",
    "Payee_IBAN",
    "payee_iban ",
];

fn values() -> Vec<Value> {
    let nested = (0..40).fold(json!(LANDLORD), |acc, _| json!([acc]));
    vec![
        json!("emma-checking"),
        json!("noah-checking"),
        json!(LANDLORD),
        json!("de44 5001 0517 5407 3249 31"),
        json!("DE44 5001 0517 5407 3249 31"),
        json!({"ref": "landlord"}),
        json!({"ref": "gym"}),
        json!({"ref": "noah-sister"}),
        json!({"ref": "INV-1001"}),
        json!({"ref": "landlord", "trusted": true}),
        json!("NL91ABNA0417164300"),
        json!(ATTACKER_IBAN),
        json!("DE89370400440532013000"),
        json!("DE89 3704 0044 0532 0130 0\u{200b}0"),
        json!("ＤＥ89370400440532013000"),
        json!("\u{202e}DE89370400440532013000"),
        json!(SUPPLIER),
        json!(SANCTIONED),
        json!("EUR"),
        json!("USD"),
        json!("eur"),
        json!(98.70),
        json!("98.70"),
        json!("1000.00"),
        json!("1000.01"),
        json!("1500.00"),
        json!("10000.00"),
        json!("10000.01"),
        json!(1e3),
        json!("1e3"),
        json!(-5),
        json!("99999999999999999999"),
        json!(0.001),
        json!(0),
        json!("4200.00"),
        json!("12500.00"),
        json!("310.40"),
        json!("800.00"),
        json!("INV-1001"),
        json!("INV-1002"),
        json!("INV-1003"),
        json!("INV-0999"),
        json!("INV-G-1"),
        json!("V-STADTWERKE"),
        json!("V-PAPER"),
        json!("V-GLOBEX-1"),
        json!("CB-7"),
        json!("CB-8"),
        json!("ES91 2100 0418 4502 0005 1332"),
        json!("IT60X0542811101000000123456"),
        json!("SO-rent"),
        json!("SO-noah-1"),
        json!("correct horse battery staple"),
        json!(null),
        json!(true),
        json!([]),
        json!({}),
        json!([LANDLORD]),
        json!("A".repeat(5000)),
        nested,
        json!("mandate.payee"),
        json!(2),
    ]
}

#[derive(Debug, Clone)]
struct Move {
    mandate: usize,
    /// Below 200: one of the actions the oracle knows; else any name.
    action: u8,
    /// Start from a well-formed proposal of the action (most moves), so
    /// that single corruptions reach the deeper stages.
    base: bool,
    /// `(key, own, value)`: `own` picks the key among the action's own
    /// parameters, otherwise among all names (smuggled ones included).
    args: Vec<(usize, bool, usize)>,
    extra_top_level: bool,
    /// 0: none; 1: the user approves; 2: the user and the CFO; 3: someone
    /// else; 4: the user approves another operation.
    approvals: u8,
}

const ORACLE_ACTIONS: &[&str] = &[
    "payment.transfer",
    "standing_order.update",
    "user.update_password",
    "invoice.pay",
    "vendor.change_iban",
    "user.update_info",
];

fn own_params(action: &str) -> &'static [&'static str] {
    match action {
        "payment.transfer" => &[
            "from_account",
            "payee_iban",
            "amount",
            "currency",
            "subject",
        ],
        "standing_order.update" => &["order_id", "payee_iban", "amount"],
        "user.update_password" => &["new_password"],
        "user.update_info" => &["first_name"],
        "invoice.pay" => &["invoice_id", "payee_iban", "amount", "currency"],
        "vendor.change_iban" => &["vendor_id", "callback_id", "new_iban"],
        _ => &["payee_iban"],
    }
}

fn a_move() -> impl Strategy<Value = Move> {
    (
        prop_oneof![4 => 0usize..8, 1 => 0usize..10],
        any::<u8>(),
        prop::bool::weighted(0.85),
        proptest::collection::vec(
            (0usize..PARAMS.len(), prop::bool::weighted(0.8), 0usize..64),
            0..4,
        ),
        prop::bool::weighted(0.03),
        0u8..5,
    )
        .prop_map(
            |(mandate, action, base, args, extra_top_level, approvals)| Move {
                mandate,
                action,
                base,
                args,
                extra_top_level,
                approvals,
            },
        )
}

/// Good proposals are rare at random: half of the moves start from a
/// well-formed proposal of the action and let the generated pairs overwrite
/// some of its arguments.
fn base_args(action: &str) -> Map<String, Value> {
    let v = match action {
        "payment.transfer" => {
            json!({"from_account": "emma-checking", "payee_iban": LANDLORD, "amount": "50.00", "currency": "EUR"})
        }
        "standing_order.update" => {
            json!({"order_id": "SO-rent", "payee_iban": LANDLORD, "amount": "1200.00"})
        }
        "user.update_password" => json!({"new_password": "correct horse battery staple"}),
        "invoice.pay" => {
            json!({"invoice_id": "INV-1001", "payee_iban": SUPPLIER, "amount": "4200.00", "currency": "EUR"})
        }
        "vendor.change_iban" => {
            json!({"vendor_id": "V-STADTWERKE", "callback_id": "CB-7", "new_iban": "ES9121000418450200051332"})
        }
        _ => json!({}),
    };
    v.as_object().cloned().unwrap_or_default()
}

// ---- the oracle --------------------------------------------------------

#[derive(Default)]
struct Ledger {
    spent: HashMap<String, (i64, u64)>,
    paid: BTreeSet<String>,
    vendor_iban: BTreeMap<(String, String), String>,
}

/// What executed: from a decision, or from its receipt.
struct Exec {
    action: Option<String>,
    resolved: Map<String, Value>,
    approvers: Vec<String>,
}

impl From<&Decision> for Exec {
    fn from(d: &Decision) -> Self {
        Exec {
            action: d.action.clone(),
            resolved: d.resolved.clone(),
            approvers: d.approvers.clone(),
        }
    }
}

fn check_executed(
    t: &Truth,
    m: &M,
    proposal: &Value,
    d: &Exec,
    ledger: &mut Ledger,
) -> Result<(), String> {
    let Some(md) = &m.valid else {
        return Err("executed with a token that is not genuine and valid".into());
    };
    let action = d.action.clone().unwrap_or_default();
    let scope = match action.as_str() {
        "payment.transfer" | "standing_order.update" | "invoice.pay" => "payments.write",
        "user.update_password" | "user.update_info" => "account.write",
        "vendor.change_iban" => "vendors.write",
        other => return Err(format!("executed an action outside the oracle: `{other}`")),
    };
    if !md.scopes.iter().any(|s| s == scope) {
        return Err(format!("executed `{action}` without the scope `{scope}`"));
    }
    let r = &d.resolved;
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let amount = r.get("amount").and_then(Value::as_i64);
    let user_ok = d.approvers.contains(&md.user);
    let other_ok = d.approvers.iter().any(|a| *a != md.user);
    // the value that executed is what the agent proposed (after
    // normalisation), or what its reference names in the owner's records
    let raw = &proposal["args"];
    let same_as_proposed = |k: &str, trusted: &str| -> bool {
        match &raw[k] {
            Value::String(p) => iban(p).as_deref() == Some(trusted) || p == trusted,
            Value::Object(o) => {
                let id = o.get("ref").and_then(Value::as_str);
                t.beneficiaries
                    .get(&md.owner)
                    .is_some_and(|l| l.iter().any(|(i, v)| i.as_deref() == id && v == trusted))
            }
            _ => false,
        }
    };
    let trusted_payee = |p: &str| -> bool {
        let named = md.claims["payee"].as_array().is_some_and(|a| {
            a.iter()
                .any(|x| x.as_str().and_then(iban).as_deref() == Some(p))
        });
        let own = t
            .beneficiaries
            .get(&md.owner)
            .is_some_and(|l| l.iter().any(|(_, v)| v == p));
        named || own
    };
    match action.as_str() {
        "payment.transfer" | "standing_order.update" => {
            let payee = s("payee_iban");
            if !trusted_payee(&payee) {
                return Err(format!("paid `{payee}`, not a payee of `{}`", md.owner));
            }
            if !same_as_proposed("payee_iban", &payee) {
                return Err(format!("paid `{payee}`, which the agent did not propose"));
            }
            if t.sanctions.contains(&payee) {
                return Err("paid a sanctioned IBAN".into());
            }
            let a = amount.ok_or("no amount")?;
            if !(1..=1_000_000).contains(&a) {
                return Err(format!("amount {a} outside the hard cap"));
            }
            if a > 100_000 && !user_ok {
                return Err(format!(
                    "amount {a} above 1,000.00 without the user's step-up"
                ));
            }
            if action == "payment.transfer" {
                if s("from_account") != md.claims["account"].as_str().unwrap_or("?") {
                    return Err("paid from an account the mandate does not bind".into());
                }
                if s("currency") != md.claims["currency"].as_str().unwrap_or("?") {
                    return Err("paid in another currency".into());
                }
            } else {
                let order = s("order_id");
                let rec = t.orders.get(&md.owner).and_then(|o| o.get(&order));
                if rec.is_none() {
                    return Err(format!("changed `{order}`, not an order of `{}`", md.owner));
                }
            }
        }
        "user.update_password" | "user.update_info" => {
            if !user_ok {
                return Err("account change without the user".into());
            }
        }
        "invoice.pay" => {
            let inv = s("invoice_id");
            let rec = t
                .invoices
                .get(&md.owner)
                .and_then(|o| o.get(&inv))
                .ok_or(format!("paid `{inv}`, not an invoice of `{}`", md.owner))?;
            if rec["status"] != "open" || !ledger.paid.insert(format!("{}/{inv}", md.owner)) {
                return Err(format!("paid `{inv}` twice, or paid a paid invoice"));
            }
            let vendor = rec["vendor"].as_str().unwrap_or("").to_string();
            let on_file = ledger
                .vendor_iban
                .get(&(md.owner.clone(), vendor.clone()))
                .cloned()
                .or_else(|| {
                    t.vendors[&md.owner][&vendor]["iban"]
                        .as_str()
                        .and_then(iban)
                })
                .unwrap_or_default();
            if s("payee_iban") != on_file {
                return Err("paid an IBAN other than the vendor's on file".into());
            }
            if amount != Some(money(&rec["amount"])) {
                return Err("paid an amount other than the invoice's".into());
            }
            match t.vop.get(&on_file).and_then(|v| v["result"].as_str()) {
                Some("match") => {}
                Some("close_match") if user_ok => {}
                other => return Err(format!("paid despite verification of payee {other:?}")),
            }
            if amount.unwrap_or(0) > 1_000_000 && !user_ok {
                return Err("large invoice without step-up".into());
            }
        }
        "vendor.change_iban" => {
            let (v, cb) = (s("vendor_id"), s("callback_id"));
            let vrec = t
                .vendors
                .get(&md.owner)
                .and_then(|o| o.get(&v))
                .ok_or("unknown vendor")?;
            let crec = t
                .callbacks
                .get(&md.owner)
                .and_then(|o| o.get(&cb))
                .ok_or("unknown call-back")?;
            let digits = |x: &Value| {
                x.as_str()
                    .unwrap_or("")
                    .chars()
                    .filter(|c| c.is_ascii_digit() || *c == '+')
                    .collect::<String>()
            };
            if crec["vendor"] != json!(v) || digits(&crec["phone"]) != digits(&vrec["phone"]) {
                return Err("IBAN change without a call-back on the number on file".into());
            }
            let new = s("new_iban");
            if crec["iban"].as_str().and_then(iban).as_deref() != Some(new.as_str()) {
                return Err("IBAN change to a value the call-back did not confirm".into());
            }
            if !(user_ok && other_ok) {
                return Err("IBAN change without four eyes".into());
            }
            ledger.vendor_iban.insert((md.owner.clone(), v), new);
        }
        _ => unreachable!(),
    }
    let e = ledger.spent.entry(md.id.clone()).or_default();
    e.0 += if matches!(
        action.as_str(),
        "payment.transfer" | "standing_order.update" | "invoice.pay"
    ) {
        amount.unwrap_or(0)
    } else {
        0
    };
    e.1 += 1;
    if e.0 > md.budget || e.1 > md.calls {
        return Err(format!(
            "budget exceeded: {} of {}, {} of {} calls",
            e.0, md.budget, e.1, md.calls
        ));
    }
    Ok(())
}

/// The proposal a move makes, and the mandate it travels with.
fn proposal_of<'a>(ms: &'a [M], vals: &[Value], mv: &Move) -> (&'a M, Value) {
    let m = &ms[mv.mandate % ms.len()];
    let action = if mv.action < 200 {
        ORACLE_ACTIONS[mv.action as usize % ORACLE_ACTIONS.len()]
    } else {
        ACTIONS[mv.action as usize % ACTIONS.len()]
    };
    let mut args = if mv.base {
        base_args(action)
    } else {
        Map::new()
    };
    for (k, own, v) in &mv.args {
        let key = if *own {
            let ps = own_params(action);
            ps[*k % ps.len()]
        } else {
            PARAMS[*k]
        };
        args.insert(key.to_string(), vals[*v % vals.len()].clone());
    }
    let mut proposal = json!({"action": action, "args": args});
    if mv.extra_top_level {
        proposal["approval_level"] = json!(2);
    }
    (m, proposal)
}

/// Decides a move: the proposal, then (when PENDING and the move says so)
/// the proposal again with approvals. Returns every decision taken.
fn decide_move(gw: &Gateway, m: &M, proposal: &Value, mv: &Move) -> Result<Vec<Decision>, String> {
    let w = world();
    let d = gw
        .decide(&input(proposal.clone(), &m.token, vec![]))
        .map_err(|e| e.to_string())?;
    if d.decision != Outcome::Pending || mv.approvals == 0 {
        return Ok(vec![d]);
    }
    let op = d.operation_hash.clone().unwrap_or_default();
    let user = m
        .valid
        .as_ref()
        .map(|x| x.user.clone())
        .unwrap_or("emma".into());
    let user = if w.approvers.iter().any(|(n, _)| *n == user) {
        user
    } else {
        "emma".into()
    };
    let approvals = match mv.approvals {
        1 => vec![w.approve(&user, &op)],
        2 => vec![w.approve(&user, &op), w.approve("cfo", &op)],
        3 => vec![w.approve("noah", &op)],
        _ => vec![w.approve(&user, "sha256:00")],
    };
    let again = gw
        .decide(&input(proposal.clone(), &m.token, approvals))
        .map_err(|e| e.to_string())?;
    Ok(vec![d, again])
}

fn play(
    gw: &Gateway,
    t: &Truth,
    ms: &[M],
    vals: &[Value],
    moves: &[Move],
) -> Result<usize, String> {
    let mut ledger = Ledger::default();
    let mut decided = 0;
    for mv in moves {
        let (m, proposal) = proposal_of(ms, vals, mv);
        let ds = decide_move(gw, m, &proposal, mv)?;
        decided += ds.len();
        for d in &ds {
            if d.decision == Outcome::Allow && !d.replayed {
                check_executed(t, m, &proposal, &Exec::from(d), &mut ledger)
                    .map_err(|e| format!("{e}\nproposal: {proposal}\ndecision: {d:?}"))?;
            }
            if d.decision == Outcome::Deny && d.result.is_some() {
                return Err("a DENY carries an executor result".into());
            }
        }
    }
    Ok(decided)
}

/// The same moves, decided by several threads at once on one gateway; the
/// oracle then replays the executions in the order the receipt chain
/// records them (the order the store serialised them in).
fn play_concurrently(
    gw: &Gateway,
    t: &Truth,
    ms: &[M],
    vals: &[Value],
    lanes: &[Vec<Move>],
) -> Result<usize, String> {
    let results: Vec<Result<usize, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = lanes
            .iter()
            .map(|lane| {
                scope.spawn(move || {
                    let mut n = 0;
                    for mv in lane {
                        let (m, proposal) = proposal_of(ms, vals, mv);
                        n += decide_move(gw, m, &proposal, mv)?.len();
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a lane panicked".into())))
            .collect()
    });
    let mut decided = 0;
    for r in results {
        decided += r?;
    }
    let by_id: HashMap<String, &M> = ms
        .iter()
        .map(|m| {
            (
                m.token["mandate"]["id"].as_str().unwrap_or("").to_string(),
                m,
            )
        })
        .collect();
    let mut ledger = Ledger::default();
    for rec in gw.store().receipts().map_err(|e| e.to_string())? {
        let b = &rec.body;
        if b["decision"] != "ALLOW" || b["replayed"] == true {
            continue;
        }
        let id = b["mandate"]["id"].as_str().unwrap_or("");
        let m = by_id
            .get(id)
            .ok_or(format!("executed under an unknown mandate `{id}`"))?;
        let exec = Exec {
            action: b["action"].as_str().map(str::to_string),
            resolved: b["resolved"].as_object().cloned().unwrap_or_default(),
            approvers: b["approvers"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        };
        check_executed(t, m, &b["proposal"], &exec, &mut ledger)
            .map_err(|e| format!("{e}\nreceipt: {b}"))?;
    }
    Ok(decided)
}

fn cases() -> u32 {
    std::env::var("IPC_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(60)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn nothing_executes_unless_the_oracle_agrees(
        moves in proptest::collection::vec(a_move(), PER_CASE..=PER_CASE)
    ) {
        let w = world();
        let gw = w.gateway();
        let t = truth();
        let ms = mandates(w);
        let vals = values();
        let r = play(&gw, &t, &ms, &vals, &moves);
        prop_assert!(r.is_ok(), "{}", r.err().unwrap_or_default());
        // every decision left a receipt, and the chain verifies
        let recs = gw.store().receipts().unwrap();
        prop_assert_eq!(recs.len(), r.unwrap_or(0));
        // and the budgets, nonces and executions are what the receipts say
        let audit = intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None);
        prop_assert!(audit.is_ok(), "{:?}", audit);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: (cases() / 6).max(4), ..ProptestConfig::default() })]

    /// Interleavings: four threads propose at once on one SQLite store.
    #[test]
    fn concurrent_proposals_never_break_the_oracle(
        lanes in proptest::collection::vec(proptest::collection::vec(a_move(), 25..=25), 4..=4)
    ) {
        let w = world();
        let dir = tempfile::tempdir().unwrap();
        let store = intentplane::store::sqlite::SqliteStore::open(dir.path().join("s.db")).unwrap();
        let gw = w.gateway_with(std::sync::Arc::new(store));
        let t = truth();
        let ms = mandates(w);
        let vals = values();
        let r = play_concurrently(&gw, &t, &ms, &vals, &lanes);
        prop_assert!(r.is_ok(), "{}", r.err().unwrap_or_default());
        let recs = gw.store().receipts().unwrap();
        prop_assert_eq!(recs.len(), r.unwrap_or(0));
        // and the budgets, nonces and executions are what the receipts say
        let audit = intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None);
        prop_assert!(audit.is_ok(), "{:?}", audit);
    }
}

/// The fuzz is not vacuous: well-formed moves do execute, and the oracle
/// sees them.
#[test]
fn the_fuzz_reaches_executions() {
    let w = world();
    let gw = w.gateway();
    let t = truth();
    let ms = mandates(w);
    let moves: Vec<Move> = (0..6)
        .map(|i| Move {
            mandate: if i < 3 { 0 } else { 6 },
            action: [0, 1, 2, 3, 4, 3][i],
            base: true,
            args: vec![],
            extra_top_level: false,
            approvals: 2,
        })
        .collect();
    let mut ledger = Ledger::default();
    let vals = values();
    play(&gw, &t, &ms, &vals, &moves).unwrap();
    let recs = gw.store().receipts().unwrap();
    let executed = recs
        .iter()
        .filter(|r| r.body["decision"] == "ALLOW")
        .count();
    assert!(executed >= 4, "only {executed} executions");
    let _ = &mut ledger;
}
