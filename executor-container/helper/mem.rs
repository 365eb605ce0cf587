//! What the compiler expects of a C library: copies, fills and
//! compares it lowers loops to, and the unwinder's personality that the
//! prebuilt `core` names. With no C library they are this program's own.

use core::arch::asm;

#[cfg(target_arch = "x86_64")]
#[no_mangle]
unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _, inout("rsi") src => _,
         options(nostack, preserves_flags));
    dst
}

#[cfg(target_arch = "x86_64")]
#[no_mangle]
unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize) <= (src as usize) || (dst as usize) >= (src as usize) + n {
        return memcpy(dst, src, n);
    }
    // Overlapping with the destination above: copy from the end down.
    asm!("std", "rep movsb", "cld",
         inout("rcx") n => _, inout("rdi") dst.add(n - 1) => _, inout("rsi") src.add(n - 1) => _,
         options(nostack));
    dst
}

#[cfg(target_arch = "x86_64")]
#[no_mangle]
unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _, in("al") c as u8,
         options(nostack, preserves_flags));
    dst
}

// aarch64 has no string instructions: eight bytes at a time (unaligned
// loads and stores are allowed), then the rest one by one. In assembly,
// as a loop in Rust would be lowered to a call of the function it is in.
#[cfg(target_arch = "aarch64")]
#[no_mangle]
unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    asm!(
        "2: cmp {n}, #8",
        "b.lo 3f",
        "ldr {t}, [{s}], #8",
        "str {t}, [{d}], #8",
        "sub {n}, {n}, #8",
        "b 2b",
        "3: cbz {n}, 4f",
        "ldrb {t:w}, [{s}], #1",
        "strb {t:w}, [{d}], #1",
        "sub {n}, {n}, #1",
        "b 3b",
        "4:",
        n = inout(reg) n => _, s = inout(reg) src => _, d = inout(reg) dst => _, t = out(reg) _,
        options(nostack),
    );
    dst
}

#[cfg(target_arch = "aarch64")]
#[no_mangle]
unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize) <= (src as usize) || (dst as usize) >= (src as usize) + n {
        return memcpy(dst, src, n);
    }
    // Overlapping with the destination above: copy from the end down.
    asm!(
        "2: cbz {n}, 3f",
        "ldrb {t:w}, [{s}, #-1]!",
        "strb {t:w}, [{d}, #-1]!",
        "sub {n}, {n}, #1",
        "b 2b",
        "3:",
        n = inout(reg) n => _, s = inout(reg) src.add(n) => _, d = inout(reg) dst.add(n) => _,
        t = out(reg) _,
        options(nostack),
    );
    dst
}

#[cfg(target_arch = "aarch64")]
#[no_mangle]
unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    asm!(
        "2: cbz {n}, 3f",
        "strb {c:w}, [{d}], #1",
        "sub {n}, {n}, #1",
        "b 2b",
        "3:",
        n = inout(reg) n => _, d = inout(reg) dst => _, c = in(reg) c,
        options(nostack),
    );
    dst
}

#[no_mangle]
unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        let (x, y) = (*a.add(i), *b.add(i));
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

#[no_mangle]
unsafe extern "C" fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // A read through a volatile pointer, or the loop is lowered to a call
    // of this very function.
    while core::ptr::read_volatile(s.add(n)) != 0 {
        n += 1;
    }
    n
}

#[no_mangle]
unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    memcmp(a, b, n)
}

// The prebuilt `core` refers to it from its unwind tables; with
// `panic=abort` nothing ever calls it.
#[no_mangle]
extern "C" fn rust_eh_personality() {}
