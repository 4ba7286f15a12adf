//! `secret_not_marked`: a parameter whose name says it holds a password, a
//! secret or a token, and which is not declared `secret`.
//!
//! Why: receipts are append-only and kept for audit; a new password written
//! there in clear can never be taken back. A `secret` parameter leaves only
//! a salted commitment in receipts, decisions and the operation hash.

use crate::diagnostics::PackDiagnostic;
use crate::ir::Pack;
use crate::syntax::ast;

/// Words in a parameter's name that say its value is a secret.
const WORDS: [&str; 5] = ["password", "passwd", "secret", "token", "passphrase"];

pub(super) fn check(file: &ast::File, pack: &Pack) -> Vec<PackDiagnostic> {
    let mut out = vec![];
    for item in &file.items {
        let ast::Item::Action(a) = item else { continue };
        let Some(action) = pack.action(&a.name.text) else {
            continue;
        };
        for c in &a.clauses {
            let ast::ActionClause::Param(d) = c else {
                continue;
            };
            let name = d.name.text.to_ascii_lowercase();
            let looks_secret = WORDS.iter().any(|w| name.contains(w));
            let marked = action.param(&d.name.text).is_some_and(|p| p.secret);
            if looks_secret && !marked {
                out.push(PackDiagnostic::SecretNotMarked {
                    param: d.name.text.clone(),
                    span: d.name.span.into(),
                });
            }
        }
    }
    out
}
