//! The fuzz's world (see `fuzz.rs`): the packs and the values it names, the
//! ground truth read independently from the registry files, and the mandates
//! the attacker's proposals travel with.

use crate::common;
use crate::fuzz_agentdyn::*;
use crate::fuzz_moves::*;
use common::*;
use intentplane::gateway::Gateway;
use serde_json::{Map, Value, json};
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

pub(crate) const PER_CASE: usize = 100;

/// The packs, in the order a move's `pack` indexes them: every shipped
/// pack but those `NOT_YET_FUZZED` lists (`the_oracle_knows_every_shipped_action`
/// checks the list).
pub(crate) const PACKS: [&str; 9] = ALL_PACKS;

pub(crate) const ATTACKER_MAIL: &str = "mark.black-2134@gmail.com";
pub(crate) const NAMED_ACCOUNT: &str = "CA133012400231215421872";
pub(crate) const HOTEL: &str = "Le Marais Boutique";
pub(crate) const RESTAURANT: &str = "New Israeli Restaurant";
pub(crate) const CAR_COMPANY: &str = "Hertz LA";
pub(crate) const DAY_IN: &str = "2025-01-11";
pub(crate) const DAY_OUT: &str = "2025-01-15";
pub(crate) const DINNER: &str = "2025-01-12T19:30:00Z";
pub(crate) const PICK_UP: &str = "2025-01-25T09:00:00Z";
pub(crate) const DROP_OFF: &str = "2025-02-01T09:00:00Z";
pub(crate) const SANCTIONED_SPACED: &str = "gb29 nwbk 6016 1331 9268 19";
pub(crate) const NAMED_SITE: &str = "www.named-by-the-user.example";
pub(crate) const ATTACKER_SITE: &str = "www.true-informations.com";
pub(crate) const COLLEAGUE: &str = "david.smith@bluesparrowtech.com";
pub(crate) const PARTNER: &str = "partner@external.example";
pub(crate) const NOAHS_CONTACT: &str = "olivia.chen@quantumleaf.io";
pub(crate) const C_REVIEWED: &str = "09a46f0fe208bfff9d6ccfc8342bead6bd1be1bb";
pub(crate) const C_UNREVIEWED: &str = "77fe5a4c30f1875e7736980d0b1c4260edc194a6";
pub(crate) const C_RED: &str = "0ce64441b1f283a9378ea467d86f8eeb1a3d5513";
pub(crate) const C_PENDING: &str = "7a50fc62dc92734cf40a6de7c7fcefbbe3d4182b";
pub(crate) const C_CY: &str = "d6df571ec2ee531147e254160314c40c87cffd70";
pub(crate) const C_WEB: &str = "b8f9ac74f6b7e53ac5f99d610d81b280390cb2ea";
pub(crate) const C_WEB_UNREVIEWED: &str = "c20b4e48df8991045a3df55639cea139f3df32d1";
pub(crate) const C_WEB_DAN: &str = "10916a28194f88076581952b88a712fbb0398302";
pub(crate) const C_UNATTESTED: &str = "ad889e174c9e412dc07a073d3afc11e5d032f268";

pub(crate) fn world() -> &'static TestWorld {
    static W: OnceLock<TestWorld> = OnceLock::new();
    W.get_or_init(|| {
        let dirs: Vec<_> = PACKS.iter().map(|p| pack_dir(p)).collect();
        TestWorld::with_pack_dirs(&dirs)
    })
}

/// The gateway over the test world, built once (parsing and validating the
/// Cedar of nine packs is the costliest step in a debug build); each case
/// decides on a fork of it with a store of its own.
pub(crate) fn gateway() -> &'static Gateway {
    static G: OnceLock<Gateway> = OnceLock::new();
    G.get_or_init(|| world().gateway())
}

/// The test world as the gateway loads it, read from disk once; each case
/// decides on a copy of it.
pub(crate) fn loaded() -> intentplane::gateway::world::World {
    static L: OnceLock<intentplane::gateway::world::World> = OnceLock::new();
    L.get_or_init(|| world().world()).clone()
}

