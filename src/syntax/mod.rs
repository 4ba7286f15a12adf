//! The pack language's surface: grammar (grammar/pack.pest), syntax tree and
//! parser. Produces [`ast::File`]; knows nothing of meaning.

pub mod ast;
mod parse;

pub use parse::{
    KEYWORDS, MAX_DEPTH, MAX_SOURCE_LEN, parse, parse_expr_at, parse_path_at, parse_scope_at,
    parse_type_at,
};
