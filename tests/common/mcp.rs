//! What the MCP proxy's tests read back: a tool result's text, and the
//! calls the demo server executed (its state file).

use rmcp::model::CallToolResult;
use serde_json::Value;
use std::path::Path;

/// The text blocks of a tool result, one per line.
pub fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The calls of `tool` the demo server whose state file is `state`
/// executed (or attempted); none before its first call.
pub fn executed(state: &Path, tool: &str) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(state) else {
        return vec![];
    };
    let st: Value = serde_json::from_str(&text).unwrap();
    st["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["tool"] == tool)
        .cloned()
        .collect()
}
