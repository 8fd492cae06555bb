//! Bytes of the address space: string, Guid and ByteString NodeIds and interned strings
//! (browse names, display names, descriptions), appended to chunks of 64 KiB shared
//! between versions. No string has an allocation of its own.

use std::sync::Arc;

use super::index::{hash_key, Hash, HashIndex};
use super::paged::Paged;

const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;

/// What an [`Arena`] keeps: text (`String`, read back as `&str` with no UTF-8 check, only
/// the two char-boundary checks of slicing) or bytes (`Vec<u8>`).
pub(crate) trait Piece: Clone + Default {
    type Slice: ?Sized;
    fn piece_len(&self) -> usize;
    fn with_room(n: usize) -> Self;
    fn room(&self) -> usize;
    fn make_room(&mut self, n: usize);
    fn append(&mut self, s: &Self::Slice);
    fn slice_len(s: &Self::Slice) -> usize;
    fn part(&self, from: usize, len: usize) -> Option<&Self::Slice>;
    fn empty<'a>() -> &'a Self::Slice;
}

impl Piece for String {
    type Slice = str;
    fn piece_len(&self) -> usize {
        self.len()
    }
    fn with_room(n: usize) -> Self {
        String::with_capacity(n)
    }
    fn room(&self) -> usize {
        self.capacity()
    }
    fn make_room(&mut self, n: usize) {
        self.reserve(n)
    }
    fn append(&mut self, s: &str) {
        self.push_str(s)
    }
    fn slice_len(s: &str) -> usize {
        s.len()
    }
    #[inline]
    fn part(&self, from: usize, len: usize) -> Option<&str> {
        self.get(from..from + len)
    }
    fn empty<'a>() -> &'a str {
        ""
    }
}

impl Piece for Vec<u8> {
    type Slice = [u8];
    fn piece_len(&self) -> usize {
        self.len()
    }
    fn with_room(n: usize) -> Self {
        Vec::with_capacity(n)
    }
    fn room(&self) -> usize {
        self.capacity()
    }
    fn make_room(&mut self, n: usize) {
        self.reserve(n)
    }
    fn append(&mut self, s: &[u8]) {
        self.extend_from_slice(s)
    }
    fn slice_len(s: &[u8]) -> usize {
        s.len()
    }
    #[inline]
    fn part(&self, from: usize, len: usize) -> Option<&[u8]> {
        self.get(from..from + len)
    }
    fn empty<'a>() -> &'a [u8] {
        &[]
    }
}

/// Append-only text or bytes: a position names a chunk (high 16 bits) and an offset in it.
/// A piece longer than a chunk gets a chunk of its own.
#[derive(Clone)]
pub(crate) struct Arena<T: Piece = String> {
    chunks: Vec<Arc<T>>,
}

impl<T: Piece> Default for Arena<T> {
    fn default() -> Self {
        Arena { chunks: Vec::new() }
    }
}

impl<T: Piece> Arena<T> {
    /// Appends `b`; its position. `None` when the arena is full (4 GiB).
    pub(crate) fn push(&mut self, b: &T::Slice) -> Option<u32> {
        let n = T::slice_len(b);
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.piece_len() + n <= CHUNK);
        if !fits {
            if self.chunks.len() >= 1 << (32 - CHUNK_BITS) {
                return None;
            }
            self.chunks.push(Arc::new(T::with_room(CHUNK.max(n))));
        }
        let k = self.chunks.len() - 1;
        let c = Arc::make_mut(self.chunks.last_mut()?);
        if c.room() < CHUNK.min(c.piece_len() + n) {
            let more = CHUNK - c.piece_len();
            c.make_room(more);
        }
        let off = c.piece_len();
        c.append(b);
        Some(((k as u32) << CHUNK_BITS) | off as u32)
    }

    #[inline]
    pub(crate) fn get(&self, pos: u32, len: u32) -> &T::Slice {
        let c = match self.chunks.get((pos >> CHUNK_BITS) as usize) {
            Some(c) => c,
            None => return T::empty(),
        };
        let off = (pos as usize) & (CHUNK - 1);
        c.part(off, len as usize).unwrap_or(T::empty())
    }

    pub(crate) fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.room()).sum()
    }
}

/// Where an interned string's bytes are.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(crate) struct Span {
    pub pos: u32,
    pub len: u32,
}

/// Interned strings by id: 0 is the null string, 1 the empty one; equal strings share an id.
#[derive(Clone)]
pub(crate) struct Strings {
    spans: Paged<Span, 1024>,
    bytes: Arena,
    index: HashIndex,
}

