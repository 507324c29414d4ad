//! Per-thread reuse of the multi-megabyte working buffers of synthesis. glibc hands freed
//! blocks this large back to the kernel, so a fresh buffer per recording faulted every page
//! back in: a third of the generation time in `perf` before this pool.

use std::cell::RefCell;

use rustfft::num_complex::Complex64;

/// Buffers kept per thread and type (synthesis needs at most about four at once).
const KEEP: usize = 6;

thread_local! {
    static COMPLEX: RefCell<Vec<Vec<Complex64>>> = const { RefCell::new(Vec::new()) };
    static REAL: RefCell<Vec<Vec<f64>>> = const { RefCell::new(Vec::new()) };
}

/// A zeroed buffer of `n` complex values, reusing a returned one where there is one.
pub(crate) fn complex(n: usize) -> Vec<Complex64> {
    let mut v = COMPLEX.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    v.clear();
    v.resize(n, Complex64::new(0.0, 0.0));
    v
}

/// An empty buffer for real values with room for `n`.
pub(crate) fn real(n: usize) -> Vec<f64> {
    let mut v = REAL.with(|p| p.borrow_mut().pop()).unwrap_or_default();
    v.clear();
    v.reserve(n);
    v
}

/// Returns a buffer for reuse by this thread.
pub(crate) fn give_complex(v: Vec<Complex64>) {
    COMPLEX.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < KEEP {
            p.push(v);
        }
    });
}

pub(crate) fn give_real(v: Vec<f64>) {
    REAL.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < KEEP {
            p.push(v);
        }
    });
}
