//! The servers pass: each `[[servers]]` as a [`ServerConfig`], a command
//! (stdio) or a URL (Streamable HTTP), its `${VAR}`s expanded and its
//! environment built (`environ.rs`).

use super::ctx::{Diags, Dir, Span, sp};
use super::diag::ConfigError;
use super::environ::{Named, expand_env};
use super::file::{ConfigFile, S, ServerFile};
use super::{ServerConfig, Transport};
use std::collections::HashMap;

/// Every server declared once and well, in order; the others reported.
pub(super) fn servers(cfg: &ConfigFile, dir: &Dir, d: &mut Diags) -> Vec<ServerConfig> {
    let named = Named::of(cfg);
    let mut out = vec![];
    let mut seen: HashMap<String, Span> = HashMap::new();
    for s in &cfg.servers {
        let sf = s.get_ref();
        let name = sf.name.get_ref().clone();
        if let Some(first) = seen.get(&name) {
            let first = first.clone();
            d.err(ConfigError::Duplicate {
                kind: "server",
                name,
                span: sp(sf.name.span()),
                first: sp(first),
            });
            continue;
        }
        seen.insert(name.clone(), sf.name.span());
        let transport = match (&sf.command, &sf.url) {
            (Some(c), None) => stdio(&name, sf, c, &named, dir, d),
            (None, Some(u)) => http(&name, s, u, dir, d),
            (c, _) => {
                d.err(ConfigError::Server {
                    name,
                    message: if c.is_some() {
                        "has both `command` and `url`".into()
                    } else {
                        "has neither `command` nor `url`".into()
                    },
                    span: sp(s.span()),
                });
                None
            }
        };
        if let Some(transport) = transport {
            out.push(ServerConfig {
                name: sf.name.get_ref().clone(),
                transport,
            });
        }
    }
    out
}

/// A server started as a command: its folder, arguments and environment.
fn stdio(
    name: &str,
    sf: &ServerFile,
    c: &S<String>,
    named: &Named,
    dir: &Dir,
    d: &mut Diags,
) -> Option<Transport> {
    if let Some(at) = sf
        .token_file
        .as_ref()
        .or(sf.token_env.as_ref())
        .or(sf.ca_file.as_ref())
    {
        d.err(ConfigError::Server {
            name: name.to_string(),
            message: "`token_file`, `token_env` and `ca_file` are for a `url`, not a command"
                .into(),
            span: sp(at.span()),
        });
        return None;
    }
    let cwd = match &sf.cwd {
        Some(c) => {
            let text = expand(name, c, dir, d)?;
            let c = S::new(c.span(), text);
            dir.existing(d, "working directory", &c, None)?
        }
        None => dir.0.clone(),
    };
    let args = sf
        .args
        .iter()
        .map(|a| expand(name, a, dir, d))
        .collect::<Option<Vec<_>>>()?;
    // a command with a `/` is a path relative to the
    // config; a bare name (`ipc`, `npx`) is kept as is
    let command = c.get_ref().clone();
    if command.contains('/') && dir.existing(d, "command", c, None).is_none() {
        return None;
    }
    Some(Transport::Stdio {
        // absolute: the child starts in its `cwd`, where a
        // path relative to the proxy's folder is not
        command: if command.contains('/') {
            let p = dir.rel(&command);
            std::path::absolute(&p).unwrap_or(p).display().to_string()
        } else {
            command
        },
        args,
        env: server_env(name, sf, named, dir, d)?,
        cwd,
    })
}

/// A remote server (`remote.rs`).
fn http(
    name: &str,
    s: &S<ServerFile>,
    u: &S<String>,
    dir: &Dir,
    d: &mut Diags,
) -> Option<Transport> {
    let sf = s.get_ref();
    if !sf.args.is_empty() || !sf.env.is_empty() || !sf.env_pass.is_empty() || sf.cwd.is_some() {
        d.err(ConfigError::Server {
            name: name.to_string(),
            message: "`args`, `env` and `cwd` are for a command, not a URL".into(),
            span: sp(s.span()),
        });
        return None;
    }
    match super::remote::remote(&dir.0, name, sf, u) {
        Ok(r) => Some(Transport::Http(r)),
        Err(errs) => {
            for e in errs {
                d.err(e);
            }
            None
        }
    }
}

/// A server's `args`, `env` or `cwd` value with each `${VAR}` expanded
/// from the proxy's environment (`$$` is a `$`); `${CONFIG_DIR}` is the
/// config's folder whatever the environment says, so that an example
/// runs from wherever it is checked out. An unset variable is an error
/// here, never an empty string.
fn expand(server: &str, v: &S<String>, dir: &Dir, d: &mut Diags) -> Option<String> {
    let abs = dir.absolute();
    let lookup = |name: &str| {
        if name == "CONFIG_DIR" {
            Some(abs.clone())
        } else {
            std::env::var(name).ok()
        }
    };
    match expand_env(v.get_ref(), lookup) {
        Ok(value) => Some(value),
        Err(var) => {
            d.err(ConfigError::Env {
                server: server.to_string(),
                help: Some(if var.is_empty() {
                    "write a variable as `${NAME}`, and a `$` as `$$`".into()
                } else {
                    format!("set `{var}` in the environment `ipc mcp` runs in (an unset variable is never read as empty)")
                }),
                var,
                span: sp(v.span()),
            });
            None
        }
    }
}

/// `key` set to `value` in an environment, in place of any value before.
fn set(env: &mut Vec<(String, String)>, key: &str, value: String) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_string(), value));
}

/// A server's whole environment (`environ.rs`): the base variables
/// the proxy's environment sets, then `env_pass` forwarded from it (a
/// variable another server names is refused), then `env` expanded
/// ([`expand`]) and a value that starts with `./` or `../`
/// resolved against the config's folder. An unset variable is an
/// error here, never an empty string.
fn server_env(
    server: &str,
    sf: &ServerFile,
    named: &Named,
    dir: &Dir,
    d: &mut Diags,
) -> Option<Vec<(String, String)>> {
    let mut out = super::environ::base();
    let mut ok = true;
    for var in &sf.env_pass {
        let name = var.get_ref();
        if let Some(owner) = named.owner_for(name, server) {
            d.err(ConfigError::EnvSecret {
                server: server.to_string(),
                var: name.clone(),
                owner: owner.to_string(),
                span: sp(var.span()),
            });
            ok = false;
            continue;
        }
        match std::env::var(name) {
            Ok(v) => set(&mut out, name, v),
            Err(_) => {
                d.err(ConfigError::Env {
                    server: server.to_string(),
                    var: name.clone(),
                    span: sp(var.span()),
                    help: Some(
                        "`env_pass` forwards variables the proxy is started with: set it, or remove it from the list".into(),
                    ),
                });
                ok = false;
            }
        }
    }
    for (k, v) in &sf.env {
        match expand(server, v, dir, d) {
            Some(value) => {
                let value = if value.starts_with("./") || value.starts_with("../") {
                    dir.rel(&value).display().to_string()
                } else {
                    value
                };
                set(&mut out, k, value);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}
