//! `knotless-gz`: what a compressed copy out runs in the environment in
//! place of the image's `gzip -1`. It reads a stream on fd 0 and writes
//! it gzip-compressed (RFC 1951 in RFC 1952's frame) to fd 1.
//!
//! It exists because the image's `gzip` sets the pace of every copy out
//! over a slow link: Debian's busybox `gzip` ignores its level options
//! and compresses at level 6, about 40 MB/s on one core, where the 100
//! Mbit/s link it feeds would take a source tree at 5 times its size.
//! This one matches as `gzip -1` does (one hash probe, greedy, four
//! bytes at least) and codes each block with its own Huffman codes, or
//! stores it where that is shorter (incompressible data costs a copy).
//! It is built by `build.rs` for x86_64 Linux with no C library and sent
//! in with the step scripts; an environment it cannot run in gets the
//! image's `gzip`, or an uncompressed tar.
//!
//! Its memory is fixed (about 600 KiB, all static): a 32 KiB window
//! behind a 128 KiB piece of input, a hash table, one block's symbols and
//! an output buffer.

#![no_std]
#![no_main]

#[path = "gz/deflate.rs"]
mod deflate;
#[path = "mem.rs"]
mod mem;
#[path = "sys.rs"]
mod sys;

use deflate::{block, Bits};
use sys::{exit, read_some};

/// How far back a match may point (deflate's window).
const WINDOW: usize = 32768;
/// How much new input each round reads before it is matched.
const PIECE: usize = 1 << 17;
/// Bytes past the data that a matcher's 8-byte read may touch.
const SLACK: usize = 16;
const HASH_BITS: u32 = 15;
/// A block's symbols at most: a block ends when they are, or the piece is.
const SYMBOLS: usize = 1 << 15;
const MIN_MATCH: usize = 4;
const MAX_MATCH: usize = 258;
const OUT_LEN: usize = 1 << 16;

static mut DATA: [u8; WINDOW + PIECE + SLACK] = [0; WINDOW + PIECE + SLACK];
static mut HEADS: [u32; 1 << HASH_BITS] = [0; 1 << HASH_BITS];
/// A literal is its byte; a match is `1 << 31 | distance << 9 | length`.
static mut SYMS: [u32; SYMBOLS] = [0; SYMBOLS];
static mut OUT: [u8; OUT_LEN + 64] = [0; OUT_LEN + 64];
static mut CRC: [[u32; 256]; 8] = [[0; 256]; 8];

/// Reads into `buf` until it is full or the input ends: the bytes read.
fn fill(buf: *mut u8, len: usize) -> usize {
    let mut got = 0;
    while got < len {
        match read_some(0, unsafe { buf.add(got) }, len - got) {
            Some(0) => break,
            Some(n) => got += n,
            None => exit(1),
        }
    }
    got
}

/// Writes `len` bytes from `at` to the output, or ends the program: a
/// compressed stream with a hole is worth nothing.
fn write_all(at: *const u8, len: usize) {
    if !sys::write_all(1, at, len) {
        exit(1)
    }
}

fn crc_init(table: &mut [[u32; 256]; 8]) {
    for i in 0..256 {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        table[0][i] = c;
    }
    for i in 0..256 {
        for k in 1..8 {
            let prev = table[k - 1][i];
            table[k][i] = (prev >> 8) ^ table[0][(prev & 0xff) as usize];
        }
    }
}

/// Slicing by eight.
fn crc_update(table: &[[u32; 256]; 8], mut crc: u32, data: &[u8]) -> u32 {
    crc = !crc;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let hi = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        crc = table[7][(lo & 0xff) as usize]
            ^ table[6][((lo >> 8) & 0xff) as usize]
            ^ table[5][((lo >> 16) & 0xff) as usize]
            ^ table[4][(lo >> 24) as usize]
            ^ table[3][(hi & 0xff) as usize]
            ^ table[2][((hi >> 8) & 0xff) as usize]
            ^ table[1][((hi >> 16) & 0xff) as usize]
            ^ table[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        crc = (crc >> 8) ^ table[0][((crc ^ u32::from(b)) & 0xff) as usize];
    }
    !crc
}

#[inline(always)]
unsafe fn load32(p: *const u8) -> u32 {
    (p as *const u32).read_unaligned()
}

#[inline(always)]
fn hash(v: u32) -> usize {
    (v.wrapping_mul(2_654_435_761) >> (32 - HASH_BITS)) as usize
}