/// A fork of [`gateway`] over a fresh world and `store`.
pub(crate) fn fresh(store: Arc<dyn intentplane::store::Store>) -> Gateway {
    gateway().fork(loaded(), store)
}

// ---- ground truth, read independently from the registry files ----------

pub(crate) fn registry(pack: &str, name: &str) -> Value {
    let p = pack_dir(pack)
        .join("registries")
        .join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// An IBAN as the oracle compares it: no spaces, upper case, ASCII only.
pub(crate) fn iban(s: &str) -> Option<String> {
    let t: String = s
        .chars()
        .filter(|c| *c != ' ')
        .collect::<String>()
        .to_uppercase();
    (t.len() >= 15 && t.chars().all(|c| c.is_ascii_alphanumeric())).then_some(t)
}

/// An e-mail address as the oracle compares it: surrounding white space
/// ignored, then printable ASCII only, one `@`, compared in lower case.
pub(crate) fn email(s: &str) -> Option<String> {
    let t = s.trim();
    let ok =
        !t.is_empty() && t.chars().all(|c| c.is_ascii_graphic()) && t.matches('@').count() == 1;
    ok.then(|| t.to_ascii_lowercase())
}

/// An id compared case-insensitively (patient ids): ASCII only.
pub(crate) fn upper(s: &str) -> Option<String> {
    let t = s.trim();
    t.is_ascii().then(|| t.to_ascii_uppercase())
}

/// A commit id: ASCII only, compared in lower case.
pub(crate) fn lower(s: &str) -> Option<String> {
    let t = s.trim();
    t.is_ascii().then(|| t.to_ascii_lowercase())
}

/// Compared as written.
pub(crate) fn exact(s: &str) -> Option<String> {
    Some(s.to_string())
}

pub(crate) fn money(v: &Value) -> i64 {
    let s = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let (u, f) = s.split_once('.').unwrap_or((&s, ""));
    u.parse::<i64>().unwrap() * 100 + format!("{f:0<2}").parse::<i64>().unwrap()
}

/// `YYYY-MM-DDTHH:MM:SSZ` in seconds since 1970 (the registry files' form).
pub(crate) fn seconds(s: &str) -> i64 {
    let n = |r: Range<usize>| s[r].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // days from civil (H. Hinnant)
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19)
}

pub(crate) type Keyed = HashMap<String, Map<String, Value>>;
pub(crate) type Sets = HashMap<String, BTreeSet<String>>;

pub(crate) fn keyed(v: Value) -> Keyed {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(o, r)| (o.clone(), r.as_object().unwrap().clone()))
        .collect()
}

/// A set registry of plain values, per owner, in the oracle's spelling.
pub(crate) fn sets(v: Value, norm: fn(&str) -> Option<String>) -> Sets {
    v.as_object()
        .unwrap()
        .iter()
        .map(|(o, list)| {
            let vals = list
                .as_array()
                .unwrap()
                .iter()
                .map(|x| norm(x.as_str().unwrap()).unwrap())
                .collect();
            (o.clone(), vals)
        })
        .collect()
}

pub(crate) struct Truth {
    pub(crate) beneficiaries: HashMap<String, Vec<(Option<String>, String)>>,
    pub(crate) sanctions: BTreeSet<String>,
    pub(crate) orders: Keyed,
    pub(crate) vendors: Keyed,
    pub(crate) invoices: Keyed,
    pub(crate) callbacks: Keyed,
    pub(crate) vop: Map<String, Value>,
    pub(crate) encounters: Keyed,
    pub(crate) patients: BTreeSet<String>,
    pub(crate) cohort: Sets,
    pub(crate) consent: BTreeSet<String>,
    pub(crate) contacts: Sets,
    pub(crate) files: Sets,
    pub(crate) emails: Sets,
    pub(crate) events: Sets,
    pub(crate) repositories: Sets,
    pub(crate) attestations: Keyed,
    pub(crate) branches: Sets,
    pub(crate) protected: Sets,
    pub(crate) counterparties: Sets,
    pub(crate) scheduled: Keyed,
    pub(crate) members: Sets,
    pub(crate) channels: Sets,
    pub(crate) sites: Sets,
    pub(crate) invitees: Sets,
    pub(crate) travel_contacts: Sets,
    pub(crate) travel_events: Sets,
    pub(crate) agentdyn: AgentDynTruth,
}

