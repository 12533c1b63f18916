//! Leader election's record, the rules every client follows (docs/contract.md "Leaders"): an
//! election is the exclusive lock at its key; its leader's value lives in a stream
//! beside it, in the same slot, written only with the guard (a term is the holding's
//! fencing token). One entry per change: `<term>-0` when the term's leader takes
//! office (field `value`), `<term>-1` when it resigns. Entry ids grow with the terms,
//! so an observer reading the stream after the last id it saw gets every leader once
//! and in term order, from a blocking `XREAD` (no polling). The stream keeps the last
//! [`RECORD_ENTRIES`] entries.

use std::fmt;

/// Appended to an election key that carries a hash tag; a key without one is
/// wrapped as the tag: `jobs` → `{jobs}:leader`, `{jobs}:lock` → `{jobs}:lock:leader`.
pub const RECORD_SUFFIX: &str = ":leader";

/// Entries the record keeps (`XADD … MAXLEN = 16`): an observer that falls more than
/// this many changes behind between two reads misses the oldest.
pub const RECORD_ENTRIES: u32 = 16;

/// The longest value a leader may publish, in bytes.
pub const MAX_VALUE_LEN: usize = 1024;

/// The field of a leader's entry that holds its value.
pub const VALUE_FIELD: &str = "value";

/// The field of a resignation's entry.
pub const RESIGNED_FIELD: &str = "resigned";

/// What a record key cannot be made for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKeyError {
    /// The election key has no hash tag and contains `}`: wrapped as a tag, it would
    /// hash to another slot.
    Unwrappable,
}

impl fmt::Display for RecordKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordKeyError::Unwrappable => f.write_str(
                "invalid election key: without a hash tag it may not contain '}' \
                 (give it a tag, e.g. {jobs}:leader-lock)",
            ),
        }
    }
}

impl std::error::Error for RecordKeyError {}

/// The hash tag of `key` as Redis Cluster reads it: the bytes between the first `{`
/// and the first `}` after it, when there are any.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = key.get(open.checked_add(1)?..)?;
    let close = rest.iter().position(|&b| b == b'}')?;
    let tag = rest.get(..close)?;
    (!tag.is_empty()).then_some(tag)
}

/// The stream holding the leaders of the election at `key`, in `key`'s slot.
pub fn record_key(key: &str) -> Result<String, RecordKeyError> {
    if hash_tag(key.as_bytes()).is_some() {
        return Ok(format!("{key}{RECORD_SUFFIX}"));
    }
    if key.contains('}') {
        return Err(RecordKeyError::Unwrappable);
    }
    Ok(format!("{{{key}}}{RECORD_SUFFIX}"))
}

/// The id of the entry by which the leader of `term` takes office.
pub fn leader_id(term: i64) -> String {
    format!("{term}-0")
}

/// The id of the entry by which the leader of `term` resigns.
pub fn resigned_id(term: i64) -> String {
    format!("{term}-1")
}

/// An entry of the record, read from its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// The leader of this term took office.
    Leader(i64),
    /// The leader of this term resigned.
    Resigned(i64),
    /// Not written by an election (by hand): skipped.
    Other,
}

/// What the entry with stream id `id` says.
pub fn entry(id: &str) -> Entry {
    let Some((term, seq)) = id.split_once('-') else {
        return Entry::Other;
    };
    match (term.parse::<i64>(), seq) {
        (Ok(term), "0") if term > 0 => Entry::Leader(term),
        (Ok(term), "1") if term > 0 => Entry::Resigned(term),
        _ => Entry::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_without_a_tag_becomes_the_tag() {
        assert_eq!(record_key("jobs").unwrap(), "{jobs}:leader");
        assert_eq!(record_key("a{b").unwrap(), "{a{b}:leader");
        assert_eq!(record_key("{}x").err(), Some(RecordKeyError::Unwrappable));
        assert_eq!(record_key("a}b").err(), Some(RecordKeyError::Unwrappable));
        // The wrapped key's tag is the whole election key: the same slot.
        let wrapped = record_key("a{b").unwrap();
        assert_eq!(hash_tag(wrapped.as_bytes()), Some(&b"a{b"[..]));
    }

    #[test]
    fn a_key_with_a_tag_keeps_it() {
        assert_eq!(record_key("{jobs}:lock").unwrap(), "{jobs}:lock:leader");
        assert_eq!(record_key("x{y}z}").unwrap(), "x{y}z}:leader");
        assert_eq!(hash_tag(b"x{y}z}:leader"), Some(&b"y"[..]));
    }

    #[test]
    fn hash_tags_follow_redis() {
        assert_eq!(hash_tag(b"{user1000}.following"), Some(&b"user1000"[..]));
        assert_eq!(hash_tag(b"foo{}{bar}"), None);
        assert_eq!(hash_tag(b"foo{{bar}}zap"), Some(&b"{bar"[..]));
        assert_eq!(hash_tag(b"foo{bar}{zap}"), Some(&b"bar"[..]));
        assert_eq!(hash_tag(b"nothing"), None);
        assert_eq!(hash_tag(b"{"), None);
    }

    #[test]
    fn entries_are_read_from_their_ids() {
        assert_eq!(entry(&leader_id(17)), Entry::Leader(17));
        assert_eq!(entry(&resigned_id(17)), Entry::Resigned(17));
        assert_eq!(entry("17-2"), Entry::Other);
        assert_eq!(entry("0-0"), Entry::Other);
        assert_eq!(entry("x-0"), Entry::Other);
        assert_eq!(entry("17"), Entry::Other);
        assert_eq!(entry("1700000000000-0"), Entry::Leader(1_700_000_000_000));
    }
}
