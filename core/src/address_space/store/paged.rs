//! Copy-on-write paged vectors: what a version of the address space shares with the next.
//!
//! A [`Paged`] is a vector of `Arc`'d fixed-size pages. A clone copies the page pointers
//! only (8 bytes a page); a write copies the one page it lands in when another version still
//! shares it (`Arc::make_mut`), and nothing when it does not (the builder, or a page an
//! edit already copied). A read is one load of the page pointer and one of the element: the
//! page is a fixed-size array behind a thin pointer, so the masked index needs no bounds
//! check.

use std::sync::Arc;

/// A copy-on-write vector of `T` in pages of `N` (a power of two) elements. Elements past
/// [`Paged::len`] in the last page hold `T::default()`.
#[derive(Clone)]
pub(crate) struct Paged<T, const N: usize> {
    pages: Vec<Arc<[T; N]>>,
    len: u32,
}

impl<T, const N: usize> Default for Paged<T, N> {
    fn default() -> Self {
        Paged {
            pages: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Clone + Default, const N: usize> Paged<T, N> {
    const SHIFT: u32 = N.trailing_zeros();
    const MASK: usize = N - 1;

    /// The element at `i`.
    #[inline(always)]
    pub(crate) fn get(&self, i: u32) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let page = self.pages.get((i >> Self::SHIFT) as usize)?;
        // The mask keeps the index inside the page: the compiler drops the check.
        page.get(i as usize & Self::MASK)
    }

    /// The element at `i`, to change in place (its page copied first when shared).
    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        let page = self.pages.get_mut((i >> Self::SHIFT) as usize)?;
        page_mut(page)?.get_mut(i as usize & Self::MASK)
    }

    /// One past the highest index in use.
    #[inline]
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// Sets the element at `i`, growing the vector (with defaults) when `i` is past its end.
    pub(crate) fn set(&mut self, i: u32, v: T) {
        let p = (i >> Self::SHIFT) as usize;
        while self.pages.len() <= p {
            self.pages.push(new_page());
        }
        if let Some(page) = self.pages.get_mut(p) {
            if let Some(slot) = page_mut(page).and_then(|p| p.get_mut(i as usize & Self::MASK)) {
                *slot = v;
            }
        }
        self.len = self.len.max(i.saturating_add(1));
    }

    /// Appends `v`; its index.
    pub(crate) fn push(&mut self, v: T) -> u32 {
        let i = self.len;
        self.set(i, v);
        i
    }

    /// Bytes held by the pages (what a version holds alone when no page is shared).
    pub(crate) fn bytes(&self) -> usize {
        self.pages.len() * std::mem::size_of::<[T; N]>()
    }
}

/// A page of defaults. Out of line and cold: a page is a big array, and building it in a
/// caller's frame gave every `set` and `get_mut` a frame of the page's size to probe
/// (tens of KiB of stack touched per call, most of a million-node build's `set`).
#[cold]
#[inline(never)]
pub(crate) fn new_page<T: Default, const N: usize>() -> Arc<[T; N]> {
    Arc::new(std::array::from_fn(|_| T::default()))
}

/// The page to write: itself when no other version shares it (the usual case: no frame
/// of the page's size, which `Arc::make_mut` has for its copy), else a copy
/// ([`copy_page`]). `None` only if the copy were shared still, which it is not.
#[inline]
pub(crate) fn page_mut<T: Clone, const N: usize>(page: &mut Arc<[T; N]>) -> Option<&mut [T; N]> {
    if Arc::get_mut(page).is_none() {
        copy_page(page);
    }
    Arc::get_mut(page)
}

/// Replaces a shared page by a copy of it (out of line and cold, as [`new_page`]).
#[cold]
#[inline(never)]
fn copy_page<T: Clone, const N: usize>(page: &mut Arc<[T; N]>) {
    Arc::make_mut(page);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_on_write_shares_untouched_pages() {
        let mut a: Paged<u32, 4> = Paged::default();
        for i in 0..10 {
            assert_eq!(a.push(i * 10), i);
        }
        let b = a.clone();
        a.set(5, 99);
        assert_eq!(a.get(5), Some(&99));
        assert_eq!(b.get(5), Some(&50));
        assert!(Arc::ptr_eq(&a.pages[0], &b.pages[0]));
        assert!(!Arc::ptr_eq(&a.pages[1], &b.pages[1]));
        assert_eq!(a.get(10), None);
        a.set(13, 7);
        assert_eq!(a.len(), 14);
        assert_eq!(a.get(12), Some(&0));
        assert_eq!((0..a.len()).filter_map(|i| a.get(i)).count(), 14);
        *a.get_mut(0).unwrap() = 1;
        assert_eq!((a.get(0), b.get(0)), (Some(&1), Some(&0)));
    }
}