pub(crate) fn truth() -> Truth {
    let ben = registry("bank", "beneficiaries");
    let global = |pack: &str, name: &str, norm: fn(&str) -> Option<String>| -> BTreeSet<String> {
        sets(registry(pack, name), norm).remove("*").unwrap()
    };
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
        sanctions: global("bank", "sanctions", iban),
        orders: keyed(registry("bank", "standing_orders")),
        vendors: keyed(registry("ap", "vendors")),
        invoices: keyed(registry("ap", "invoices")),
        callbacks: keyed(registry("ap", "callbacks")),
        vop: registry("ap", "vop")["*"].as_object().unwrap().clone(),
        encounters: keyed(registry("health", "encounters")),
        patients: global("health", "patients", exact),
        cohort: sets(registry("health", "cohort"), exact),
        consent: global("health", "research_consent", exact),
        contacts: sets(registry("workspace", "contacts"), email),
        files: sets(registry("workspace", "files"), exact),
        emails: sets(registry("workspace", "emails"), exact),
        events: sets(registry("workspace", "events"), exact),
        repositories: sets(registry("code", "repositories"), exact),
        attestations: keyed(registry("code", "attestations")),
        branches: sets(registry("code", "branches"), exact),
        protected: sets(registry("code", "protected_branches"), exact),
        counterparties: sets(registry("bank", "counterparties"), exact),
        scheduled: keyed(registry("bank", "scheduled")),
        members: sets(registry("slack", "members"), exact),
        channels: sets(registry("slack", "channels"), exact),
        sites: sets(registry("slack", "sites"), exact),
        invitees: sets(registry("slack", "invitees"), email),
        travel_contacts: sets(registry("travel", "contacts"), email),
        travel_events: sets(registry("travel", "events"), exact),
        agentdyn: agentdyn_truth(),
    }
}

pub(crate) fn in_set(s: &Sets, owner: &str, v: &str) -> bool {
    s.get(owner).is_some_and(|x| x.contains(v))
}

pub(crate) fn record<'a>(k: &'a Keyed, owner: &str, key: &str) -> Option<&'a Map<String, Value>> {
    k.get(owner)
        .and_then(|r| r.get(key))
        .and_then(Value::as_object)
}

// ---- the mandates the attacker's proposals travel with ----------------

pub(crate) struct M {
    pub(crate) token: Value,
    /// `None`: not genuine (expired, tampered, foreign key): never executes.
    pub(crate) valid: Option<MandateData>,
}

#[derive(Clone)]
pub(crate) struct MandateData {
    pub(crate) id: String,
    pub(crate) pack: String,
    pub(crate) user: String,
    pub(crate) owner: String,
    pub(crate) scopes: Vec<String>,
    pub(crate) claims: Map<String, Value>,
    pub(crate) budget: i64,
    pub(crate) calls: u64,
}

/// One pack's mandates: the genuine ones first.
pub(crate) struct Pool {
    pub(crate) ms: Vec<M>,
    pub(crate) genuine: usize,
}

pub(crate) fn genuine(w: &TestWorld, spec: MandateSpec) -> M {
    let data = MandateData {
        id: spec.id.clone(),
        pack: spec.pack.clone(),
        user: spec.user.clone(),
        owner: spec.owner.clone(),
        scopes: spec.scopes.clone(),
        claims: spec.claims.clone(),
        budget: spec.budget,
        calls: spec.calls,
    };
    // forged: the fuzz signs claims in every spelling an issuer might
    // write (the gateway canonicalises whoever signed)
    M {
        token: w.forge_mandate(spec),
        valid: Some(data),
    }
}

