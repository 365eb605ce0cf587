//! Deflate's blocks (RFC 1951): each block's symbols coded with Huffman
//! codes of its own, or stored where that is shorter.

use crate::{write_all, OUT_LEN};

const LEN_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LEN_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];
/// The order in which a dynamic block's header gives the code lengths'
/// own code lengths.
const CL_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

/// Bits out, least significant first, through the output buffer.
pub struct Bits {
    pub out: *mut u8,
    pub len: usize,
    pub acc: u64,
    pub count: u32,
}

impl Bits {
    #[inline(always)]
    pub fn put(&mut self, value: u32, n: u32) {
        self.acc |= u64::from(value) << self.count;
        self.count += n;
        if self.count >= 32 {
            unsafe {
                (self.out.add(self.len) as *mut u32).write_unaligned((self.acc as u32).to_le());
            }
            self.len += 4;
            self.acc >>= 32;
            self.count -= 32;
            if self.len >= OUT_LEN {
                self.flush();
            }
        }
    }

    /// Pads to a byte boundary with zero bits.
    pub fn align(&mut self) {
        let pad = (8 - self.count % 8) % 8;
        self.put(0, pad);
        while self.count > 0 {
            unsafe { *self.out.add(self.len) = self.acc as u8 };
            self.len += 1;
            self.acc >>= 8;
            self.count -= 8;
        }
    }

    /// Bytes as they are; the bits must be aligned.
    pub fn bytes(&mut self, data: &[u8]) {
        for piece in data.chunks(OUT_LEN) {
            if self.len + piece.len() > OUT_LEN {
                self.flush();
            }
            unsafe {
                core::ptr::copy_nonoverlapping(piece.as_ptr(), self.out.add(self.len), piece.len());
            }
            self.len += piece.len();
        }
    }

    pub fn flush(&mut self) {
        write_all(self.out, self.len);
        self.len = 0;
    }
}

/// Code lengths of at most `limit` bits for `freq` into `lens`: a Huffman
/// tree built with two queues over the symbols sorted by frequency, the
/// frequencies halved until it is shallow enough. At least two symbols
/// get a code, so every decoder takes the tree.
fn huffman_lengths(freq: &[u32], lens: &mut [u8], limit: u8) {
    let n = freq.len();
    let mut f = [0u32; 286];
    f[..n].copy_from_slice(freq);
    let mut used = f[..n].iter().filter(|&&x| x > 0).count();
    let mut k = 0;
    while used < 2 {
        if f[k] == 0 {
            f[k] = 1;
            used += 1;
        }
        k += 1;
    }
    loop {
        // Leaves sorted by frequency (insertion sort: 286 symbols at most).
        let mut order = [0u16; 286];
        let mut m = 0;
        for s in 0..n {
            if f[s] == 0 {
                continue;
            }
            let mut j = m;
            while j > 0 && f[order[j - 1] as usize] > f[s] {
                order[j] = order[j - 1];
                j -= 1;
            }
            order[j] = s as u16;
            m += 1;
        }
        // Nodes 0..m are the leaves in order, m.. the joins, each made
        // after its children: a parent's index is above its children's.
        let mut weight = [0u32; 2 * 286];
        let mut parent = [0u16; 2 * 286];
        for i in 0..m {
            weight[i] = f[order[i] as usize];
        }
        let (mut leaf, mut join, mut next) = (0, m, m);
        while next < 2 * m - 1 {
            let mut pick = || {
                if leaf < m && (join >= next || weight[leaf] <= weight[join]) {
                    leaf += 1;
                    leaf - 1
                } else {
                    join += 1;
                    join - 1
                }
            };
            let (a, b) = (pick(), pick());
            weight[next] = weight[a].saturating_add(weight[b]);
            parent[a] = next as u16;
            parent[b] = next as u16;
            next += 1;
        }
        let mut depth = [0u8; 2 * 286];
        let root = 2 * m - 2;
        let mut deepest = 0;
        for i in (0..root).rev() {
            depth[i] = depth[parent[i] as usize] + 1;
            if i < m {
                deepest = deepest.max(depth[i]);
            }
        }
        if deepest <= limit {
            lens[..n].fill(0);
            for i in 0..m {
                lens[order[i] as usize] = depth[i];
            }
            return;
        }
        for x in f[..n].iter_mut() {
            if *x > 0 {
                *x = (*x >> 1).max(1);
            }
        }
    }
}

