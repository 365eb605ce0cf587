//! What the compiler expects of a C library: copies, fills and
//! compares it lowers loops to, and the unwinder's personality that the
//! prebuilt `core` names. With no C library they are this program's own.

use core::arch::asm;

#[no_mangle]
unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _, inout("rsi") src => _,
         options(nostack, preserves_flags));
    dst
}

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

#[no_mangle]
unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _, in("al") c as u8,
         options(nostack, preserves_flags));
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
