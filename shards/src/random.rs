//! The randomness core takes from its host: a ChaCha20 generator seeded with 32 bytes from
//! the OS CSPRNG (getrandom), one per shard and per client connection. Core never asks the
//! OS itself (it is sans-IO and deterministic under a test's seed).

use uaring_core::random::ChaCha;

/// A ChaCha20 CSPRNG seeded from the operating system's random number generator.
pub fn os_seeded() -> std::io::Result<ChaCha> {
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| {
        std::io::Error::other(format!("the OS random number generator failed: {e}"))
    })?;
    Ok(ChaCha::from_seed(seed))
}

#[cfg(test)]
mod tests {
    use uaring_core::random::{bytes, Random};

    #[test]
    fn two_generators_differ() {
        let mut a = super::os_seeded().unwrap();
        let mut b = super::os_seeded().unwrap();
        let (x, y) = (bytes(&mut a, 32), bytes(&mut b, 32));
        assert_ne!(x, y);
        let mut z = [0u8; 32];
        a.fill(&mut z);
        assert_ne!(x.as_slice(), z.as_slice());
    }
}
