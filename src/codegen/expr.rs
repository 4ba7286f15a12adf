//! Rule conditions (checked IR expressions) to Cedar expressions.
//!
//! Parameters and facts are context attributes, `now` is `context.now`,
//! `x in [..]` / `x in set_param` is `.contains(x)`. Money and durations are
//! already integers in the IR, so every number is a Cedar `Long`. An empty
//! list literal has no Cedar type (strict validation refuses `[]`), so
//! `x in []` is `false` and `xs == []` is `xs.isEmpty()`.

use super::names::{attr_access, cedar_string};
use crate::ir::{BinOp, Expr, Value};

/// A Cedar expression, printed with the fewest parentheses that keep its
/// meaning.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum CExpr {
    /// Already printed: a literal or an attribute access.
    Atom(String),
    /// A negative number (binds like a unary operator).
    Neg(String),
    Set(Vec<CExpr>),
    Not(Box<CExpr>),
    Bin(CBin, Box<CExpr>, Box<CExpr>),
    Contains(Box<CExpr>, Box<CExpr>),
    IsEmpty(Box<CExpr>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CBin {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
}

impl CBin {
    fn symbol(self) -> &'static str {
        match self {
            CBin::Or => "||",
            CBin::And => "&&",
            CBin::Eq => "==",
            CBin::Ne => "!=",
            CBin::Lt => "<",
            CBin::Le => "<=",
            CBin::Gt => ">",
            CBin::Ge => ">=",
            CBin::Add => "+",
            CBin::Sub => "-",
        }
    }
    fn prec(self) -> u8 {
        match self {
            CBin::Or => 1,
            CBin::And => 2,
            CBin::Eq | CBin::Ne | CBin::Lt | CBin::Le | CBin::Gt | CBin::Ge => 3,
            CBin::Add | CBin::Sub => 4,
        }
    }
}

const PREC_UNARY: u8 = 5;
const PREC_PRIMARY: u8 = 6;

impl CExpr {
    pub(crate) fn context(name: &str) -> CExpr {
        CExpr::Atom(attr_access("context", name))
    }
    pub(crate) fn long(n: i64) -> CExpr {
        if n < 0 {
            CExpr::Neg(n.to_string())
        } else {
            CExpr::Atom(n.to_string())
        }
    }
    pub(crate) fn and(a: CExpr, b: CExpr) -> CExpr {
        CExpr::Bin(CBin::And, Box::new(a), Box::new(b))
    }
    pub(crate) fn bin(op: CBin, a: CExpr, b: CExpr) -> CExpr {
        CExpr::Bin(op, Box::new(a), Box::new(b))
    }

    fn prec(&self) -> u8 {
        match self {
            CExpr::Atom(_) | CExpr::Set(_) | CExpr::Contains(..) | CExpr::IsEmpty(_) => {
                PREC_PRIMARY
            }
            CExpr::Neg(_) | CExpr::Not(_) => PREC_UNARY,
            CExpr::Bin(op, ..) => op.prec(),
        }
    }

    /// Cedar text.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write_at(&self, min: u8, out: &mut String) {
        if self.prec() < min {
            out.push('(');
            self.write(out);
            out.push(')');
        } else {
            self.write(out);
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            CExpr::Atom(s) | CExpr::Neg(s) => out.push_str(s),
            CExpr::Set(items) => {
                out.push('[');
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    it.write(out);
                }
                out.push(']');
            }
            CExpr::Not(e) => {
                out.push('!');
                // `!!x` chains are limited in Cedar; always bracket non-primaries
                e.write_at(PREC_PRIMARY, out);
            }
            CExpr::Bin(op, a, b) => {
                let p = op.prec();
                let (left_min, right_min) = match op {
                    // associative: a && b && c needs no brackets
                    CBin::And | CBin::Or => (p, p),
                    // comparisons do not chain in Cedar
                    CBin::Eq | CBin::Ne | CBin::Lt | CBin::Le | CBin::Gt | CBin::Ge => {
                        (p + 1, p + 1)
                    }
                    // left-associative: a - (b - c) keeps its brackets
                    CBin::Add | CBin::Sub => (p, p + 1),
                };
                a.write_at(left_min, out);
                out.push(' ');
                out.push_str(op.symbol());
                out.push(' ');
                b.write_at(right_min, out);
            }
            CExpr::Contains(set, elem) => {
                set.write_at(PREC_PRIMARY, out);
                out.push_str(".contains(");
                elem.write(out);
                out.push(')');
            }
            CExpr::IsEmpty(set) => {
                set.write_at(PREC_PRIMARY, out);
                out.push_str(".isEmpty()");
            }
        }
    }
}

