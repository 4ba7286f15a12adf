//! The session pass: the session's mandates, read from `token` or issued
//! now (one per pack the tools use, signed by `issuer_key`, whose public
//! key the world then trusts), the user's key and the session's options.

use super::SessionConfig;
use super::ctx::{Diags, Dir, Span, sp, to_json};
use super::diag::ConfigError;
use super::file::{ConfigFile, S, SessionFile};
use super::tools::Decided;
use crate::bundle::Bundle;
use crate::diagnostics::suggest;
use crate::gateway::MandateToken;
use crate::gateway::mandate::MandateSpec;
use crate::gateway::world::{Approver, World};
use crate::keys::SecretKey;
use serde_json::Value;
use std::path::PathBuf;

/// A pack's name and the session's mandate token for it.
type Mandates = Vec<(String, Value)>;

/// The session's mandates: read from `token`, or issued now, one per
/// pack the tools use; the issuer's key verifies them and the user's
/// key approves as the user.
pub(super) fn session(
    cfg: &ConfigFile,
    bundle: &Bundle,
    used: &[String],
    actions: &[Decided<'_>],
    world: &mut World,
    dir: &Dir,
    d: &mut Diags,
) -> Option<SessionConfig> {
    let Some(s) = &cfg.session else {
        d.err(ConfigError::Session {
            message: "no `[session]`".into(),
            span: sp(0..0),
            help: Some("the session's mandate: `[session]` with `user`, `scopes`, `claims`, `budget` and `issuer_key`, or `token = \"mandate.json\"`".into()),
        });
        return None;
    };
    let sf = s.get_ref();
    let (user, mandates, issuer_key) = match &sf.token {
        Some(t) => {
            let (user, mandates) = from_token(sf, t, used, world, dir, d)?;
            (user, mandates, None)
        }
        None => {
            let issue = Issue {
                sf,
                span: s.span(),
                bundle,
                used,
                actions,
            };
            let (user, mandates, key) = issue.run(world, dir, d)?;
            (user, mandates, Some(key))
        }
    };
    let user_key = user_key(sf, &user, world, dir, d)?;
    let (approvals_dir, decline_for, mandate_requests) = options(sf, issuer_key.is_some(), dir, d)?;
    let token = mandates
        .first()
        .map(|(_, t)| t.clone())
        .unwrap_or(Value::Null);
    Some(SessionConfig {
        token,
        mandates,
        user,
        user_key,
        approvals_dir,
        issued: sf.token.is_none(),
        decline_for,
        issuer_key,
        mandate_requests,
    })
}

/// A `token` session: the token read, of the one pack the tools use,
/// signed by a key of the world's and unexpired (refused now rather than
/// at every call). Its user and its mandate.
fn from_token(
    sf: &SessionFile,
    t: &S<String>,
    used: &[String],
    world: &World,
    dir: &Dir,
    d: &mut Diags,
) -> Option<(String, Mandates)> {
    if sf.user.is_some()
        || sf.issuer_key.is_some()
        || !sf.claims.is_empty()
        || sf.budget.is_some()
        || !sf.scopes.is_empty()
    {
        d.err(ConfigError::Session {
            message: "`token` and the fields that issue one are both given".into(),
            span: sp(t.span()),
            help: Some("use an existing token (`token`), or issue one at start-up (`user`, `scopes`, `claims`, `budget`, `issuer_key`), not both".into()),
        });
        return None;
    }
    let path = dir.existing(d, "token", t, None)?;
    let tok = crate::base::json::read_file(&path).and_then(|v| {
        serde_json::from_value::<MandateToken>(v.clone())
            .map(|m| (v, m))
            .map_err(|e| e.to_string())
    });
    let (value, parsed) = match tok {
        Ok(x) => x,
        Err(e) => {
            d.err(ConfigError::Session {
                message: e,
                span: sp(t.span()),
                help: None,
            });
            return None;
        }
    };
    if let Some(other) = used.iter().find(|p| **p != parsed.mandate.pack) {
        d.err(ConfigError::Session {
            message: format!(
                "the token covers pack `{}`, but a tool is an action of pack `{other}`",
                parsed.mandate.pack
            ),
            span: sp(t.span()),
            help: Some(
                "a mandate covers one pack: issue the session's mandates from the config instead"
                    .into(),
            ),
        });
        return None;
    }
    if let Some(message) = token_problem(&parsed, world, d)? {
        d.err(ConfigError::Session {
            message,
            span: sp(t.span()),
            help: Some("issue a new one with `ipc token issue`, signed by a key the world lists under `mandate_keys`".into()),
        });
        return None;
    }
    Some((
        parsed.mandate.user.clone(),
        vec![(parsed.mandate.pack.clone(), value)],
    ))
}

/// What is wrong with a token (`Some(None)`: nothing; `None`: the clock
/// cannot be read, reported).
fn token_problem(parsed: &MandateToken, world: &World, d: &mut Diags) -> Option<Option<String>> {
    let now = match world.clock.map_or_else(crate::gateway::unix_now, Ok) {
        Ok(t) => t,
        Err(e) => {
            d.err(clock_error(e));
            return None;
        }
    };
    Some(match world.mandate_keys.get(&parsed.key_id) {
        None => Some(format!(
            "the token is signed by key `{}`, which is not among the world's `mandate_keys`",
            parsed.key_id
        )),
        Some(key) => {
            let msg = crate::canonical::to_jcs(&parsed.mandate).map_err(|e| e.to_string());
            match msg.and_then(|m| {
                key.verify(m.as_bytes(), &parsed.signature)
                    .map_err(|e| e.to_string())
            }) {
                Err(_) => Some("the token's signature does not verify".into()),
                Ok(()) if parsed.mandate.expires_at <= now => {
                    Some(format!("the token `{}` has expired", parsed.mandate.id))
                }
                Ok(()) => None,
            }
        }
    })
}

/// A session the proxy issues from `[session]`.
struct Issue<'a> {
    sf: &'a SessionFile,
    /// The `[session]` table's.
    span: Span,
    bundle: &'a Bundle,
    used: &'a [String],
    actions: &'a [Decided<'a>],
}

