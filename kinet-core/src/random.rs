//! A little randomness for jitter, without a dependency.

use std::hash::{BuildHasher, Hasher};

/// A number in [0, 1) in steps of 0.001, different on every call (a fresh
/// `RandomState` is seeded randomly).
pub(crate) fn unit() -> f64 {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (random % 1000) as f64 / 1000.0
}

/// 128 random bits as 32 hex digits (two randomly seeded hashes).
pub(crate) fn token() -> String {
    let mut text = String::with_capacity(32);
    for salt in 0..2u64 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(salt);
        text.push_str(&format!("{:016x}", hasher.finish()));
    }
    text
}
