//! Randomness for nonces, Guids and tokens: the OS CSPRNG (getrandom), no state.

/// Fills `buf` from the operating system's CSPRNG. Aborts the process if the OS
/// cannot provide randomness: a server must never hand out predictable nonces.
pub fn fill(buf: &mut [u8]) {
    if let Err(e) = getrandom::getrandom(buf) {
        panic!("the OS random number generator failed: {e}");
    }
}

/// `n` random bytes.
pub fn bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    fill(&mut v);
    v
}

pub fn u32() -> u32 {
    let mut b = [0u8; 4];
    fill(&mut b);
    u32::from_le_bytes(b)
}