/// How many bytes at `a` and `b` agree, at most `most`.
#[inline(always)]
unsafe fn agree(a: *const u8, b: *const u8, most: usize) -> usize {
    let mut n = 0;
    while n + 8 <= most {
        let x =
            (a.add(n) as *const u64).read_unaligned() ^ (b.add(n) as *const u64).read_unaligned();
        if x != 0 {
            return n + (x.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    while n < most && *a.add(n) == *b.add(n) {
        n += 1;
    }
    n
}

extern "C" fn entry(_stack: *const usize) -> ! {
    // One reference to each static, made once; the window is reached
    // through its pointer alone.
    let (heads, syms, crc_table) = unsafe {
        (
            &mut *core::ptr::addr_of_mut!(HEADS),
            &mut *core::ptr::addr_of_mut!(SYMS),
            &mut *core::ptr::addr_of_mut!(CRC),
        )
    };
    let base = core::ptr::addr_of_mut!(DATA) as *mut u8;
    let at =
        |from: usize, to: usize| unsafe { core::slice::from_raw_parts(base.add(from), to - from) };
    crc_init(crc_table);
    let mut bits = Bits {
        out: core::ptr::addr_of_mut!(OUT) as *mut u8,
        len: 0,
        acc: 0,
        count: 0,
    };
    // gzip's header: deflate, no name, no time, fastest, Unix.
    bits.bytes(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3]);
    let (mut crc, mut size) = (0u32, 0u32);
    // Positions below `low` hold no input yet.
    let mut low = WINDOW;
    loop {
        let got = fill(unsafe { base.add(WINDOW) }, PIECE);
        if got == 0 {
            break;
        }
        let end = WINDOW + got;
        crc = crc_update(crc_table, crc, at(WINDOW, end));
        size = size.wrapping_add(got as u32);
        let (mut p, mut start, mut nsyms) = (WINDOW, WINDOW, 0);
        let mut misses = 0usize;
        while p < end {
            if nsyms + MAX_MATCH >= SYMBOLS {
                block(&mut bits, &syms[..nsyms], at(start, p));
                start = p;
                nsyms = 0;
            }
            if p + MIN_MATCH <= end {
                let v = unsafe { load32(base.add(p)) };
                let h = hash(v);
                let cand = heads[h] as usize;
                heads[h] = p as u32;
                if cand >= low
                    && cand < p
                    && p - cand <= WINDOW
                    && unsafe { load32(base.add(cand)) } == v
                {
                    let most = (end - p).min(MAX_MATCH);
                    let len = MIN_MATCH
                        + unsafe {
                            agree(
                                base.add(cand + MIN_MATCH),
                                base.add(p + MIN_MATCH),
                                most - MIN_MATCH,
                            )
                        };
                    syms[nsyms] = 1 << 31 | ((p - cand) as u32) << 9 | len as u32;
                    nsyms += 1;
                    // The match's last position starts the next search well.
                    if len > MIN_MATCH && p + len + MIN_MATCH <= end {
                        let q = p + len - 1;
                        heads[hash(unsafe { load32(base.add(q)) })] = q as u32;
                    }
                    p += len;
                    misses = 0;
                    continue;
                }
            }
            // Past 64 misses in a row the search steps further, so data
            // that does not compress costs little more than a copy.
            let step = (1 + (misses >> 6))
                .min(end - p)
                .min(SYMBOLS - MAX_MATCH - nsyms);
            for q in p..p + step {
                syms[nsyms] = u32::from(unsafe { *base.add(q) });
                nsyms += 1;
            }
            p += step;
            misses += 1;
        }
        block(&mut bits, &syms[..nsyms], at(start, end));
        // The last window's worth goes to the front for the next piece's
        // matches; the table's positions move with it.
        let shift = end - WINDOW;
        unsafe { core::ptr::copy(base.add(shift), base, WINDOW) };
        for h in heads.iter_mut() {
            *h = (*h as usize).saturating_sub(shift) as u32;
        }
        low = low.saturating_sub(shift);
    }
    // An empty final block with the fixed codes: its end-of-block code.
    bits.put(0b011, 3);
    bits.put(0, 7);
    bits.align();
    bits.bytes(&crc.to_le_bytes());
    bits.bytes(&size.to_le_bytes());
    bits.flush();
    exit(0)
}
