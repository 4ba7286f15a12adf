//! What the gateway's tests share: [`TestWorld`] (on disk, in a temporary
//! folder), [`MandateSpec`], proposals ([`transfer`], [`input`]),
//! [`decide`] and [`assert_deny`].
//!
//! This is test code in the library, so that the stage modules' unit tests
//! and the integration tests use one copy: compiled for `cfg(test)` and
//! with the `testkit` feature only (which cargo turns on for tests and
//! examples), never by `cargo build` or `cargo install`. Like any test
//! code it panics, with a message, when the world cannot be set up, and
//! its assertions panic when they fail.

use crate::base::json::parse_time_str;
use crate::bundle::Bundle;
use crate::bundle::format::TablePack;
use crate::compile::build;
use crate::gateway::approval::{Approval, SignedApproval, random_id};
use crate::gateway::mandate;
use crate::gateway::world::World;
use crate::gateway::{
    Budget, Decision, Gateway, GatewayError, Input, Mandate, MandateToken, Outcome,
};
use crate::keys::SecretKey;
use crate::store::Store;
use crate::store::memory::MemoryStore;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The world's fixed clock.
pub const NOW: &str = "2026-11-27T18:40:00Z";
/// The test world's `gateway_id`: the audience of an owner's signed change.
pub const GATEWAY_ID: &str = "test-gateway";
/// The IBAN of the fraudster's PDF invoice: in no registry.
pub const ATTACKER_IBAN: &str = "DE89 3704 0044 0532 0130 00";
/// Emma's landlord, one of her beneficiaries.
pub const LANDLORD: &str = "DE44500105175407324931";
/// Acme's vendor Stadtwerke Nord (invoice INV-1001); not one of emma's
/// beneficiaries.
pub const SUPPLIER: &str = "DE02120300000000202051";
/// On the (global) sanctions list.
pub const SANCTIONED: &str = "GB29NWBK60161331926819";

/// The packs of [`TestWorld::new`].
const PACKS: [&str; 5] = ["bank", "ap", "health", "workspace", "code"];
/// Every pack the gateway's fuzz covers (`tests/gateway/fuzz.rs`: every
/// shipped pack but those its `NOT_YET_FUZZED` lists).
pub const ALL_PACKS: [&str; 9] = [
    "bank",
    "ap",
    "health",
    "workspace",
    "code",
    "slack",
    "travel",
    "dailylife",
    "github",
];
/// The approvers the world knows, each with a fresh key, and the owners
/// (tenants) and roles each may be the second pair of eyes for: the CFO is
/// acme's treasury, the clerk a colleague at acme without it, maria the
/// clinicians' chief, lead_bo the repositories' reviewer, and noah a
/// treasurer — of globex, not acme. The others approve only as users.
pub const APPROVERS: [(&str, &[&str], &[&str]); 8] = [
    ("emma", &[], &[]),
    ("noah", &["globex"], &["treasury"]),
    ("cfo", &["acme"], &["treasury"]),
    ("clerk", &["acme"], &[]),
    ("maria", &["dr_lee", "dr_kim", "dr_rao"], &[]),
    ("dr_lee", &[], &[]),
    ("dev_ana", &[], &[]),
    ("lead_bo", &["payments-api", "web-portal"], &[]),
];

/// A world on disk (in a temporary folder that lives as long as it does):
/// `bundle.json`, `world.toml`, the issuer's and the approvers' key pairs.
pub struct TestWorld {
    pub dir: tempfile::TempDir,
    pub bundle: Bundle,
    pub bundle_path: PathBuf,
    pub world_path: PathBuf,
    pub issuer: SecretKey,
    pub approvers: Vec<(String, SecretKey)>,
}

/// The crate's folder (where `packs/` is).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// [`NOW`] in seconds.
pub fn now() -> i64 {
    parse_time_str(NOW).expect("NOW is a valid time")
}

impl Default for TestWorld {
    fn default() -> Self {
        Self::new()
    }
}

impl TestWorld {
    pub fn new() -> Self {
        Self::with_packs(&PACKS)
    }

    /// A world of these shipped packs (their bundle and registries).
    pub fn with_packs(names: &[&str]) -> Self {
        let packs: Vec<PathBuf> = names.iter().map(|p| root().join("packs").join(p)).collect();
        Self::with_pack_dirs(&packs)
    }

