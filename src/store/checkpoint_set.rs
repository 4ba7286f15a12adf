//! A checkpoint of every shard at once (`ipc receipts checkpoint --world
//! W`): one signed [`Checkpoint`] per shard's head, taken one after the
//! other at one time, in one file, by store. Each shard must extend its
//! own (`ipc receipts verify --world W --checkpoint SET`); a shard the map
//! names and the set does not (or the other way round) is a problem, not
//! a pass.

use super::checkpoint::{Checkpoint, CheckpointError, read_bounded, write_atomic};
use crate::keys::PublicKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The format this version reads and writes.
pub const SET_FORMAT: &str = "intentplane-checkpoint-set/1";

/// A set holds a few hundred bytes per shard.
const MAX_SET_FILE: u64 = 16 * 1024 * 1024;

/// The checkpoints of a world's shards, by store (as the map names it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSet {
    pub format: String,
    pub shards: BTreeMap<String, Checkpoint>,
}

impl CheckpointSet {
    pub fn new(shards: BTreeMap<String, Checkpoint>) -> Self {
        CheckpointSet {
            format: SET_FORMAT.into(),
            shards,
        }
    }

    /// Reads a set and checks each checkpoint's content and signature
    /// with the trusted side's key.
    pub fn load(path: &Path, key: &PublicKey) -> Result<Self, CheckpointError> {
        let shown = path.display().to_string();
        let format = |reason: String| CheckpointError::Format {
            path: shown.clone(),
            reason,
        };
        let text = read_bounded(path, MAX_SET_FILE)?;
        let value = crate::base::json::parse_strict(&text).map_err(format)?;
        let set: CheckpointSet =
            serde_json::from_value(value).map_err(|e| format(e.to_string().to_lowercase()))?;
        if set.format != SET_FORMAT {
            return Err(format(format!(
                "format `{}`, expected `{SET_FORMAT}`",
                set.format.escape_debug()
            )));
        }
        for (store, cp) in &set.shards {
            let at = format!("{shown}: shard `{}`", store.escape_debug());
            let text = serde_json::to_string(cp).map_err(|e| format(e.to_string()))?;
            Checkpoint::from_text(&at, &text)?.verify(&at, key)?;
        }
        Ok(set)
    }

    /// Writes the file whole or not at all.
    pub fn write(&self, path: &Path) -> Result<(), CheckpointError> {
        write_atomic(path, &self.to_text())
    }

    /// The file's text: pretty JSON and a newline.
    pub fn to_text(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::SecretKey;

    const HASH: &str = "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn a_set_round_trips_and_each_checkpoint_is_verified() {
        let k = SecretKey::from_seed(&[4; 32]);
        let a = Checkpoint::sign(3, HASH, 1_764_268_800, &k).unwrap();
        let mut b = Checkpoint::sign(5, HASH, 1_764_268_800, &k).unwrap();
        let set =
            CheckpointSet::new([("a.db".to_string(), a), ("b.db".to_string(), b.clone())].into());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("set.json");
        std::fs::write(&p, set.to_text()).unwrap();
        assert_eq!(CheckpointSet::load(&p, &k.public()).unwrap(), set);
        // another key: refused
        let other = SecretKey::from_seed(&[5; 32]);
        assert!(CheckpointSet::load(&p, &other.public()).is_err());
        // one checkpoint edited: refused, naming the shard
        b.seq = 4;
        let edited = CheckpointSet::new([("b.db".to_string(), b)].into());
        std::fs::write(&p, edited.to_text()).unwrap();
        let e = CheckpointSet::load(&p, &k.public()).unwrap_err();
        assert!(e.to_string().contains("shard `b.db`"), "{e}");
    }
}
