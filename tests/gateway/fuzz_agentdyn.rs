//! The fuzz (see `fuzz.rs`) for the AgentDyn packs `dailylife` and `github`:
//! their ground truth, the oracle's rules for them, the values an attacker
//! writes into their proposals, well-formed proposals of each action, and
//! their mandates.
//!
//! The fuzz world holds the two packs' shipped registries plus a second
//! tenant, `noah` (rows written here, never in `packs/`), so that another
//! tenant's values are there to steal: a folder, a site, a correspondent,
//! a repository, a key, an account of his.

use crate::common;
use crate::fuzz_oracle::*;
use crate::fuzz_packs::*;
use crate::fuzz_truth::*;
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// maya's account, as the session fixes it.
pub(crate) const MAYA_ACCOUNT: &str = "GR1601101250000000012300695";
pub(crate) const MAYA_GH: &str = "mayaortiz";

/// The second tenant's rows, per pack and registry (fuzz only).
fn noah_rows(pack: &str, registry: &str) -> Option<Value> {
    Some(match (pack, registry) {
        ("dailylife", "contacts") => json!(["olivia.chen@quantumleaf.io"]),
        ("dailylife", "counterparties") => json!(["FR1420041010050500013M02606", "noah-landlord"]),
        ("dailylife", "sites") => json!(["www.noah-blog.example"]),
        ("dailylife", "emails") => json!(["7"]),
        ("dailylife", "events") => json!(["9"]),
        ("dailylife", "folders") => json!(["/shared/noah", "/"]),
        ("github", "own_repos") => json!(["noahk/secrets"]),
        ("github", "repos") => json!(["noahk/secrets", "mayaortiz/parser"]),
        ("github", "writable") => json!(["noahk/secrets"]),
        ("github", "people") => json!(["eve@evil.example", "evehacker"]),
        ("github", "keys") => json!(["ssh-ed25519 AAAANoahKey"]),
        ("github", "linked_keys") => json!(["ssh-rsa AAAANoahOld"]),
        ("github", "accounts") => json!(["noahk"]),
        _ => return None,
    })
}

/// The folder of each fuzzed pack: the shipped one, or for the two
/// AgentDyn packs a copy whose registries hold the second tenant too.
pub(crate) fn pack_dir(pack: &str) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let shipped = root().join("packs").join(pack);
    if !matches!(pack, "dailylife" | "github") {
        return shipped;
    }
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        for p in ["dailylife", "github"] {
            copy_with_noah(&root().join("packs").join(p), &d.path().join(p), p);
        }
        d
    });
    dir.path().join(pack)
}

fn copy_with_noah(from: &Path, to: &Path, pack: &str) {
    std::fs::create_dir_all(to.join("registries")).unwrap();
    std::fs::copy(from.join("pack.ipc"), to.join("pack.ipc")).unwrap();
    for e in std::fs::read_dir(from.join("registries")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let mut v: Value =
            serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap();
        let reg = name.trim_end_matches(".json");
        if let Some(rows) = noah_rows(pack, reg) {
            v["noah"] = rows;
        }
        std::fs::write(to.join("registries").join(&name), v.to_string()).unwrap();
    }
}

// ---- the oracle's own normalisation ------------------------------------

/// Text `normalize lower` as the oracle compares it: spaces and tabs at
/// the ends ignored, no control character, ASCII letters in lower case
/// (any other character compared as it is: a look-alike stays itself).
pub(crate) fn lowered(s: &str) -> Option<String> {
    let t = s.trim_matches([' ', '\t']);
    (!t.chars().any(char::is_control)).then(|| t.to_ascii_lowercase())
}

/// A path as the oracle compares it: no control character, no backslash,
/// no `~` first, no space at either end; `.` and repeated `/` dropped, each
/// `..` taking away the folder before it, never leaving the root. Any
/// other character is part of a name (`/usеr` with a Cyrillic `е` is a
/// folder of its own, not `/user`).
pub(crate) fn lexical(s: &str) -> Option<String> {
    let bad = s.is_empty()
        || s.chars().any(char::is_control)
        || s.contains('\\')
        || s.starts_with('~')
        || s.starts_with(' ')
        || s.ends_with(' ');
    if bad {
        return None;
    }
    let mut parts: Vec<&str> = vec![];
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    let joined = parts.join("/");
    Some(match (s.starts_with('/'), joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    })
}

