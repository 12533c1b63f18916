//! The owner id of a lock, stored inline when it is short.
//!
//! Owners are short ids: UUIDs (36 bytes) from many drivers, and from the project's
//! clients `host:pid:` and 16 random hex digits (inline while the host name and the
//! pid take at most 20 bytes together). Kept inline, a whole `Lock` (token and
//! owner) is 48 bytes: one allocation in jemalloc's 48-byte class, where a separate
//! owner allocation would cost a second allocation and ~32 bytes more per lock.

/// Owners up to this many bytes live inside the lock.
const INLINE: usize = 38;

#[derive(Debug, Clone)]
pub enum Owner {
    /// `bytes[..len]` is the owner; the rest stays zero.
    Inline {
        len: u8,
        bytes: [u8; INLINE],
    },
    Heap(Box<[u8]>),
}

impl Owner {
    pub fn new(owner: &[u8]) -> Self {
        let mut bytes = [0u8; INLINE];
        match (u8::try_from(owner.len()), bytes.get_mut(..owner.len())) {
            (Ok(len), Some(slot)) => {
                slot.copy_from_slice(owner);
                Owner::Inline { len, bytes }
            }
            _ => Owner::Heap(owner.into()),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Owner::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(bytes),
            Owner::Heap(bytes) => bytes,
        }
    }

    /// Bytes allocated besides the lock itself.
    pub fn heap_size(&self) -> usize {
        match self {
            Owner::Inline { .. } => 0,
            Owner::Heap(bytes) => bytes.len(),
        }
    }
}

/// Owners compare and hash as their bytes, so a table keyed by `Owner` is looked up
/// by `&[u8]`.
impl PartialEq for Owner {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Owner {}

impl std::hash::Hash for Owner {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl std::borrow::Borrow<[u8]> for Owner {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_owners_are_inline_and_long_ones_on_the_heap() {
        let uuid = b"6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d";
        let owner = Owner::new(uuid);
        assert!(matches!(owner, Owner::Inline { .. }));
        assert_eq!(owner.as_bytes(), uuid);
        assert_eq!(owner.heap_size(), 0);
        let long = vec![7u8; 300];
        let owner = Owner::new(&long);
        assert!(matches!(owner, Owner::Heap(_)));
        assert_eq!(owner.as_bytes(), &long[..]);
        assert_eq!(owner.heap_size(), 300);
        for len in [1, INLINE - 1, INLINE, INLINE + 1] {
            let bytes = vec![b'x'; len];
            assert_eq!(Owner::new(&bytes).as_bytes(), &bytes[..]);
        }
    }

    #[test]
    fn equal_owners_compare_equal_whatever_their_length() {
        assert_eq!(Owner::new(b"abc"), Owner::new(b"abc"));
        assert_ne!(Owner::new(b"abc"), Owner::new(b"abc\0"));
    }
}