/// Canonical codes for `lens`, bit-reversed to go out least significant
/// bit first.
fn canonical_codes(lens: &[u8], codes: &mut [u16]) {
    let mut count = [0u16; 16];
    for &l in lens {
        count[l as usize] += 1;
    }
    count[0] = 0;
    let mut next = [0u16; 16];
    let mut code = 0u16;
    for bits in 1..16 {
        code = (code + count[bits - 1]) << 1;
        next[bits] = code;
    }
    for (s, &l) in lens.iter().enumerate() {
        if l == 0 {
            continue;
        }
        let c = next[l as usize];
        next[l as usize] += 1;
        codes[s] = c.reverse_bits() >> (16 - u32::from(l));
    }
}

#[inline(always)]
fn len_index(len: usize) -> usize {
    let x = len - 3;
    if len == 258 {
        28
    } else if x < 8 {
        x
    } else {
        let l = 31 - (x as u32).leading_zeros() as usize;
        4 * (l - 1) + ((x >> (l - 2)) & 3)
    }
}

#[inline(always)]
fn dist_index(dist: usize) -> usize {
    let x = dist - 1;
    if x < 4 {
        x
    } else {
        let l = 31 - (x as u32).leading_zeros() as usize;
        2 * l + ((x >> (l - 1)) & 1)
    }
}