impl Issue<'_> {
    fn err(&self, d: &mut Diags, message: String, span: Span, help: Option<String>) {
        d.err(ConfigError::Session {
            message,
            span: sp(span),
            help,
        });
    }

    /// The user, one mandate per pack the tools use (the first pack's
    /// when they use none), and the key that signed them, which the world
    /// then trusts.
    fn run(
        &self,
        world: &mut World,
        dir: &Dir,
        d: &mut Diags,
    ) -> Option<(String, Mandates, SecretKey)> {
        let sf = self.sf;
        let Some(u) = &sf.user else {
            self.err(
                d,
                "no `user` (or `token`)".into(),
                self.span.clone(),
                Some("`user = \"emma\"`: the person the agent acts for".into()),
            );
            return None;
        };
        let user = u.get_ref().clone();
        let Some(k) = &sf.issuer_key else {
            self.err(
                d,
                "no `issuer_key` to sign the session's mandate".into(),
                self.span.clone(),
                Some("`issuer_key = \"keys/issuer.key\"` (from `ipc keygen`)".into()),
            );
            return None;
        };
        let key = dir.secret(d, "issuer key", k)?;
        let budget = self.budget(d)?;
        self.claims_declared(d)?;
        let now = match crate::gateway::unix_now() {
            Ok(t) => t,
            Err(e) => {
                d.err(clock_error(e));
                return None;
            }
        };
        let ttl = sf.ttl.as_ref().map(|t| *t.get_ref()).unwrap_or(3600);
        let targets: Vec<String> = if self.used.is_empty() {
            let packs = self.bundle.table.packs.iter().take(1);
            packs.map(|p| p.name.clone()).collect()
        } else {
            self.used.to_vec()
        };
        let mut mandates = vec![];
        for pack in &targets {
            let Some(tp) = self.bundle.table.pack(pack) else {
                continue;
            };
            let spec = MandateSpec {
                user: user.clone(),
                owner: sf.owner.clone(),
                scopes: sf.scopes.clone(),
                claims: self.claims(tp),
                budget,
                calls: sf.calls.unwrap_or(100),
                issued_at: now,
                ttl,
                id: None,
                only: vec![],
                strict: vec![],
            };
            mandates.push((pack.clone(), self.issue(&spec, tp, &key, d)?));
        }
        // the proxy issued the mandates: its issuer verifies them
        let public = key.public();
        world.mandate_keys.insert(public.id(), public);
        Some((user, mandates, key))
    }

    /// The session's budget in minor units, spent by the tools of one
    /// pack at most: a budget is per mandate, and two packs with budgeted
    /// tools would each get the whole session budget.
    fn budget(&self, d: &mut Diags) -> Option<i64> {
        let budget = match &self.sf.budget {
            None => 0,
            Some(b) => {
                let text = match b.get_ref() {
                    toml::Value::String(s) => s.trim().to_string(),
                    toml::Value::Integer(i) => i.to_string(),
                    toml::Value::Float(f) => format!("{f}"),
                    other => format!("{other}"),
                };
                match crate::base::Money::parse(&text).map(crate::base::Money::minor) {
                    Ok(m) if m >= 0 => m,
                    Ok(_) => {
                        self.err(d, "the budget cannot be negative".into(), b.span(), None);
                        return None;
                    }
                    Err(e) => {
                        self.err(
                            d,
                            format!("budget: {e}"),
                            b.span(),
                            Some("an amount in major units: `budget = \"2000.00\"`".into()),
                        );
                        return None;
                    }
                }
            }
        };
        let budgeted: Vec<&str> = self
            .used
            .iter()
            .filter(|p| {
                self.actions
                    .iter()
                    .any(|(_, a)| &a.pack == *p && a.action.budget.is_some())
            })
            .map(String::as_str)
            .collect();
        if budgeted.len() > 1 && budget > 0 {
            let packs = budgeted
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>();
            let span = self
                .sf
                .budget
                .as_ref()
                .map(|b| b.span())
                .unwrap_or(self.span.clone());
            self.err(
                d,
                format!("tools of packs {} both spend the budget, and a mandate covers one pack", packs.join(" and ")),
                span,
                Some("the session's budget would be counted once per pack: keep the budgeted tools in one pack".into()),
            );
            return None;
        }
        Some(budget)
    }

    /// Every claim of `[session.claims]` declared by some pack (it goes
    /// to the packs that declare it).
    fn claims_declared(&self, d: &mut Diags) -> Option<()> {
        let mut ok = true;
        for name in self.sf.claims.keys() {
            let all: Vec<&str> = self
                .bundle
                .table
                .packs
                .iter()
                .flat_map(|tp| tp.claims.iter().map(|c| c.name.as_str()))
                .collect();
            if !all.contains(&name.get_ref().as_str()) {
                self.err(
                    d,
                    format!("no pack declares the claim `{}`", name.get_ref()),
                    name.span(),
                    suggest(name.get_ref(), all.iter().copied())
                        .or_else(|| Some(format!("the claims are: {}", all.join(", ")))),
                );
                ok = false;
            }
        }
        ok.then_some(())
    }

    /// The claims of `[session.claims]` the pack declares, a list as one
    /// claim per item.
    fn claims(&self, tp: &crate::bundle::TablePack) -> Vec<(String, Value)> {
        let mut claims = vec![];
        for (name, v) in &self.sf.claims {
            if !tp.claims.iter().any(|c| &c.name == name.get_ref()) {
                continue;
            }
            match to_json(v.get_ref()) {
                Value::Array(items) => {
                    claims.extend(items.into_iter().map(|i| (name.get_ref().clone(), i)))
                }
                one => claims.push((name.get_ref().clone(), one)),
            }
        }
        claims
    }

    /// One pack's mandate, issued and signed, as JSON.
    fn issue(
        &self,
        spec: &MandateSpec,
        tp: &crate::bundle::TablePack,
        key: &SecretKey,
        d: &mut Diags,
    ) -> Option<Value> {
        match crate::gateway::mandate::issue(spec, tp, &[], key) {
            Ok(tok) => match serde_json::to_value(&tok) {
                Ok(v) => Some(v),
                Err(e) => {
                    self.err(d, e.to_string(), self.span.clone(), None);
                    None
                }
            },
            Err(e) => {
                self.err(
                    d,
                    format!("pack `{}`: {e}", tp.name),
                    self.span.clone(),
                    None,
                );
                None
            }
        }
    }
}