    /// A world of the packs in these folders (each folder named as its
    /// pack, its registries in `registries/`).
    pub fn with_pack_dirs(packs: &[PathBuf]) -> Self {
        let report = build(packs);
        let mut bundle = report.bundle.clone().expect("shipped packs build");
        let dir = tempfile::tempdir().expect("a temporary folder");
        // signed, and its key pinned in the world, as a deployment runs it
        let bundle_key = SecretKey::generate().expect("bundle key");
        bundle_key
            .write_pair(&dir.path().join("bundle"))
            .expect("bundle key written");
        bundle.sign(&bundle_key);
        let bundle_path = dir.path().join("bundle.json");
        bundle.write(&bundle_path).expect("bundle written");
        let issuer = SecretKey::generate().expect("issuer key");
        issuer
            .write_pair(&dir.path().join("issuer"))
            .expect("issuer key written");
        let mut approvers = vec![];
        let mut approver_lines = String::new();
        for (name, owners, roles) in APPROVERS {
            let k = SecretKey::generate().expect("approver key");
            k.write_pair(&dir.path().join(name))
                .expect("approver key written");
            approver_lines.push_str(&format!(
                "{name} = {{ key = \"{name}.pub\", owners = {owners:?}, roles = {roles:?} }}\n"
            ));
            approvers.push((name.to_string(), k));
        }
        let mut regs = String::new();
        for p in packs {
            let name = p.file_name().map(|n| n.to_string_lossy().to_string());
            regs.push_str(&format!(
                "{} = {:?}\n",
                name.expect("a pack folder has a name"),
                p.join("registries").display().to_string()
            ));
        }
        let world_path = dir.path().join("world.toml");
        std::fs::write(
            &world_path,
            format!(
                "clock = \"{NOW}\"\ngateway_id = \"{GATEWAY_ID}\"\nmandate_keys = [\"issuer.pub\"]\nbundle_keys = [\"bundle.pub\"]\n[approvers]\n{approver_lines}[registries]\n{regs}"
            ),
        )
        .expect("world.toml written");
        TestWorld {
            dir,
            bundle,
            bundle_path,
            world_path,
            issuer,
            approvers,
        }
    }

    pub fn world(&self) -> World {
        World::load(&self.world_path, &self.bundle.table).expect("world.toml loads")
    }

    /// A gateway over a fresh in-memory store.
    pub fn gateway(&self) -> Gateway {
        self.gateway_with(Arc::new(MemoryStore::new()))
    }

    pub fn gateway_with(&self, store: Arc<dyn Store>) -> Gateway {
        Gateway::new(&self.bundle, self.world(), store).expect("gateway over the test bundle")
    }

    /// An approver's key; panics on a name the world does not know.
    pub fn key(&self, name: &str) -> &SecretKey {
        &self
            .approvers
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no approver `{name}` in the test world"))
            .1
    }

    /// Emma's bank mandate: her account, EUR, 2,000.00, 10 calls.
    pub fn emma(&self) -> Value {
        self.mandate(MandateSpec::bank("emma"))
    }

    /// The acme clerk's accounts-payable mandate (`vendors.write`,
    /// `payments.write`; a fresh id each call: two clerks' payments are
    /// two operations).
    pub fn clerk(&self) -> Value {
        self.mandate(MandateSpec::for_pack(
            "ap",
            "clerk",
            "acme",
            &["vendors.write", "payments.write"],
        ))
    }

    /// A mandate token (JSON) issued by the world's issuer through the
    /// product's own issuing code ([`mandate::issue`], as `ipc token issue`
    /// and the MCP proxy's session do: claims typed against the pack, the
    /// narrowing checked), issued a minute before [`NOW`]. Panics when the
    /// issuer refuses the spec, or would sign a claim or a narrowing other
    /// than as given: a test that needs such a token says so with
    /// [`TestWorld::forge_mandate`].
    pub fn mandate(&self, s: MandateSpec) -> Value {
        let pack = self
            .bundle
            .table
            .pack(&s.pack)
            .unwrap_or_else(|| panic!("no pack `{}` in the test bundle", s.pack));
        let actions = self.bundle.table.pack_actions(&pack.name);
        let token =
            mandate::issue(&s.issuing(pack), pack, &actions, &self.issuer).unwrap_or_else(|e| {
                panic!(
                    "the issuer refuses the mandate ({e}): forge it with TestWorld::forge_mandate"
                )
            });
        s.assert_signed_as_given(&token.mandate);
        serde_json::to_value(token).expect("mandate token as JSON")
    }

