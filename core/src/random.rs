//! Randomness comes in from the host: core never asks the operating system.
//!
//! Nonces, session ids, authentication tokens, continuation points and EventId prefixes
//! are drawn from a [`Random`] the caller hands in: a [`ServiceState`](crate::server::service_state::ServiceState)
//! and a [`ClientConnection`](crate::client::ClientConnection) each own one. The
//! `uaring` binary gives every shard a [`ChaCha`] seeded from the OS CSPRNG (a
//! cryptographically secure generator); tests and simulations seed it with a number
//! ([`ChaCha::from_u64`]) so a run replays exactly.

use rand_chacha::rand_core::{RngCore, SeedableRng};

/// A source of random bytes. Implementations used by a server must be cryptographically
/// secure: the bytes become nonces and session tokens.
pub trait Random {
    /// Fills `buf` with random bytes.
    fn fill(&mut self, buf: &mut [u8]);
}

/// ChaCha20 as a random number generator (rand_chacha): a CSPRNG when its 32-byte seed
/// is secret and random (the binary seeds it from the OS), a reproducible sequence when
/// the seed is a test's number.
pub struct ChaCha(rand_chacha::ChaCha20Rng);

impl ChaCha {
    /// From a 32-byte seed. For a server: 32 bytes from the OS CSPRNG.
    pub fn from_seed(seed: [u8; 32]) -> ChaCha {
        ChaCha(rand_chacha::ChaCha20Rng::from_seed(seed))
    }

    /// From a small number: reproducible, and predictable, so for tests, simulations and
    /// fuzzing only.
    pub fn from_u64(seed: u64) -> ChaCha {
        ChaCha(rand_chacha::ChaCha20Rng::seed_from_u64(seed))
    }
}

impl std::fmt::Debug for ChaCha {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChaCha")
    }
}

impl Random for ChaCha {
    fn fill(&mut self, buf: &mut [u8]) {
        self.0.fill_bytes(buf);
    }
}

/// `n` random bytes.
pub fn bytes(r: &mut dyn Random, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    r.fill(&mut v);
    v
}

/// A random array.
pub fn array<const N: usize>(r: &mut dyn Random) -> [u8; N] {
    let mut b = [0u8; N];
    r.fill(&mut b);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_and_seeds_differ() {
        let a = bytes(&mut ChaCha::from_u64(7), 32);
        assert_eq!(a, bytes(&mut ChaCha::from_u64(7), 32));
        assert_ne!(a, bytes(&mut ChaCha::from_u64(8), 32));
        assert_ne!(a, bytes(&mut ChaCha::from_seed([7; 32]), 32));
        let mut r = ChaCha::from_u64(7);
        assert_ne!(bytes(&mut r, 16), bytes(&mut r, 16), "the stream advances");
    }
}