pub(crate) const NULL_STR: u32 = 0;
const EMPTY_STR: u32 = 1;

impl Default for Strings {
    fn default() -> Self {
        let mut s = Strings {
            spans: Paged::default(),
            bytes: Arena::default(),
            index: HashIndex::default(),
        };
        s.spans.push(Span::default()); // NULL_STR
        s.spans.push(Span::default()); // EMPTY_STR
        s
    }
}

impl Strings {
    /// The string of `id` (`None` for the null string).
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&str> {
        if id == NULL_STR {
            return None;
        }
        let s = self.spans.get(id)?;
        Some(self.bytes.get(s.pos, s.len))
    }

    /// The id of `s` (`None`: the null string), interning it when new. `None` when full.
    pub(crate) fn intern(&mut self, s: Option<&str>) -> Option<u32> {
        let h = s.map(Strings::hash);
        self.intern_hashed(s, h)
    }

    /// The index's hash of a string.
    #[inline]
    pub(crate) fn hash(s: &str) -> Hash {
        hash_key(0, 0, s.as_bytes())
    }

    /// Reads ahead the first slot the index probes for `h` ([`HashIndex::touch`]).
    #[inline]
    pub(crate) fn touch(&self, h: Hash) {
        self.index.touch(h);
    }

    /// [`Strings::intern`] with the string's hash computed already ([`Strings::hash`];
    /// `None` with a null string).
    pub(crate) fn intern_hashed(&mut self, s: Option<&str>, h: Option<Hash>) -> Option<u32> {
        let Some(s) = s else { return Some(NULL_STR) };
        if s.is_empty() {
            return Some(EMPTY_STR);
        }
        let h = h.unwrap_or_else(|| Strings::hash(s));
        let (spans, bytes) = (&self.spans, &self.bytes);
        let same = |id: u32| {
            spans
                .get(id)
                .is_some_and(|sp| bytes.get(sp.pos, sp.len) == s)
        };
        if self.spans.len() > super::index::MAX_ENTRY {
            return self.index.find(h, same);
        }
        // Found, or entered under the id it gets next, in one probe (the closures borrow
        // the spans and bytes; the index is a separate field).
        let id = self.spans.len();
        let rehash = |id: u32| {
            let sp = spans.get(id).copied().unwrap_or_default();
            hash_key(0, 0, bytes.get(sp.pos, sp.len).as_bytes())
        };
        let mut index = self.index.take();
        let found = index.insert_unique(h, id, same, &rehash);
        self.index = index;
        if let Err(id) = found {
            return Some(id);
        }
        let Some(pos) = self.bytes.push(s) else {
            self.index.remove(h, id);
            return None;
        };
        self.spans.push(Span {
            pos,
            len: s.len() as u32,
        });
        Some(id)
    }

    /// Makes room in the index for `extra` more strings.
    pub(crate) fn reserve(&mut self, extra: usize) {
        let (spans, bytes) = (&self.spans, &self.bytes);
        let rehash = |id: u32| {
            let sp = spans.get(id).copied().unwrap_or_default();
            hash_key(0, 0, bytes.get(sp.pos, sp.len).as_bytes())
        };
        let mut index = self.index.take();
        index.reserve(extra, &rehash);
        self.index = index;
    }

    pub(crate) fn bytes(&self) -> usize {
        self.spans.bytes() + self.bytes.bytes() + self.index.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_shares_equal_strings() {
        let mut s = Strings::default();
        assert_eq!(s.intern(None), Some(NULL_STR));
        assert_eq!(s.get(NULL_STR), None);
        let empty = s.intern(Some("")).unwrap();
        assert_eq!(s.get(empty), Some(""));
        let a = s.intern(Some("EURange")).unwrap();
        let b = s.intern(Some("EngineeringUnits")).unwrap();
        assert_ne!(a, b);
        assert_eq!(s.intern(Some("EURange")), Some(a));
        let big = "x".repeat(100_000);
        let c = s.intern(Some(&big)).unwrap();
        let ids: Vec<u32> = (0..10_000)
            .map(|i| s.intern(Some(&format!("V{i}"))).unwrap())
            .collect();
        let copy = s.clone();
        assert_eq!(s.get(a), Some("EURange"));
        assert_eq!(s.get(c).map(str::len), Some(100_000));
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(copy.get(*id), Some(format!("V{i}").as_str()));
            assert_eq!(s.intern(Some(&format!("V{i}"))), Some(*id));
        }
    }
}
