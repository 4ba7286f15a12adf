//! The records a counterexample scenario writes into its file
//! (`"registries"`, docs/scenarios.md): the solver's values win, and the
//! world is written to agree with them — a lookup-sourced value stored in
//! the record it is looked up in, a fact over a record made what the
//! counterexample says, a claim a fact reads given to the mandate.

use crate::ir::{self, BinOp, Expr, Key, RegistryShape, Type};
use serde_json::{Map, Value};

/// The pack's registry data (read) and the records the scenario adds
/// (written), for one owner.
pub(super) struct Records<'a> {
    pub pack: &'a ir::Pack,
    /// Registry to owner to records, from `registries/*.json`.
    pub data: Map<String, Value>,
    /// What the scenario writes: registry to owner to records.
    pub added: Map<String, Value>,
    pub owner: String,
}

/// A value different from `v`, of the same kind.
fn other_than(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(format!("{s}-other")),
        Value::Bool(b) => Value::Bool(!b),
        Value::Number(n) => Value::from(n.as_i64().unwrap_or(0).saturating_add(1)),
        _ => Value::String("other".into()),
    }
}

impl Records<'_> {
    fn owner_of(&self, registry: &str) -> String {
        match self.pack.registry(registry) {
            Some(r) if r.global => "*".into(),
            _ => self.owner.clone(),
        }
    }

    /// The record under `key`: as added, else as in the pack's data.
    pub fn record(&self, registry: &str, key: &str) -> Option<Map<String, Value>> {
        let owner = self.owner_of(registry);
        let at = |m: &Map<String, Value>| {
            m.get(registry)
                .and_then(|o| o.get(&owner))
                .and_then(|r| r.get(key))
                .and_then(Value::as_object)
                .cloned()
        };
        at(&self.added).or_else(|| at(&self.data))
    }

    /// Writes one field of the record under `key` (the rest as it was, or
    /// a well-formed value of each field's type).
    pub fn set_field(&mut self, registry: &str, key: &str, field: &str, value: Value) {
        let Some(ir::Registry {
            shape: RegistryShape::Keyed { fields, .. },
            ..
        }) = self.pack.registry(registry)
        else {
            return;
        };
        let mut rec = self.record(registry, key).unwrap_or_default();
        for f in fields {
            if !rec.contains_key(&f.name) {
                rec.insert(f.name.clone(), record_sample(&f.ty));
            }
        }
        rec.insert(field.to_string(), value);
        let owner = self.owner_of(registry);
        let owners = self
            .added
            .entry(registry.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(o) = owners {
            let recs = o.entry(owner).or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(r) = recs {
                r.insert(key.to_string(), Value::Object(rec));
            }
        }
    }

    /// A field's declared type.
    pub fn field_type(&self, registry: &str, field: &str) -> Type {
        self.pack
            .registry(registry)
            .and_then(|r| r.field(field))
            .cloned()
            .unwrap_or(Type::Text)
    }

    /// The text of a source key, from the values fixed so far.
    pub fn source_key(
        &self,
        k: &Key,
        args: &Map<String, Value>,
        claims: &Map<String, Value>,
    ) -> Option<String> {
        let v = match k {
            Key::Param { param } => args.get(param)?.clone(),
            Key::Claim { claim } => claims.get(claim)?.clone(),
            Key::Lookup { lookup } => {
                let key = self.source_key(&lookup.key, args, claims)?;
                self.record(&lookup.registry, &key)?
                    .get(&lookup.field)?
                    .clone()
            }
        };
        v.as_str().map(str::to_string)
    }

    /// The text of a fact's key expression, from the values fixed so far.
    pub fn expr_key(
        &self,
        e: &Expr,
        args: &Map<String, Value>,
        claims: &Map<String, Value>,
    ) -> Option<String> {
        let v = match e {
            Expr::Param { name } => args.get(name)?.clone(),
            Expr::Claim { name } => claims.get(name)?.clone(),
            Expr::Lit { value } => value.to_json(),
            Expr::Lookup {
                registry,
                key,
                field,
            } => {
                let key = self.expr_key(key, args, claims)?;
                self.record(registry, &key)?.get(field)?.clone()
            }
            _ => return None,
        };
        v.as_str().map(str::to_string)
    }

    /// Makes a fact over a record what the counterexample says: its value
    /// (`registry.R[K].F`), or the truth of `registry.R[K].F == / != X`
    /// with X a literal, a parameter or a claim. `false`: it cannot be
    /// inverted (the caller leaves a note).
    pub fn make_fact(
        &mut self,
        e: &Expr,
        value: &Value,
        args: &Map<String, Value>,
        claims: &mut Map<String, Value>,
    ) -> bool {
        match e {
            Expr::Lookup {
                registry,
                key,
                field,
            } => {
                let Some(k) = self.expr_key(key, args, claims) else {
                    return false;
                };
                let v = super::values::as_given(&self.field_type(registry, field), value);
                self.set_field(registry, &k, field, v);
                true
            }
            Expr::Binary { op, lhs, rhs } if matches!(op, BinOp::Eq | BinOp::Ne) => {
                let (
                    Expr::Lookup {
                        registry, field, ..
                    },
                    Some(b),
                ) = (&**lhs, value.as_bool())
                else {
                    return false;
                };
                let Some(other) = self.operand(rhs, registry, field, args, claims) else {
                    return false;
                };
                let equal = b == (*op == BinOp::Eq);
                let v = if equal { other } else { other_than(&other) };
                self.make_fact(lhs, &v, args, claims)
            }
            Expr::Claim { name } => {
                let ty = self
                    .pack
                    .claim(name)
                    .map(|c| c.ty.clone())
                    .unwrap_or(Type::Text);
                claims.insert(name.clone(), super::values::as_given(&ty, value));
                true
            }
            _ => false,
        }
    }

    /// The value of a comparison's other side: a literal, a parameter, or
    /// a claim (given to the mandate when it has none yet).
    fn operand(
        &self,
        e: &Expr,
        registry: &str,
        field: &str,
        args: &Map<String, Value>,
        claims: &mut Map<String, Value>,
    ) -> Option<Value> {
        match e {
            Expr::Lit { value } => Some(value.to_json()),
            Expr::Param { name } => args.get(name).cloned(),
            Expr::Claim { name } => Some(
                claims
                    .entry(name.clone())
                    .or_insert_with(|| record_sample(&self.field_type(registry, field)))
                    .clone(),
            ),
            _ => None,
        }
    }
}

/// A well-formed value of a field's type, as a registry file writes it.
fn record_sample(ty: &Type) -> Value {
    match ty {
        Type::Money => "1.00".into(),
        Type::Int | Type::Duration => 1.into(),
        Type::Bool => false.into(),
        Type::Timestamp => "2026-01-01T00:00:00Z".into(),
        Type::Date => "2026-01-01".into(),
        t => super::values::sample(t),
    }
}
