//! A test world: the shipped packs built into a bundle, fresh keys for the
//! issuer and the approvers, the packs' registries, a fixed clock.
#![allow(dead_code)]

use intentplane::bundle::{Bundle, build};
use intentplane::gateway::approval::{Approval, SignedApproval, random_id};
use intentplane::gateway::json::parse_time_str;
use intentplane::gateway::world::World;
use intentplane::gateway::{Budget, Decision, Gateway, Input, Mandate, MandateToken, Outcome};
use intentplane::keys::SecretKey;
use intentplane::store::Store;
use intentplane::store::memory::MemoryStore;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const NOW: &str = "2026-11-27T18:40:00Z";
pub const ATTACKER_IBAN: &str = "DE89 3704 0044 0532 0130 00";
pub const LANDLORD: &str = "DE44500105175407324931";
pub const SUPPLIER: &str = "DE02120300000000202051";
pub const SANCTIONED: &str = "GB29NWBK60161331926819";

pub struct TestWorld {
    pub dir: tempfile::TempDir,
    pub bundle: Bundle,
    pub bundle_path: PathBuf,
    pub world_path: PathBuf,
    pub issuer: SecretKey,
    pub approvers: Vec<(String, SecretKey)>,
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn now() -> i64 {
    parse_time_str(NOW).unwrap()
}

impl TestWorld {
    pub fn new() -> Self {
        let packs: Vec<PathBuf> = ["bank", "ap", "health", "workspace", "code"]
            .iter()
            .map(|p| root().join("packs").join(p))
            .collect();
        let report = build(&packs);
        let bundle = report.bundle.clone().expect("shipped packs build");
        let dir = tempfile::tempdir().unwrap();
        let bundle_path = dir.path().join("bundle.json");
        bundle.write(&bundle_path).unwrap();
        let issuer = SecretKey::generate().unwrap();
        issuer.write_pair(&dir.path().join("issuer")).unwrap();
        let mut approvers = vec![];
        let mut approver_lines = String::new();
        for name in [
            "emma", "noah", "cfo", "clerk", "maria", "dr_lee", "dev_ana", "lead_bo",
        ] {
            let k = SecretKey::generate().unwrap();
            k.write_pair(&dir.path().join(name)).unwrap();
            approver_lines.push_str(&format!("{name} = \"{name}.pub\"\n"));
            approvers.push((name.to_string(), k));
        }
        let mut regs = String::new();
        for p in ["bank", "ap", "health", "workspace", "code"] {
            regs.push_str(&format!(
                "{p} = {:?}\n",
                root()
                    .join("packs")
                    .join(p)
                    .join("registries")
                    .display()
                    .to_string()
            ));
        }
        let world_path = dir.path().join("world.toml");
        std::fs::write(
            &world_path,
            format!(
                "clock = \"{NOW}\"\nmandate_keys = [\"issuer.pub\"]\n[approvers]\n{approver_lines}[registries]\n{regs}"
            ),
        )
        .unwrap();
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
        World::load(&self.world_path, &self.bundle.table).unwrap()
    }

    pub fn gateway(&self) -> Gateway {
        self.gateway_with(Arc::new(MemoryStore::new()))
    }

    pub fn gateway_with(&self, store: Arc<dyn Store>) -> Gateway {
        Gateway::new(&self.bundle, self.world(), store).unwrap()
    }

    pub fn key(&self, name: &str) -> &SecretKey {
        &self.approvers.iter().find(|(n, _)| n == name).unwrap().1
    }

    /// Emma's bank mandate: her account, EUR, 2,000.00, 10 calls.
    pub fn emma(&self) -> Value {
        self.mandate(MandateSpec::bank("emma"))
    }

    pub fn mandate(&self, s: MandateSpec) -> Value {
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
        };
        serde_json::to_value(MandateToken::sign(m, &self.issuer).unwrap()).unwrap()
    }

    pub fn approve(&self, who: &str, op: &str) -> Value {
        self.approve_with(who, op, now() + 600, &random_id())
    }

    pub fn approve_with(&self, who: &str, op: &str, expires_at: i64, nonce: &str) -> Value {
        serde_json::to_value(
            SignedApproval::sign(
                Approval {
                    approver: who.into(),
                    operation_hash: op.into(),
                    expires_at,
                    nonce: nonce.into(),
                },
                self.key(who),
            )
            .unwrap(),
        )
        .unwrap()
    }
}

pub struct MandateSpec {
    pub id: String,
    pub pack: String,
    pub user: String,
    pub owner: String,
    pub scopes: Vec<String>,
    pub claims: Map<String, Value>,
    pub budget: i64,
    pub calls: u64,
    pub ttl: i64,
}

impl MandateSpec {
    pub fn bank(user: &str) -> Self {
        let mut claims = Map::new();
        claims.insert("account".into(), json!(format!("{user}-checking")));
        claims.insert("currency".into(), json!("EUR"));
        claims.insert("payee".into(), json!([]));
        MandateSpec {
            id: format!("m-{user}-{}", random_id()),
            pack: "bank".into(),
            user: user.into(),
            owner: user.into(),
            scopes: vec!["payments.write".into(), "account.write".into()],
            claims,
            budget: 200_000,
            calls: 10,
            ttl: 3600,
        }
    }
    pub fn for_pack(pack: &str, user: &str, owner: &str, scopes: &[&str]) -> Self {
        MandateSpec {
            id: format!("m-{user}-{}", random_id()),
            pack: pack.into(),
            user: user.into(),
            owner: owner.into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            claims: Map::new(),
            budget: 10_000_000,
            calls: 100,
            ttl: 3600,
        }
    }
    pub fn claim(mut self, k: &str, v: Value) -> Self {
        self.claims.insert(k.into(), v);
        self
    }
}

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

pub fn decide(gw: &Gateway, proposal: Value, mandate: &Value) -> Decision {
    gw.decide(&input(proposal, mandate, vec![])).unwrap()
}

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