/// Why an expression has no Cedar form (the checker should have refused it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Untranslatable(pub String);

/// Translates a rule condition.
pub(crate) fn translate(e: &Expr) -> Result<CExpr, Untranslatable> {
    Ok(match e {
        Expr::Lit { value } => literal(value)?,
        Expr::Param { name } | Expr::Fact { name } => CExpr::context(name),
        Expr::Now => CExpr::context(super::CTX_NOW),
        Expr::Claim { name } => {
            return Err(Untranslatable(format!(
                "a rule reads the mandate claim `{name}` directly"
            )));
        }
        Expr::Registry { name } => {
            return Err(Untranslatable(format!(
                "a rule reads the registry `{name}` directly"
            )));
        }
        Expr::Selection { claim, .. } => {
            return Err(Untranslatable(format!(
                "a rule reads the mandate's selection `{claim}` directly"
            )));
        }
        Expr::Lookup {
            registry, field, ..
        } => {
            return Err(Untranslatable(format!(
                "a rule reads `registry.{registry}[..].{field}` directly"
            )));
        }
        Expr::List { items } => {
            if items.is_empty() {
                return Err(Untranslatable(
                    "an empty list outside `in`, `==` or `!=` has no cedar type".into(),
                ));
            }
            CExpr::Set(items.iter().map(translate).collect::<Result<_, _>>()?)
        }
        Expr::Not { expr } => CExpr::Not(Box::new(translate(expr)?)),
        Expr::Binary { op, lhs, rhs } => binary(*op, lhs, rhs)?,
    })
}

fn is_empty_list(e: &Expr) -> bool {
    match e {
        Expr::List { items } => items.is_empty(),
        Expr::Lit {
            value: Value::List(items),
        } => items.is_empty(),
        _ => false,
    }
}

fn binary(op: BinOp, lhs: &Expr, rhs: &Expr) -> Result<CExpr, Untranslatable> {
    let bin = |o: CBin| -> Result<CExpr, Untranslatable> {
        Ok(CExpr::bin(o, translate(lhs)?, translate(rhs)?))
    };
    match op {
        BinOp::Or => bin(CBin::Or),
        BinOp::And => bin(CBin::And),
        BinOp::Eq | BinOp::Ne => {
            let empty = match (is_empty_list(lhs), is_empty_list(rhs)) {
                (true, true) => Some(None),
                (true, false) => Some(Some(rhs)),
                (false, true) => Some(Some(lhs)),
                (false, false) => None,
            };
            let eq = op == BinOp::Eq;
            match empty {
                Some(None) => Ok(CExpr::Atom(eq.to_string())),
                Some(Some(other)) => {
                    let test = CExpr::IsEmpty(Box::new(translate(other)?));
                    Ok(if eq { test } else { CExpr::Not(Box::new(test)) })
                }
                None => bin(if eq { CBin::Eq } else { CBin::Ne }),
            }
        }
        BinOp::Lt => bin(CBin::Lt),
        BinOp::Le => bin(CBin::Le),
        BinOp::Gt => bin(CBin::Gt),
        BinOp::Ge => bin(CBin::Ge),
        BinOp::Add => bin(CBin::Add),
        BinOp::Sub => bin(CBin::Sub),
        BinOp::In => {
            if is_empty_list(rhs) {
                // nothing is in an empty list; keep the left side out of it
                return Ok(CExpr::Atom("false".into()));
            }
            Ok(CExpr::Contains(
                Box::new(translate(rhs)?),
                Box::new(translate(lhs)?),
            ))
        }
    }
}