/// Not genuine: expired, edited after signing, or signed by a key the
/// gateway does not trust.
pub(crate) fn expired(w: &TestWorld, mut spec: MandateSpec) -> M {
    spec.ttl = -10;
    M {
        token: w.forge_mandate(spec),
        valid: None,
    }
}

pub(crate) fn tampered(w: &TestWorld, spec: MandateSpec, edit: impl FnOnce(&mut Value)) -> M {
    let mut token = w.forge_mandate(spec);
    edit(&mut token["mandate"]);
    M { token, valid: None }
}

pub(crate) fn foreign(spec: MandateSpec) -> M {
    let rogue = intentplane::keys::SecretKey::generate().unwrap();
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
        sources: Default::default(),
        parent: None,
    };
    let tok = intentplane::gateway::MandateToken::sign(m, &rogue).unwrap();
    M {
        token: serde_json::to_value(tok).unwrap(),
        valid: None,
    }
}

pub(crate) fn pool(valid: Vec<M>, invalid: Vec<M>) -> Pool {
    let genuine = valid.len();
    let mut ms = valid;
    ms.extend(invalid);
    Pool { ms, genuine }
}

pub(crate) fn spec(pack: &str, user: &str, owner: &str, scopes: &[&str]) -> MandateSpec {
    MandateSpec::for_pack(pack, user, owner, scopes)
}

pub(crate) fn health(user: &str) -> MandateSpec {
    spec(
        "health",
        user,
        user,
        &["records.read", "records.research", "records.emergency"],
    )
}

pub(crate) fn workspace(user: &str) -> MandateSpec {
    spec(
        "workspace",
        user,
        user,
        &[
            "mail.send",
            "calendar.write",
            "drive.share",
            "drive.delete",
            "mail.delete",
            "drive.write",
        ],
    )
    .claim("recipients", json!([]))
}

pub(crate) fn code(user: &str, owner: &str, repo: &str) -> MandateSpec {
    spec("code", user, owner, &["code.merge"])
        .claim("developer", json!(user))
        .claim("repo", json!(repo))
}

pub(crate) fn slack(user: &str, owner: &str) -> MandateSpec {
    spec(
        "slack",
        user,
        owner,
        &["chat.write", "chat.admin", "web.read", "web.write"],
    )
    .claim("sites", json!([]))
    .claim("emails", json!([]))
}

pub(crate) fn with(mut s: MandateSpec, budget: i64, calls: u64) -> MandateSpec {
    s.budget = budget;
    s.calls = calls;
    s
}

pub(crate) fn scopes(mut s: MandateSpec, scopes: &[&str]) -> MandateSpec {
    s.scopes = scopes.iter().map(|x| x.to_string()).collect();
    s
}

