//! What a stdio server's process is given of the proxy's environment
//! ([decision](../../../docs/decisions/mcp-server-environment.md)): the
//! [`BASE`] variables, what its own `env_pass` names and its own `env`;
//! nothing else. A variable another server's entry names — a remote's
//! `token_env`, a `${VAR}` in another server's `env`, `args` or `cwd` — is
//! that server's secret: `env_pass` may not forward it to this one
//! ([`Named::owner_for`]), though this server's own `${VAR}` may read it.

use super::file::{ConfigFile, ServerFile};

/// What every stdio server is given from the proxy's environment, when
/// set: where programs are, the user's home and name, the language, the
/// time zone, the temporary folder. Never a secret: no `token_env` may
/// name one.
pub const BASE: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
];

/// The variables the config's servers name as their own: `(variable,
/// server)`.
pub(super) struct Named(Vec<(String, String)>);

impl Named {
    /// Every variable each server's entry names: its `token_env` and each
    /// `${VAR}` of its `env`, `args` and `cwd` (`${CONFIG_DIR}` and the
    /// [`BASE`] variables aside).
    pub fn of(cfg: &ConfigFile) -> Named {
        let mut out = vec![];
        for s in &cfg.servers {
            let sf = s.get_ref();
            for var in reads(sf) {
                out.push((var, sf.name.get_ref().clone()));
            }
        }
        Named(out)
    }

    /// The other server whose secret `var` is, when `server` does not
    /// name it itself; `None`: `server` may be given it.
    pub fn owner_for(&self, var: &str, server: &str) -> Option<&str> {
        let own = self.0.iter().any(|(v, s)| v == var && s == server);
        if own {
            return None;
        }
        self.0
            .iter()
            .find(|(v, s)| v == var && s != server)
            .map(|(_, s)| s.as_str())
    }
}

/// The variables one server's entry reads: `token_env`, and each `${VAR}`
/// of `env`, `args` and `cwd`.
fn reads(sf: &ServerFile) -> Vec<String> {
    let texts = sf
        .env
        .values()
        .chain(&sf.args)
        .chain(&sf.cwd)
        .map(|v| v.get_ref().as_str());
    let mut vars: Vec<String> = texts.flat_map(variables).collect();
    vars.extend(sf.token_env.iter().map(|v| v.get_ref().clone()));
    vars.retain(|v| v != "CONFIG_DIR" && !BASE.contains(&v.as_str()));
    vars
}

/// The names of the `${VAR}`s of `text` (`$$` is a `$`, not a variable).
fn variables(text: &str) -> Vec<String> {
    let names = std::cell::RefCell::new(vec![]);
    let _ = expand_env(text, |name| {
        names.borrow_mut().push(name.to_string());
        Some(String::new())
    });
    names.into_inner()
}

/// The base variables the proxy's environment sets, with their values.
pub(super) fn base() -> Vec<(String, String)> {
    BASE.iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// `${VAR}` expanded from `lookup` (`$$` is a `$`, any other `$` kept);
/// `Err` names the variable that is not set (empty: an unclosed `${`).
pub(super) fn expand_env(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = after.strip_prefix('{') {
            let Some(end) = r.find('}') else {
                return Err(String::new());
            };
            let name = &r[..end];
            let valid =
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(String::new());
            }
            out.push_str(&lookup(name).ok_or_else(|| name.to_string())?);
            rest = &r[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(toml: &str) -> Named {
        let cfg: ConfigFile = toml::from_str(toml).unwrap();
        Named::of(&cfg)
    }

    #[test]
    fn a_variable_another_server_names_is_its_own() {
        let n = named(
            r#"
[[servers]]
name = "crm"
url = "https://crm.example/mcp"
token_env = "CRM_TOKEN"

[[servers]]
name = "git"
command = "git-mcp"
args = ["--key=${GIT_KEY}", "${CONFIG_DIR}/repo", "${HOME}/x", "$${NOT_A_VAR}"]
env = { GH = "${GH_TOKEN}" }

[[servers]]
name = "fs"
command = "fs-mcp"
env = { ALSO = "${GH_TOKEN}" }
"#,
        );
        assert_eq!(n.owner_for("CRM_TOKEN", "fs"), Some("crm"));
        assert_eq!(n.owner_for("CRM_TOKEN", "crm"), None);
        assert_eq!(n.owner_for("GIT_KEY", "fs"), Some("git"));
        // `fs` reads `GH_TOKEN` itself: it may have it
        assert_eq!(n.owner_for("GH_TOKEN", "fs"), None);
        assert_eq!(n.owner_for("GH_TOKEN", "crm"), Some("git"));
        for not_secret in ["HOME", "CONFIG_DIR", "NOT_A_VAR", "PATH"] {
            assert_eq!(n.owner_for(not_secret, "fs"), None, "{not_secret}");
        }
    }
}
