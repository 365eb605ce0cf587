//! What the writer remembers about paths inside the destination, kept so
//! that memory and time stay linear in the stream whatever it holds.
//!
//! A path is remembered as a keyed 128-bit digest ([`PathKey`]), 16 bytes
//! however long the path is. Keys are built one part at a time from the
//! parent's key, so all the prefixes of a path cost the length of the
//! path, not its square. The digest is keyed with random keys per unpack,
//! so a stream cannot be built to make two paths share a key.

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::hash::BuildHasher;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A path inside the destination, as a digest; the default is the
/// destination itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(super) struct PathKey(u64, u64);

/// The random keys of one unpack's digests.
pub(super) struct Keys {
    high: RandomState,
    low: RandomState,
}

impl Keys {
    pub(super) fn new() -> Self {
        Keys {
            high: RandomState::new(),
            low: RandomState::new(),
        }
    }

    /// The key of `part` inside the folder whose key is `parent`.
    pub(super) fn child(&self, parent: PathKey, part: &OsStr) -> PathKey {
        let part = part.as_bytes();
        PathKey(
            self.high.hash_one((parent, part)),
            self.low.hash_one((parent, part)),
        )
    }

    /// The key of a relative path made only of plain parts.
    pub(super) fn of(&self, rel: &Path) -> PathKey {
        rel.iter()
            .fold(PathKey::default(), |key, part| self.child(key, part))
    }
}

/// A set of facts that stay true once learnt and are cheap to learn
/// again (that a path is a real folder): when full, it forgets all of
/// them and starts over, so it never holds more than its cap.
pub(super) struct Forgetful {
    known: HashSet<PathKey>,
    cap: usize,
}

impl Forgetful {
    pub(super) fn new(cap: usize) -> Self {
        Forgetful {
            known: HashSet::new(),
            cap,
        }
    }

    pub(super) fn contains(&self, key: &PathKey) -> bool {
        self.known.contains(key)
    }

    pub(super) fn insert(&mut self, key: PathKey) {
        if self.known.len() >= self.cap {
            self.known = HashSet::new();
        }
        self.known.insert(key);
    }

    pub(super) fn remove(&mut self, key: &PathKey) {
        self.known.remove(key);
    }
}

/// A set that must not forget (the paths links pass through): when full,
/// what would not fit is refused by the caller instead. It keeps 64 bits
/// of each key: a collision here can only make a link be refused, never
/// let one through, so half the key halves the record.
pub(super) struct Capped {
    kept: HashSet<u64>,
    cap: usize,
}

impl Capped {
    pub(super) fn new(cap: usize) -> Self {
        Capped {
            kept: HashSet::new(),
            cap,
        }
    }

    pub(super) fn contains(&self, key: &PathKey) -> bool {
        self.kept.contains(&key.0)
    }

    /// Whether `more` keys would still fit (counting each as new).
    pub(super) fn has_room_for(&self, more: usize) -> bool {
        self.kept.len().saturating_add(more) <= self.cap
    }

    pub(super) fn extend(&mut self, keys: impl IntoIterator<Item = PathKey>) {
        self.kept.extend(keys.into_iter().map(|key| key.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_its_paths_and_built_part_by_part() {
        let keys = Keys::new();
        let ab = keys.child(
            keys.child(PathKey::default(), OsStr::new("a")),
            OsStr::new("b"),
        );
        assert_eq!(keys.of(Path::new("a/b")), ab);
        assert_ne!(keys.of(Path::new("ab")), ab);
        assert_ne!(keys.of(Path::new("b/a")), ab);
        assert_eq!(keys.of(Path::new("")), PathKey::default());
    }

    #[test]
    fn a_forgetful_set_never_holds_more_than_its_cap() {
        let keys = Keys::new();
        let mut set = Forgetful::new(3);
        for name in ["a", "b", "c", "d"] {
            set.insert(keys.of(Path::new(name)));
        }
        assert!(set.known.len() <= 3);
        assert!(set.contains(&keys.of(Path::new("d"))));
    }
}