/// One block: the symbols `syms` for the input `raw`, coded with codes of
/// its own, or stored if that is shorter.
pub fn block(bits: &mut Bits, syms: &[u32], raw: &[u8]) {
    let mut lit_freq = [0u32; 286];
    let mut dist_freq = [0u32; 30];
    let mut extra_bits: u64 = 0;
    for &s in syms {
        if s & (1 << 31) == 0 {
            lit_freq[s as usize] += 1;
        } else {
            let (li, di) = (
                len_index((s & 0x1ff) as usize),
                dist_index(((s >> 9) & 0xffff) as usize),
            );
            lit_freq[257 + li] += 1;
            dist_freq[di] += 1;
            extra_bits += u64::from(LEN_EXTRA[li]) + u64::from(DIST_EXTRA[di]);
        }
    }
    lit_freq[256] = 1;
    let mut lit_lens = [0u8; 286];
    let mut dist_lens = [0u8; 30];
    huffman_lengths(&lit_freq, &mut lit_lens, 15);
    huffman_lengths(&dist_freq, &mut dist_lens, 15);
    let hlit = 257
        + lit_lens[257..]
            .iter()
            .rposition(|&l| l > 0)
            .map_or(0, |p| p + 1);
    let hdist = 1 + dist_lens.iter().rposition(|&l| l > 0).unwrap_or(0);

    // The two code length lists as one, run-length coded (16: repeat the
    // last 3 to 6 times, 17 and 18: 3 to 10 and 11 to 138 zeros).
    let mut all = [0u8; 286 + 30];
    all[..hlit].copy_from_slice(&lit_lens[..hlit]);
    all[hlit..hlit + hdist].copy_from_slice(&dist_lens[..hdist]);
    let all = &all[..hlit + hdist];
    let mut rle = [(0u8, 0u8); 286 + 30];
    let mut nrle = 0;
    let mut i = 0;
    while i < all.len() {
        let l = all[i];
        let mut run = 1;
        while i + run < all.len() && all[i + run] == l {
            run += 1;
        }
        let mut left = run;
        if l == 0 {
            while left >= 11 {
                let r = left.min(138);
                rle[nrle] = (18, (r - 11) as u8);
                nrle += 1;
                left -= r;
            }
            if left >= 3 {
                rle[nrle] = (17, (left - 3) as u8);
                nrle += 1;
                left = 0;
            }
        } else {
            rle[nrle] = (l, 0);
            nrle += 1;
            left -= 1;
            while left >= 3 {
                let r = left.min(6);
                rle[nrle] = (16, (r - 3) as u8);
                nrle += 1;
                left -= r;
            }
        }
        for _ in 0..left {
            rle[nrle] = (l, 0);
            nrle += 1;
        }
        i += run;
    }
    let rle = &rle[..nrle];
    let mut cl_freq = [0u32; 19];
    for &(s, _) in rle {
        cl_freq[s as usize] += 1;
    }
    let mut cl_lens = [0u8; 19];
    huffman_lengths(&cl_freq, &mut cl_lens, 7);
    let hclen = 4.max(1 + CL_ORDER.iter().rposition(|&s| cl_lens[s] > 0).unwrap_or(0));

    let mut dynamic: u64 = 3 + 5 + 5 + 4 + 3 * hclen as u64 + extra_bits;
    for &(s, _) in rle {
        dynamic += u64::from(cl_lens[s as usize])
            + match s {
                16 => 2,
                17 => 3,
                18 => 7,
                _ => 0,
            };
    }
    for s in 0..286 {
        dynamic += u64::from(lit_freq[s]) * u64::from(lit_lens[s]);
    }
    for s in 0..30 {
        dynamic += u64::from(dist_freq[s]) * u64::from(dist_lens[s]);
    }
    let stored = (raw.len() as u64 + 5 * (raw.len() as u64 / 65535 + 1)) * 8 + 7;
    if stored <= dynamic {
        stored_blocks(bits, raw);
        return;
    }

    let mut cl_codes = [0u16; 19];
    canonical_codes(&cl_lens, &mut cl_codes);
    let mut lit_codes = [0u16; 286];
    canonical_codes(&lit_lens, &mut lit_codes);
    let mut dist_codes = [0u16; 30];
    canonical_codes(&dist_lens, &mut dist_codes);

    bits.put(0b100, 3); // not final, dynamic codes
    bits.put((hlit - 257) as u32, 5);
    bits.put((hdist - 1) as u32, 5);
    bits.put((hclen - 4) as u32, 4);
    for &s in &CL_ORDER[..hclen] {
        bits.put(u32::from(cl_lens[s]), 3);
    }
    for &(s, extra) in rle {
        bits.put(
            u32::from(cl_codes[s as usize]),
            u32::from(cl_lens[s as usize]),
        );
        match s {
            16 => bits.put(u32::from(extra), 2),
            17 => bits.put(u32::from(extra), 3),
            18 => bits.put(u32::from(extra), 7),
            _ => {}
        }
    }
    for &s in syms {
        if s & (1 << 31) == 0 {
            bits.put(
                u32::from(lit_codes[s as usize]),
                u32::from(lit_lens[s as usize]),
            );
        } else {
            let (len, dist) = ((s & 0x1ff) as usize, ((s >> 9) & 0xffff) as usize);
            let (li, di) = (len_index(len), dist_index(dist));
            bits.put(
                u32::from(lit_codes[257 + li]),
                u32::from(lit_lens[257 + li]),
            );
            bits.put(
                (len - LEN_BASE[li] as usize) as u32,
                u32::from(LEN_EXTRA[li]),
            );
            bits.put(u32::from(dist_codes[di]), u32::from(dist_lens[di]));
            bits.put(
                (dist - DIST_BASE[di] as usize) as u32,
                u32::from(DIST_EXTRA[di]),
            );
        }
    }
    bits.put(u32::from(lit_codes[256]), u32::from(lit_lens[256]));
}

fn stored_blocks(bits: &mut Bits, raw: &[u8]) {
    for piece in raw.chunks(65535) {
        bits.put(0, 3); // not final, stored
        bits.align();
        let n = piece.len() as u16;
        bits.bytes(&n.to_le_bytes());
        bits.bytes(&(!n).to_le_bytes());
        bits.bytes(piece);
    }
}