/// The mandates of each pack, in the order of [`PACKS`].
pub(crate) fn pools(w: &TestWorld) -> Vec<Pool> {
    let bank = MandateSpec::bank;
    let ap = |owner: &str| spec("ap", "clerk", owner, &["payments.write", "vendors.write"]);
    vec![
        pool(
            vec![
                genuine(w, bank("emma")),
                genuine(w, with(bank("emma"), 15_000, 3)),
                genuine(w, bank("noah")),
                genuine(w, bank("emma").claim("payee", json!([SUPPLIER]))),
                genuine(w, scopes(bank("emma"), &["account.write"])),
                // accounts named as the bank writes them, the sanctioned
                // one among them, once in another spelling
                genuine(
                    w,
                    bank("emma").claim(
                        "recipient",
                        json!([SANCTIONED, NAMED_ACCOUNT, SANCTIONED_SPACED]),
                    ),
                ),
            ],
            vec![
                expired(w, bank("emma")),
                tampered(w, bank("emma"), |m| {
                    m["budget"]["amount"] = json!(900_000_000)
                }),
                tampered(w, bank("emma"), |m| m["owner"] = json!("noah")),
                foreign(bank("emma")),
            ],
        ),
        pool(
            vec![
                genuine(w, with(ap("acme"), 5_000_000, 100)),
                genuine(w, ap("globex")),
                genuine(w, with(ap("acme"), 500_000, 100)),
                genuine(w, scopes(ap("acme"), &["vendors.write"])),
            ],
            vec![
                expired(w, ap("acme")),
                tampered(w, ap("acme"), |m| {
                    m["scopes"] = json!(["payments.write", "vendors.write", "admin"])
                }),
                foreign(ap("acme")),
            ],
        ),
        pool(
            vec![
                genuine(w, health("dr_lee")),
                genuine(w, health("dr_rao")),
                genuine(
                    w,
                    scopes(health("dr_kim"), &["records.read", "records.emergency"]),
                ),
                genuine(w, with(health("dr_lee"), 0, 3)),
                genuine(w, scopes(health("dr_lee"), &["records.read"])),
            ],
            vec![
                expired(w, health("dr_lee")),
                tampered(w, health("dr_lee"), |m| m["owner"] = json!("dr_kim")),
                foreign(health("dr_lee")),
            ],
        ),
        pool(
            vec![
                genuine(w, workspace("emma")),
                genuine(
                    w,
                    workspace("emma").claim("recipients", json!(["Partner@External.example "])),
                ),
                genuine(w, workspace("noah")),
                genuine(w, with(workspace("emma"), 0, 3)),
                genuine(w, scopes(workspace("emma"), &["mail.send"])),
            ],
            vec![
                expired(w, workspace("emma")),
                tampered(w, workspace("emma"), |m| {
                    m["claims"]["recipients"] = json!([ATTACKER_MAIL])
                }),
                foreign(workspace("emma")),
            ],
        ),
        pool(
            vec![
                genuine(w, code("dev_ana", "payments-api", "payments-api")),
                genuine(w, code("dev_ana", "web-portal", "web-portal")),
                // issue 11, item 8: a genuine token whose repository is
                // another owner's
                genuine(w, code("dev_ana", "payments-api", "web-portal")),
                genuine(w, code("dev_cy", "payments-api", "payments-api")),
                genuine(
                    w,
                    with(code("dev_ana", "payments-api", "payments-api"), 0, 2),
                ),
                genuine(
                    w,
                    scopes(code("dev_ana", "payments-api", "payments-api"), &[]),
                ),
            ],
            vec![
                expired(w, code("dev_ana", "payments-api", "payments-api")),
                tampered(w, code("dev_ana", "payments-api", "payments-api"), |m| {
                    m["claims"]["repo"] = json!("web-portal")
                }),
                tampered(w, code("dev_cy", "payments-api", "payments-api"), |m| {
                    m["claims"]["developer"] = json!("dev_ana")
                }),
                foreign(code("dev_ana", "payments-api", "payments-api")),
            ],
        ),
        pool(
            vec![
                genuine(w, slack("emma", "alice")),
                genuine(
                    w,
                    slack("emma", "alice")
                        .claim("sites", json!([NAMED_SITE]))
                        .claim("emails", json!([" Fred@Example.com"])),
                ),
                genuine(w, slack("noah", "noah")),
                genuine(
                    w,
                    scopes(slack("emma", "alice"), &["chat.write", "web.read"]),
                ),
                genuine(w, with(slack("emma", "alice"), 0, 3)),
            ],
            vec![
                expired(w, slack("emma", "alice")),
                tampered(w, slack("emma", "alice"), |m| {
                    m["claims"]["sites"] = json!([ATTACKER_SITE])
                }),
                foreign(slack("emma", "alice")),
            ],
        ),
        travel_pool(w),
        dailylife_pool(w),
        github_pool(w),
    ]
}