    /// A FORGED mandate token: exactly what `s` says, signed by the
    /// world's issuer without the issuing code's checks (a claim the pack
    /// does not declare or of the wrong type, a value in a spelling the
    /// gateway must canonicalise, a narrowing to sources the pack does not
    /// declare). Only for tests of how the gateway treats a token its
    /// issuer would never have signed; every other test uses
    /// [`TestWorld::mandate`].
    pub fn forge_mandate(&self, s: MandateSpec) -> Value {
        let m = Mandate {
            id: s.id,
            pack: s.pack,
            user: s.user,
            owner: s.owner,
            scopes: s.scopes,
            claims: s.claims,
            budget: Budget {
                amount: s.budget,
                calls: s.calls,
            },
            issued_at: now() - 60,
            expires_at: now() + s.ttl,
            sources: s.sources,
            parent: None,
        };
        let token = MandateToken::sign(m, &self.issuer).expect("mandate signed");
        serde_json::to_value(token).expect("mandate token as JSON")
    }

    /// `who`'s approval of an operation, valid ten minutes, fresh nonce.
    pub fn approve(&self, who: &str, op: &str) -> Value {
        let approval =
            SignedApproval::issue(who, op, now() + 600, self.key(who)).expect("approval signed");
        serde_json::to_value(approval).expect("approval as JSON")
    }

    /// `who`'s signed decline of an operation, valid ten minutes.
    pub fn decline(&self, who: &str, op: &str) -> Value {
        let d = crate::gateway::approval::SignedDecline::issue(who, op, now() + 600, self.key(who))
            .expect("decline signed");
        serde_json::to_value(d).expect("decline as JSON")
    }

    pub fn approve_with(&self, who: &str, op: &str, expires_at: i64, nonce: &str) -> Value {
        let approval = SignedApproval::sign(
            Approval {
                approver: who.into(),
                operation_hash: op.into(),
                expires_at,
                nonce: nonce.into(),
            },
            self.key(who),
        )
        .expect("approval signed");
        serde_json::to_value(approval).expect("approval as JSON")
    }
}

/// Sabotage, for the tests that prove the fuzz's oracle catches a broken
/// gateway (`tests/gateway/fuzz.rs`). Only in test builds: this module does not
/// exist in a release build, so no served gateway can be edited this way.
impl Gateway {
    /// Edits one action's runtime table in this running gateway, after
    /// every check [`Gateway::new`] makes at load: e.g. every parameter
    /// marked non-critical (provenance then vouches for nothing, so any
    /// value passes it), or no budget parameter (nothing is spent). The
    /// bundle hash is unchanged. The policies are replaced with
    /// [`Gateway::with_policies`] (a skipped step-up is the approval rules
    /// removed).
    pub fn edit_action_for_sabotage(
        &mut self,
        action: &str,
        edit: impl FnOnce(&mut crate::ir::Action),
    ) -> Result<(), GatewayError> {
        let a = self
            .actions
            .get_mut(action)
            .ok_or_else(|| GatewayError::UnknownAction {
                action: action.to_string(),
            })?;
        edit(&mut a.table.action);
        Ok(())
    }
}

/// What a mandate holds, to edit before [`TestWorld::mandate`] issues it
/// (or [`TestWorld::forge_mandate`] signs it as it is).
pub struct MandateSpec {
    pub id: String,
    pub pack: String,
    pub user: String,
    pub owner: String,
    pub scopes: Vec<String>,
    pub claims: Map<String, Value>,
    /// In cents.
    pub budget: i64,
    pub calls: u64,
    /// Seconds from [`NOW`] to expiry.
    pub ttl: i64,
    /// The narrowing: checked against the pack when issued, signed as
    /// given when forged.
    pub sources: crate::gateway::mandate::Narrowing,
}

impl MandateSpec {
    /// A bank mandate for `user`: `<user>-checking`, EUR, no named payee,
    /// `payments.write` and `account.write`, 2,000.00, 10 calls, one hour.
    pub fn bank(user: &str) -> Self {
        let mut claims = Map::new();
        claims.insert("account".into(), json!(format!("{user}-checking")));
        claims.insert("currency".into(), json!("EUR"));
        claims.insert("payee".into(), json!([]));
        MandateSpec {
            id: format!("m-{user}-{}", random_id().expect("os randomness")),
            pack: "bank".into(),
            user: user.into(),
            owner: user.into(),
            scopes: vec!["payments.write".into(), "account.write".into()],
            claims,
            budget: 200_000,
            calls: 10,
            ttl: 3600,
            sources: Default::default(),
        }
    }

    /// A mandate on any pack, without claims: 100,000.00, 100 calls.
    pub fn for_pack(pack: &str, user: &str, owner: &str, scopes: &[&str]) -> Self {
        MandateSpec {
            id: format!("m-{user}-{}", random_id().expect("os randomness")),
            pack: pack.into(),
            user: user.into(),
            owner: owner.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            claims: Map::new(),
            budget: 10_000_000,
            calls: 100,
            ttl: 3600,
            sources: Default::default(),
        }
    }

