//! SipHash-2-4 (Aumasson and Bernstein), a keyed hash short enough to be
//! a MAC: the agent's supervisor signs a step's status file with it under
//! a key the runner chose for that start, and the runner checks it. One
//! text, taken in by the agent (`agent.rs`) and by the crate
//! (`detached/status_mac.rs`), so both compute the same function.

// Each taker uses a part of it.
#![allow(dead_code)]

/// The SipHash-2-4 of `parts`, one message in pieces, under the 16-byte
/// key `key` (read as two little-endian words).
pub fn siphash24(key: &[u8; 16], parts: &[&[u8]]) -> u64 {
    let mut k = [0u64; 2];
    for (i, word) in k.iter_mut().enumerate() {
        for j in 0..8 {
            *word |= u64::from(key[i * 8 + j]) << (8 * j);
        }
    }
    let mut v = [
        k[0] ^ 0x736f_6d65_7073_6575,
        k[1] ^ 0x646f_7261_6e64_6f6d,
        k[0] ^ 0x6c79_6765_6e65_7261,
        k[1] ^ 0x7465_6462_7974_6573,
    ];
    let mut word = 0u64;
    let mut filled = 0u32;
    let mut total = 0u64;
    for part in parts {
        for &b in part.iter() {
            word |= u64::from(b) << (8 * filled);
            filled += 1;
            total = total.wrapping_add(1);
            if filled == 8 {
                compress(&mut v, word, 2);
                word = 0;
                filled = 0;
            }
        }
    }
    word |= (total & 0xff) << 56;
    compress(&mut v, word, 2);
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

fn compress(v: &mut [u64; 4], m: u64, rounds: usize) {
    v[3] ^= m;
    for _ in 0..rounds {
        round(v);
    }
    v[0] ^= m;
}

fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// What a status's MAC is computed over, in pieces: a tag, the step's
/// files' prefix (a status cannot be moved to another step's file) and
/// the status line without its newline.
pub fn status_mac(key: &[u8; 16], prefix: &[u8], line: &[u8]) -> u64 {
    siphash24(key, &[b"knotless-status\n", prefix, b"\n", line])
}

/// `key` from its 32 lowercase hex digits.
pub fn key_of_hex(hex: &[u8]) -> Option<[u8; 16]> {
    if hex.len() != 32 {
        return None;
    }
    let mut key = [0u8; 16];
    for (slot, pair) in key.iter_mut().zip(hex.chunks(2)) {
        *slot = hex_digit(pair[0])? << 4 | hex_digit(pair[1])?;
    }
    Some(key)
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// `mac` as the 16 lowercase hex digits a status file carries.
pub fn mac_hex(mac: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, slot) in out.iter_mut().enumerate() {
        let nibble = (mac >> (60 - 4 * i)) & 0xf;
        *slot = b"0123456789abcdef"[nibble as usize];
    }
    out
}