/// The user's key (`user_key`), the world's approver for the user: the
/// same key as the world's, or added to it.
fn user_key(
    sf: &SessionFile,
    user: &str,
    world: &mut World,
    dir: &Dir,
    d: &mut Diags,
) -> Option<Option<SecretKey>> {
    let Some(k) = &sf.user_key else {
        return Some(None);
    };
    let key = dir.secret(d, "user key", k)?;
    match world.approvers.get(user) {
        Some(a) if a.key.id() != key.public().id() => {
            d.err(ConfigError::Session {
                message: format!("the world's approver `{user}` has another key than `user_key`"),
                span: sp(k.span()),
                help: Some("the user approves with one key: make them the same".into()),
            });
            return None;
        }
        Some(_) => {}
        None => {
            world
                .approvers
                .insert(user.to_string(), Approver::user(key.public()));
            if let Err(e) = world.check_approver_keys() {
                d.err(ConfigError::Session {
                    message: e,
                    span: sp(k.span()),
                    help: None,
                });
                return None;
            }
        }
    }
    Some(Some(key))
}

/// `approvals_dir`, `decline_for` and `mandate_requests` (which needs a
/// session the proxy issues, `issued`).
fn options(
    sf: &SessionFile,
    issued: bool,
    dir: &Dir,
    d: &mut Diags,
) -> Option<(Option<PathBuf>, i64, bool)> {
    let approvals_dir = match &sf.approvals_dir {
        Some(a) => Some(dir.existing(
            d,
            "approvals folder",
            a,
            Some("create the folder where `ipc approve` output is dropped".into()),
        )?),
        None => None,
    };
    let decline_for = match &sf.decline_for {
        Some(f) if *f.get_ref() < 0 => {
            d.err(ConfigError::Session {
                message: "`decline_for` cannot be negative".into(),
                span: sp(f.span()),
                help: Some("seconds a declined step-up stands: `decline_for = 600`".into()),
            });
            return None;
        }
        Some(f) => *f.get_ref(),
        None => super::DEFAULT_DECLINE_FOR,
    };
    let mandate_requests = match &sf.mandate_requests {
        Some(r) if *r.get_ref() && !issued => {
            d.err(ConfigError::Session {
                message: "`mandate_requests` needs a session the proxy issues: a `token` session has no key to sign a child mandate".into(),
                span: sp(r.span()),
                help: Some("issue the session from `[session]` (`user`, `scopes`, `issuer_key`, ...) instead of `token`".into()),
            });
            return None;
        }
        Some(r) => *r.get_ref(),
        None => false,
    };
    Some((approvals_dir, decline_for, mandate_requests))
}

/// The system clock cannot be read: nothing is issued or checked at time 0
/// (a mandate issued then would be dated before anything it meets).
fn clock_error(e: crate::gateway::ClockError) -> ConfigError {
    ConfigError::Load {
        what: "clock",
        message: e.to_string(),
        span: None,
        help: Some("set the machine's clock (NTP); the proxy starts only with the time".into()),
    }
}