    pub fn claim(mut self, k: &str, v: Value) -> Self {
        self.claims.insert(k.into(), v);
        self
    }

    /// The issuing code's spec of this mandate ([`mandate::MandateSpec`]):
    /// a set claim's members each a pair, the narrowing as `--only`.
    fn issuing(&self, pack: &TablePack) -> mandate::MandateSpec {
        let mut claims = vec![];
        for (name, value) in &self.claims {
            let collection = pack
                .claims
                .iter()
                .any(|d| &d.name == name && d.ty.is_collection());
            match value {
                Value::Array(items) if collection => {
                    claims.extend(items.iter().map(|v| (name.clone(), v.clone())));
                }
                v => claims.push((name.clone(), v.clone())),
            }
        }
        mandate::MandateSpec {
            user: self.user.clone(),
            owner: Some(self.owner.clone()),
            scopes: self.scopes.clone(),
            claims,
            budget: self.budget,
            calls: self.calls,
            issued_at: now() - 60,
            // expires `ttl` seconds after NOW
            ttl: self.ttl + 60,
            id: Some(self.id.clone()),
            only: self
                .sources
                .iter()
                .map(|(t, list)| (t.clone(), list.clone()))
                .collect(),
            strict: vec![],
        }
    }

    /// Every claim and the narrowing signed as given (the issuer adds only
    /// the empty set claims left out); else the test wants
    /// [`TestWorld::forge_mandate`].
    fn assert_signed_as_given(&self, signed: &Mandate) {
        for (name, value) in &signed.claims {
            let given = self.claims.get(name);
            let as_given = match given {
                Some(g) => g == value,
                None => value == &Value::Array(vec![]),
            };
            assert!(
                as_given,
                "the issuer signs claim `{name}` as {value}, not as {given:?}: forge the mandate with TestWorld::forge_mandate"
            );
        }
        assert_eq!(
            signed.sources, self.sources,
            "the issuer signs another narrowing: forge the mandate with TestWorld::forge_mandate"
        );
    }

    /// Narrows `action.param` to `sources`.
    pub fn narrow(mut self, target: &str, sources: &[&str]) -> Self {
        self.sources.insert(
            target.into(),
            sources.iter().map(|s| s.to_string()).collect(),
        );
        self
    }
}

/// acme's clerk's change of Stadtwerke Nord's IBAN, confirmed on call-back
/// CB-7 (four eyes by the treasury), under [`TestWorld::clerk`]'s mandate.
pub fn change_iban() -> Value {
    json!({"action": "vendor.change_iban", "args": {
        "vendor_id": "V-STADTWERKE", "callback_id": "CB-7", "new_iban": "ES91 2100 0418 4502 0005 1332"}})
}

/// A `payment.transfer` from emma's account, in EUR.
pub fn transfer(iban: &str, amount: Value) -> Value {
    json!({"action": "payment.transfer", "args": {
        "from_account": "emma-checking", "payee_iban": iban, "amount": amount, "currency": "EUR"}})
}

pub fn input(proposal: Value, mandate: &Value, approvals: Vec<Value>) -> Input {
    Input {
        proposal,
        mandate: Some(mandate.clone()),
        approvals,
        malformed: None,
    }
}

/// Decides on a proposal under a mandate, without approvals.
pub fn decide(gw: &Gateway, proposal: Value, mandate: &Value) -> Decision {
    gw.decide(&input(proposal, mandate, vec![]))
        .expect("the gateway decides")
}

/// A DENY at `stage` whose reason contains `needle`, without a result.
pub fn assert_deny(d: &Decision, stage: &str, needle: &str) {
    assert_eq!(d.decision, Outcome::Deny, "{d:#?}");
    assert_eq!(d.stage.name(), stage, "{d:#?}");
    let reason = d.reason.clone().unwrap_or_default();
    assert!(
        reason.contains(needle),
        "reason {reason:?} lacks {needle:?}"
    );
    assert!(d.result.is_none(), "a DENY never has a result");
}

pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}

/// `inputs` decided as one batch for any tenant (tests and benchmarks):
/// [`Gateway::decide_all`]'s decisions, or its error.
pub fn decide_batch(gw: &Gateway, inputs: &[Input]) -> Result<Vec<Decision>, GatewayError> {
    let mut out = Vec::with_capacity(inputs.len());
    gw.decide_all(crate::gateway::Ask::batch(inputs), &mut out)?;
    Ok(out)
}