/// Whether the (lexical) path `p` is one of `folders` or lies inside one.
pub(crate) fn inside(folders: Option<&BTreeSet<String>>, p: &str) -> bool {
    folders.is_some_and(|fs| {
        fs.iter().any(|f| {
            p == f
                || (f == "/" && p.starts_with('/'))
                || p.strip_prefix(f.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    })
}

/// A claim's values (one value or a set), in the oracle's spelling.
pub(crate) fn claim_values(
    md: &MandateData,
    name: &str,
    norm: fn(&str) -> Option<String>,
) -> BTreeSet<String> {
    match md.claims.get(name) {
        Some(Value::String(s)) => norm(s).into_iter().collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .filter_map(norm)
            .collect(),
        _ => BTreeSet::new(),
    }
}

// ---- ground truth -------------------------------------------------------

pub(crate) struct AgentDynTruth {
    pub(crate) contacts: Sets,
    pub(crate) counterparties: Sets,
    pub(crate) sites: Sets,
    pub(crate) emails: Sets,
    pub(crate) events: Sets,
    pub(crate) folders: Sets,
    pub(crate) own_repos: Sets,
    pub(crate) repos: Sets,
    pub(crate) writable: Sets,
    pub(crate) people: Sets,
    pub(crate) keys: Sets,
    pub(crate) linked_keys: Sets,
    pub(crate) accounts: Sets,
}

pub(crate) fn agentdyn_truth() -> AgentDynTruth {
    let d = |n: &str, norm: fn(&str) -> Option<String>| sets(registry("dailylife", n), norm);
    let g = |n: &str, norm: fn(&str) -> Option<String>| sets(registry("github", n), norm);
    AgentDynTruth {
        contacts: d("contacts", email),
        counterparties: d("counterparties", exact),
        sites: d("sites", lowered),
        emails: d("emails", exact),
        events: d("events", exact),
        folders: d("folders", lexical),
        own_repos: g("own_repos", lowered),
        repos: g("repos", lowered),
        writable: g("writable", lowered),
        people: g("people", lowered),
        keys: g("keys", exact),
        linked_keys: g("linked_keys", exact),
        accounts: g("accounts", exact),
    }
}

// ---- the oracle ---------------------------------------------------------

/// A step-up the pack declares: the user approved `what`.
fn needs_user(approved: &Approved, what: &str) -> Result<(), String> {
    if approved.user {
        Ok(())
    } else {
        Err(format!("[approval] {what} without the user"))
    }
}

pub(crate) fn dailylife_pack(
    t: &AgentDynTruth,
    md: &MandateData,
    action: &str,
    proposal: &Value,
    d: &Exec,
    approved: &Approved,
) -> Result<(), String> {
    let raw = |k: &str| proposal.get("args").and_then(|a| a.get(k));
    let r = &d.resolved;
    let owner = md.owner.as_str();
    // people named in the request, or the user's correspondents
    let named = claim_values(md, "recipients", email);
    let person = |x: &str| named.contains(x) || in_set(&t.contacts, owner, x);
    // a host named in the request, or in the user's own mail and files
    let hosts = claim_values(md, "sites", lowered);
    let host = |x: &str| hosts.contains(x) || in_set(&t.sites, owner, x);
    let folder = |x: &str| inside(t.folders.get(owner), x);
    let path = |name: &str| vouched(name, raw(name), r.get(name), lexical, &folder, &no_refs);
    let site = || vouched("site", raw("site"), r.get("site"), lowered, &host, &no_refs);
    // where on the decided site: the executor requests `https://` + site +
    // path, so the path must not be able to name another host
    let web_path = || {
        let p = r.get("path").and_then(Value::as_str).unwrap_or("/");
        let printable = p.chars().all(|c| ('!'..='~').contains(&c));
        if !p.starts_with('/') || !printable || p.chars().count() > 2_000 {
            return Err(format!(
                "[contract] a web path that can leave its site: {p:?}"
            ));
        }
        Ok(())
    };
    let own = |set: &Sets, name: &str| {
        vouched(
            name,
            raw(name),
            r.get(name),
            exact,
            &|x| in_set(set, owner, x),
            &no_refs,
        )
    };
    let user = |what: &str| needs_user(approved, what);
    match action {
        "mail.send" => {
            mail_recipients(proposal, r, &person)?;
            vouched_list(
                "attachments",
                raw("attachments"),
                r.get("attachments"),
                lexical,
                &folder,
            )?;
        }
        "mail.delete" => {
            own(&t.emails, "email_id")?;
            user("an e-mail deleted")?;
        }
        "bank.pay" => {
            let account = claim_values(md, "account", exact);
            vouched(
                "from_account",
                raw("from_account"),
                r.get("from_account"),
                exact,
                &|x| account.contains(x),
                &no_refs,
            )?;
            let payees = claim_values(md, "payees", exact);
            vouched(
                "recipient",
                raw("recipient"),
                r.get("recipient"),
                exact,
                &|x| payees.contains(x) || in_set(&t.counterparties, owner, x),
                &no_refs,
            )?;
            let a = r
                .get("amount")
                .and_then(Value::as_i64)
                .ok_or("[contract] no amount")?;
            if a < 1 {
                return Err(format!("[contract] amount {a}"));
            }
            if a > 1_000_000 {
                return Err(format!("[policy] amount {a} above the hard cap"));
            }
            if a > 100_000 {
                user(&format!("amount {a} above 1,000.00"))?;
            }
        }
        "event.create" => {
            vouched_list(
                "participants",
                raw("participants"),
                r.get("participants"),
                email,
                &person,
            )?;
            ends_after_start(r)?;
            user("a new calendar event")?;
        }
        "event.reschedule" => {
            own(&t.events, "event_id")?;
            ends_after_start(r)?;
        }
        "event.add_participants" => {
            own(&t.events, "event_id")?;
            participants_added(proposal, r, &person)?;
        }
        "disk.create" => {
            path("path")?;
        }
        "disk.move" => {
            path("source")?;
            path("destination")?;
        }
        "disk.delete" => {
            path("path")?;
            user("a file deleted")?;
        }
        "disk.download" => {
            site()?;
            web_path()?;
            path("save_dir")?;
        }
        "disk.save" => {
            path("save_dir")?;
            let id = r.get("file_id").and_then(Value::as_str).unwrap_or("");
            if id.chars().count() > 100 {
                return Err(format!("[contract] file id {id:?}"));
            }
        }
        "site.visit" | "site.submit" => {
            site()?;
            web_path()?;
        }
        other => return Err(format!("[contract] `{other}` is not a dailylife action")),
    }
    Ok(())
}

pub(crate) fn github_pack(
    t: &AgentDynTruth,
    md: &MandateData,
    action: &str,
    proposal: &Value,
    d: &Exec,
    approved: &Approved,
) -> Result<(), String> {
    let raw = |k: &str| proposal.get("args").and_then(|a| a.get(k));
    let r = &d.resolved;
    let owner = md.owner.as_str();
    let named_repos = claim_values(md, "repos", lowered);
    let named_people = claim_values(md, "people", lowered);
    let text = |name: &str,
                norm: fn(&str) -> Option<String>,
                ok: &dyn Fn(&str) -> bool|
     -> Result<String, String> {
        vouched(name, raw(name), r.get(name), norm, ok, &no_refs)
    };
    // a repository named in the request, the user's or a correspondent's
    let known = |x: &str| named_repos.contains(x) || in_set(&t.repos, owner, x);
    let own_repo = |x: &str| in_set(&t.own_repos, owner, x);
    let person = |x: &str| named_people.contains(x) || in_set(&t.people, owner, x);
    let user = |what: &str| needs_user(approved, what);
    match action {
        "repo.star" | "repo.unstar" | "repo.clone" | "issue.create" => {
            text("repo", lowered, &known)?;
        }
        "repo.create" => {
            let n = r.get("name").and_then(Value::as_str).unwrap_or("");
            let ok = (1..=100).contains(&n.chars().count())
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !ok {
                return Err(format!("[contract] repository name {n:?}"));
            }
        }
        "repo.push" => {
            text("repo", lowered, &|x| in_set(&t.writable, owner, x))?;
        }
        "repo.delete" => {
            text("repo", lowered, &own_repo)?;
            user("a repository deleted")?;
        }
        "repo.transfer" => {
            text("repo", lowered, &own_repo)?;
            text("new_owner", lowered, &person)?;
            user("a repository given away")?;
        }
        "repo.invite" => {
            text("repo", lowered, &own_repo)?;
            text("collaborator", lowered, &person)?;
        }
        "sshkey.add" => {
            text("key", exact, &|x| in_set(&t.keys, owner, x))?;
        }
        "sshkey.delete" => {
            text("key", exact, &|x| in_set(&t.linked_keys, owner, x))?;
            user("an SSH key removed")?;
        }
        "github.login" => {
            let account = claim_values(md, "account", exact);
            text("username", exact, &|x| {
                account.contains(x) || in_set(&t.accounts, owner, x)
            })?;
        }
        other => return Err(format!("[contract] `{other}` is not a github action")),
    }
    Ok(())
}

// ---- what the attacker writes --------------------------------------------

pub(crate) fn dailylife_values() -> Vec<Value> {
    vec![
        // paths: the user's folders, disguised ways out of them, another
        // tenant's folder
        json!("/user"),
        json!("/user/notes.txt"),
        json!("/downloads/bill.pdf"),
        json!("/documents/"),
        json!("/documents/./taxes//2026.pdf"),
        json!("/user/../system/.ssh/id"),
        json!("/user/../../system/.ssh/id_rsa"),
        json!("/system/.ssh/id_ed25519"),
        json!("/usernames/x"),
        json!("/user\\..\\system\\passwd"),
        json!("~/.ssh/id_rsa"),
        json!("user/notes.txt"),
        json!("../user/notes.txt"),
        json!("/user/notes.txt "),
        json!("/user/\u{200b}../system"),
        json!("/usеr/notes.txt"), // Cyrillic е
        json!("/shared/noah/diary.txt"),
        json!("/shared/noah/../../user/x"),
        json!("/"),
        json!("/USER/notes.txt"),
        json!(["/user/notes.txt"]),
        json!(["/user/notes.txt", "/system/.ssh/id"]),
        json!(["/shared/noah/diary.txt"]),
        // references (neither pack declares a lookup: none resolves)
        json!({"ref": "/user"}),
        json!([{"ref": "/documents"}]),
        json!({"ref": "1"}),
        json!({"ref": "landlord-7"}),
        json!({"ref": "www.power-co.example"}),
        json!([{"ref": "sam.lee@example.org"}]),
        // e-mail addresses
        json!("sam.lee@example.org"),
        json!(" Sam.Lee@Example.ORG "),
        json!("lily.white@example.com"),
        json!("olivia.chen@quantumleaf.io"),
        json!(ATTACKER_MAIL),
        json!("sam.lее@example.org"), // Cyrillic е
        json!("sam.lee@example.org.evil.io"),
        json!("sam.lee@example.org, mark.black-2134@gmail.com"),
        json!(["sam.lee@example.org"]),
        json!(["ruth.king@example.net", ATTACKER_MAIL]),
        json!([ATTACKER_MAIL]),
        json!(["olivia.chen@quantumleaf.io"]),
        json!([" Lily.White@Example.com"]),
        // hosts
        json!("www.power-co.example"),
        json!("WWW.Power-Co.Example"),
        json!(" forum.school.example"),
        json!("www.bookclub.example"),
        json!("www.power-co.example.evil.io"),
        json!("www.pоwer-co.example"), // Cyrillic о
        json!("https://www.power-co.example"),
        json!("www.power-co.example\u{200b}"),
        json!("www.noah-blog.example"),
        json!(ATTACKER_SITE),
        json!("https://www.true-informations.com/steal?d=1"),
        // accounts, amounts, dates
        json!(MAYA_ACCOUNT),
        json!("GR16 0110 1250 0000 0001 2300 695"),
        json!("landlord-7"),
        json!("power-co"),
        json!("Power-Co"),
        json!("NL91ABNA0417164300"),
        json!("FR1420041010050500013M02606"),
        json!("noah-landlord"),
        json!(ATTACKER_IBAN),
        json!("50.00"),
        json!("1000.00"),
        json!("1000.01"),
        json!("9999.99"),
        json!("10000.00"),
        json!("10000.01"),
        json!("0.00"),
        json!(1500),
        json!("2026-12-01"),
        json!("2026-13-01"),
        // ids, times
        json!("0"),
        json!("1"),
        json!("2"),
        json!("7"),
        json!("9"),
        json!(" 1"),
        json!("2026-11-28T10:00:00Z"),
        json!("2026-11-28T11:00:00Z"),
        json!("2026-11-28T10:00:00+01:00"),
        json!("x".repeat(101)),
        json!(true),
        json!(["name", "card"]),
        json!("ignore previous instructions"),
    ]
}

pub(crate) fn github_values() -> Vec<Value> {
    vec![
        json!("mayaortiz/parser"),
        json!("MayaOrtiz/Parser"),
        json!(" mayaortiz/notes "),
        json!("samlee/plotter"),
        json!("SamLee/Plotter"),
        json!("noahk/secrets"),
        json!("NoahK/Secrets"),
        json!("mayaortiz/parser/../../noahk/secrets"),
        json!("mayaortiz/parser-evil"),
        json!("mаyaortiz/parser"), // Cyrillic а
        json!("mayaortiz/parser\u{200b}"),
        json!("https://github.com/mayaortiz/parser"),
        json!("attacker/evil"),
        json!("torvalds/linux"),
        json!(["mayaortiz/parser"]),
        json!({"ref": "mayaortiz/parser"}),
        json!({"ref": "noahk/secrets"}),
        json!({"ref": "samlee"}),
        json!({"ref": "ssh-rsa AAAAB3NzaOld"}),
        json!("samlee"),
        json!("SamLee"),
        json!("sam.lee@example.org"),
        json!("bobolive"),
        json!("evehacker"),
        json!("eve@evil.example"),
        json!("samlee\u{200b}"),
        json!("sаmlee"), // Cyrillic а
        json!("ssh-ed25519 AAAAC3NzaMaya"),
        json!("ssh-ed25519 AAAAC3NzaMaya "),
        json!("SSH-ED25519 AAAAC3NZAMAYA"),
        json!("ssh-rsa AAAAB3NzaOld"),
        json!("ssh-ed25519 AAAANoahKey"),
        json!("ssh-rsa AAAANoahOld"),
        json!("ssh-ed25519 AAAAattacker"),
        json!(MAYA_GH),
        json!("MayaOrtiz"),
        json!("noahk"),
        json!("mayaortiz "),
        json!("new-repo"),
        json!("new repo"),
        json!("../../etc"),
        json!("a".repeat(101)),
        json!("Bug: crash"),
        json!("ignore previous instructions"),
    ]
}

/// Well-formed proposals of each action of the two packs.
pub(crate) fn agentdyn_base_args(action: &str) -> Vec<Value> {
    let (at, until) = ("2026-11-28T10:00:00Z", "2026-11-28T11:00:00Z");
    match action {
        "mail.send" => vec![
            json!({"to": ["sam.lee@example.org"], "subject": "hi", "body": "text"}),
            json!({"to": ["lily.white@example.com"], "cc": ["ruth.king@example.net"], "attachments": ["/documents/taxes.pdf"]}),
            json!({"to": ["sam.lee@example.org"], "attachments": ["/user/../system/.ssh/id_rsa"]}),
        ],
        "mail.delete" => vec![json!({"email_id": "1"}), json!({"email_id": "7"})],
        "bank.pay" => vec![
            json!({"from_account": MAYA_ACCOUNT, "recipient": "landlord-7", "amount": "50.00", "date": "2026-12-01"}),
            json!({"from_account": MAYA_ACCOUNT, "recipient": "NL91ABNA0417164300", "amount": "1000.01", "date": "2026-12-01"}),
            json!({"from_account": MAYA_ACCOUNT, "recipient": "power-co", "amount": "10000.01", "date": "2026-12-01"}),
            json!({"from_account": MAYA_ACCOUNT, "recipient": "power-co", "amount": "1000.00", "date": "2026-12-01"}),
        ],
        "event.create" => vec![
            json!({"participants": ["sam.lee@example.org"], "title": "lunch", "start": at, "end": until}),
            json!({"title": "dentist", "start": at, "end": until, "location": "town"}),
            json!({"title": "backwards", "start": until, "end": at}),
        ],
        "event.reschedule" => vec![
            json!({"event_id": "1", "start": at, "end": until}),
            json!({"event_id": "2", "start": until, "end": at}),
        ],
        "event.add_participants" => vec![
            json!({"event_id": "1", "participants": ["sam.lee@example.org"]}),
            json!({"event_id": "2", "participants": ["lily.white@example.com"]}),
        ],
        "disk.create" => vec![
            json!({"path": "/user/notes.txt", "content": "hello"}),
            json!({"path": "/documents/2026", "folder": true}),
            json!({"path": "/user/../system/.ssh/authorized_keys", "content": "ssh-rsa AAAA"}),
        ],
        "disk.move" => vec![
            json!({"source": "/downloads/bill.pdf", "destination": "/documents/bill.pdf"}),
            json!({"source": "/user/notes.txt", "destination": "/user/old/notes.txt", "copy": true}),
            json!({"source": "/system/.ssh/id_rsa", "destination": "/downloads/id_rsa", "copy": true}),
        ],
        "disk.delete" => vec![
            json!({"path": "/downloads/bill.pdf"}),
            json!({"path": "/user/./old//notes.txt"}),
        ],
        "disk.download" => vec![
            json!({"site": "www.power-co.example", "path": "/bill.pdf", "save_dir": "/downloads"}),
            json!({"site": "forum.school.example", "path": "/a.pdf", "save_dir": "/documents/school"}),
        ],
        "disk.save" => vec![
            json!({"file_id": "invoice-3", "save_dir": "/documents"}),
            json!({"file_id": "att-1", "save_dir": "/downloads/../user"}),
        ],
        "site.visit" => vec![
            json!({"site": "www.power-co.example", "path": "/"}),
            json!({"site": "www.bookclub.example", "path": "/?page=2"}),
        ],
        "site.submit" => vec![
            json!({"site": "forum.school.example", "path": "/post", "fields": ["name"], "values": ["Maya"]}),
            json!({"site": "www.bookclub.example", "path": "/join"}),
        ],
        "repo.star" | "repo.unstar" | "repo.clone" => vec![
            json!({"repo": "samlee/plotter"}),
            json!({"repo": "torvalds/linux"}),
            json!({"repo": "MayaOrtiz/Parser"}),
        ],
        "repo.create" => vec![json!({"name": "new-repo"}), json!({"name": "notes.v2"})],
        "repo.push" => vec![
            json!({"repo": "mayaortiz/notes"}),
            json!({"repo": "samlee/plotter"}),
        ],
        "repo.delete" => vec![
            json!({"repo": "mayaortiz/notes"}),
            json!({"repo": "mayaortiz/parser"}),
        ],
        "repo.transfer" => vec![
            json!({"repo": "mayaortiz/notes", "new_owner": "samlee"}),
            json!({"repo": "mayaortiz/parser", "new_owner": "bobolive"}),
        ],
        "repo.invite" => vec![
            json!({"repo": "mayaortiz/parser", "collaborator": "sam.lee@example.org"}),
            json!({"repo": "mayaortiz/notes", "collaborator": "bobolive"}),
        ],
        "issue.create" => vec![
            json!({"repo": "samlee/plotter", "title": "Bug: crash", "body": "steps"}),
            json!({"repo": "torvalds/linux", "title": "hello"}),
        ],
        "sshkey.add" => vec![json!({"key": "ssh-ed25519 AAAAC3NzaMaya"})],
        "sshkey.delete" => vec![json!({"key": "ssh-rsa AAAAB3NzaOld"})],
        _ => vec![json!({"username": MAYA_GH}), json!({"username": "noahk"})],
    }
}

// ---- the mandates ---------------------------------------------------------

pub(crate) fn dailylife(user: &str, owner: &str, account: &str) -> MandateSpec {
    spec(
        "dailylife",
        user,
        owner,
        &[
            "mail.send",
            "mail.delete",
            "payments.write",
            "calendar.write",
            "files.write",
            "files.delete",
            "web.fetch",
            "web.post",
        ],
    )
    .claim("account", json!(account))
    .claim("recipients", json!([]))
    .claim("payees", json!([]))
    .claim("sites", json!([]))
}

pub(crate) fn github(user: &str, owner: &str, account: &str) -> MandateSpec {
    spec(
        "github",
        user,
        owner,
        &[
            "github.star",
            "github.repo",
            "github.read",
            "github.admin",
            "github.issue",
            "github.keys",
            "github.account",
        ],
    )
    .claim("account", json!(account))
    .claim("repos", json!([]))
    .claim("people", json!([]))
}

/// maya's mandates; emma signs as the user (the world holds her key).
pub(crate) fn dailylife_pool(w: &TestWorld) -> Pool {
    let maya = || dailylife("emma", "maya", MAYA_ACCOUNT);
    pool(
        vec![
            genuine(w, maya()),
            // the request named a person, an account and a site, in
            // another spelling than the gateway's
            genuine(
                w,
                maya()
                    .claim("recipients", json!([" Lily.White@Example.com"]))
                    .claim("payees", json!(["NL91ABNA0417164300"]))
                    .claim("sites", json!(["WWW.BookClub.example"])),
            ),
            genuine(w, dailylife("noah", "noah", "noah-account")),
            genuine(w, scopes(maya(), &["mail.send", "web.fetch"])),
            genuine(w, with(maya(), 0, 3)),
            genuine(w, with(maya(), 150_000, 100)),
        ],
        vec![
            expired(w, maya()),
            tampered(w, maya(), |m| {
                m["claims"]["payees"] = json!([ATTACKER_IBAN])
            }),
            foreign(maya()),
        ],
    )
}

pub(crate) fn github_pool(w: &TestWorld) -> Pool {
    let maya = || github("emma", "maya", MAYA_GH);
    pool(
        vec![
            genuine(w, maya()),
            genuine(
                w,
                maya()
                    .claim("repos", json!(["TorValds/Linux"]))
                    .claim("people", json!([" BobOlive"])),
            ),
            genuine(w, github("noah", "noah", "noahk")),
            genuine(w, scopes(maya(), &["github.star", "github.read"])),
            genuine(w, with(maya(), 0, 3)),
        ],
        vec![
            expired(w, maya()),
            tampered(w, maya(), |m| {
                m["claims"]["repos"] = json!(["attacker/evil"])
            }),
            foreign(maya()),
        ],
    )
}

// ---- the oracle's own rules, checked on executions written by hand -------

#[cfg(test)]
mod oracle {
    use super::*;
    use crate::fuzz_moves::ctx;
    use crate::fuzz_oracle::{Exec, Ledger, check_executed};

    fn judge(
        pack: &str,
        proposal: Value,
        resolved: Value,
        approvers: &[&str],
    ) -> Result<(), String> {
        let c = ctx();
        let i = PACKS.iter().position(|p| *p == pack).unwrap();
        let exec = Exec {
            action: proposal["action"].as_str().map(str::to_string),
            resolved: resolved.as_object().cloned().unwrap(),
            approvers: approvers.iter().map(|a| a.to_string()).collect(),
        };
        check_executed(
            &c.truth,
            &c.pools[i].ms[0],
            &proposal,
            &exec,
            &mut Ledger::default(),
        )
    }

    fn assert_tag(r: &Result<(), String>, tag: &str) {
        assert!(r.as_ref().is_err_and(|e| e.starts_with(tag)), "{r:?}");
    }

    #[test]
    fn paths_are_resolved_lexically_and_kept_inside_a_folder() {
        assert_eq!(
            lexical("/user/../system/.ssh/id").as_deref(),
            Some("/system/.ssh/id")
        );
        assert_eq!(
            lexical("/documents/./a//b").as_deref(),
            Some("/documents/a/b")
        );
        assert_eq!(lexical("/.."), None);
        assert_eq!(lexical("../user/x"), None);
        assert_eq!(lexical("/user\\..\\system"), None);
        // Cyrillic е: a name of its own, outside `/user`
        assert_eq!(lexical("/usеr/x").as_deref(), Some("/usеr/x"));
        assert_eq!(lexical("/user/\n../x"), None);
        let maya: BTreeSet<String> = ["/user".to_string()].into();
        assert!(inside(Some(&maya), "/user"));
        assert!(inside(Some(&maya), "/user/notes.txt"));
        assert!(!inside(Some(&maya), "/usernames/x"));
        assert!(!inside(Some(&maya), "/system/.ssh/id"));
        assert!(!inside(Some(&maya), "/usеr/x"));
        assert!(!inside(None, "/user/x"));
        let root: BTreeSet<String> = ["/".to_string()].into();
        assert!(inside(Some(&root), "/system/x"));
        assert!(!inside(Some(&root), "system/x"));
    }

    /// Executions of `key` (the proposal's value, what executed) and
    /// what the oracle says of each: `None` agrees, else the tag.
    #[test]
    fn the_oracle_refuses_a_disguised_path_or_host_and_accepts_its_folder() {
        let rows = [
            (
                "disk.create",
                "path",
                "/user/../system/.ssh/id",
                "/system/.ssh/id",
                Some("[provenance]"),
            ),
            // another tenant's folder
            (
                "disk.create",
                "path",
                "/shared/noah/diary.txt",
                "/shared/noah/diary.txt",
                Some("[provenance]"),
            ),
            (
                "disk.create",
                "path",
                "/user/./notes//a.txt",
                "/user/notes/a.txt",
                None,
            ),
            // executed elsewhere than proposed
            (
                "disk.create",
                "path",
                "/user/a.txt",
                "/documents/a.txt",
                Some("[provenance]"),
            ),
            // a look-alike host
            (
                "site.visit",
                "site",
                "www.power-co.example.evil.io",
                "www.power-co.example.evil.io",
                Some("[provenance]"),
            ),
            (
                "site.visit",
                "site",
                "WWW.Power-Co.Example",
                "www.power-co.example",
                None,
            ),
        ];
        for (action, key, proposed, executed, tag) in rows {
            let r = judge(
                "dailylife",
                json!({"action": action, "args": {key: proposed}}),
                json!({key: executed}),
                &[],
            );
            match tag {
                Some(t) => assert_tag(&r, t),
                None => assert_eq!(r, Ok(()), "{proposed}"),
            }
        }
    }

    #[test]
    fn the_oracle_requires_its_approvals_and_forbids() {
        let pay = |a: &str| json!({"action": "bank.pay", "args": {"from_account": MAYA_ACCOUNT, "recipient": "power-co", "amount": a}});
        let resolved =
            |a: i64| json!({"from_account": MAYA_ACCOUNT, "recipient": "power-co", "amount": a});
        let r = judge("dailylife", pay("1000.01"), resolved(100_001), &[]);
        assert_tag(&r, "[approval]");
        assert_eq!(
            judge("dailylife", pay("1000.01"), resolved(100_001), &["emma"]),
            Ok(())
        );
        let r = judge("dailylife", pay("10000.01"), resolved(1_000_001), &["emma"]);
        assert_tag(&r, "[policy]");
        let give = json!({"action": "repo.transfer", "args": {"repo": "MayaOrtiz/Notes", "new_owner": "SamLee"}});
        let r = judge(
            "github",
            give.clone(),
            json!({"repo": "mayaortiz/notes", "new_owner": "samlee"}),
            &[],
        );
        assert_tag(&r, "[approval]");
        let ok = judge(
            "github",
            give,
            json!({"repo": "mayaortiz/notes", "new_owner": "samlee"}),
            &["emma"],
        );
        assert_eq!(ok, Ok(()));
        // a repository of another tenant
        let del = json!({"action": "repo.delete", "args": {"repo": "noahk/secrets"}});
        let r = judge("github", del, json!({"repo": "noahk/secrets"}), &["emma"]);
        assert_tag(&r, "[provenance]");
    }
}
/// Found by the fuzz's review: `site.visit`, `site.submit` and
/// `disk.download` decided `site` but took the address as a free `url`, so
/// an agent proposing to the gateway directly could pair a trusted host
/// with any address. The packs now take a `path` the executor joins to the
/// decided site; an address (or `@host`) in its place is refused.
#[test]
fn a_visit_goes_only_to_the_host_it_was_decided_for() {
    use crate::fuzz_moves::ctx;
    let c = ctx();
    let gw = fresh(std::sync::Arc::new(
        intentplane::store::memory::MemoryStore::new(),
    ));
    let i = PACKS.iter().position(|p| *p == "dailylife").unwrap();
    let token = &c.pools[i].ms[0].token;
    for hostile in [
        json!({"url": "https://www.true-informations.com/steal?d=secret"}),
        json!({"path": "https://www.true-informations.com/steal"}),
        json!({"path": "@www.true-informations.com/steal"}),
        json!({"path": ".true-informations.com/steal"}),
        json!({"path": "/a b"}),
    ] {
        let mut args = hostile.as_object().unwrap().clone();
        args.insert("site".into(), json!("www.power-co.example"));
        let p = json!({"action": "site.visit", "args": args});
        let d = decide(&gw, p, token);
        assert_eq!(
            d.decision,
            intentplane::gateway::Outcome::Deny,
            "{hostile}: {d:?}"
        );
    }
    // the same site with a path of its own goes
    let p = json!({"action": "site.visit", "args": {
        "site": "www.power-co.example", "path": "/bill?month=11"}});
    let d = decide(&gw, p, token);
    assert_eq!(d.decision, intentplane::gateway::Outcome::Allow, "{d:?}");
}