fn literal(v: &Value) -> Result<CExpr, Untranslatable> {
    Ok(match v {
        Value::Int(n) | Value::Money(n) | Value::Duration(n) => CExpr::long(*n),
        Value::Str(s) => CExpr::Atom(cedar_string(s)),
        Value::Bool(b) => CExpr::Atom(b.to_string()),
        Value::List(items) => {
            if items.is_empty() {
                return Err(Untranslatable(
                    "an empty list outside `in`, `==` or `!=` has no cedar type".into(),
                ));
            }
            CExpr::Set(items.iter().map(literal).collect::<Result<_, _>>()?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: &str) -> Box<Expr> {
        Box::new(Expr::Param { name: n.into() })
    }
    fn b(op: BinOp, l: Box<Expr>, r: Box<Expr>) -> Box<Expr> {
        Box::new(Expr::Binary { op, lhs: l, rhs: r })
    }
    fn money(n: i64) -> Box<Expr> {
        Box::new(Expr::Lit {
            value: Value::Money(n),
        })
    }

    #[test]
    fn precedence_brackets_only_where_needed() {
        let or = b(
            BinOp::Or,
            b(BinOp::Gt, p("a"), money(1)),
            Box::new(Expr::Fact { name: "f".into() }),
        );
        let both = CExpr::and(translate(&or).unwrap(), CExpr::context("approval_level"));
        assert_eq!(
            both.render(),
            "(context.a > 1 || context.f) && context.approval_level"
        );
        let sub = b(BinOp::Sub, p("a"), b(BinOp::Sub, p("b"), p("c")));
        assert_eq!(
            translate(&sub).unwrap().render(),
            "context.a - (context.b - context.c)"
        );
        let not = Expr::Not {
            expr: b(BinOp::Eq, p("a"), p("b")),
        };
        assert_eq!(
            translate(&not).unwrap().render(),
            "!(context.a == context.b)"
        );
        let notnot = Expr::Not {
            expr: Box::new(Expr::Not { expr: p("x") }),
        };
        assert_eq!(translate(&notnot).unwrap().render(), "!(!context.x)");
    }

    #[test]
    fn membership_and_empty_lists() {
        let inlist = b(
            BinOp::In,
            p("c"),
            Box::new(Expr::List {
                items: vec![
                    Expr::Lit {
                        value: Value::Str("EUR".into()),
                    },
                    Expr::Lit {
                        value: Value::Str("U\"SD".into()),
                    },
                ],
            }),
        );
        assert_eq!(
            translate(&inlist).unwrap().render(),
            "[\"EUR\", \"U\\\"SD\"].contains(context.c)"
        );
        let empty = || Box::new(Expr::List { items: vec![] });
        assert_eq!(
            translate(&b(BinOp::In, p("c"), empty())).unwrap().render(),
            "false"
        );
        assert_eq!(
            translate(&b(BinOp::Ne, p("xs"), empty())).unwrap().render(),
            "!context.xs.isEmpty()"
        );
        assert_eq!(
            translate(&b(BinOp::Eq, empty(), empty())).unwrap().render(),
            "true"
        );
    }

    #[test]
    fn store_reads_are_refused_not_panicked() {
        let e = Expr::Claim {
            name: "payee".into(),
        };
        assert!(translate(&e).is_err());
        let e = b(
            BinOp::In,
            p("x"),
            Box::new(Expr::Registry { name: "r".into() }),
        );
        assert!(translate(&e).is_err());
    }
}
