//! The floating-point types the spectral cores compute in (f32 or f64), for the real and the
//! complex path alike.

use rustfft::num_traits::{Float, FromPrimitive};
use rustfft::FftNum;

/// Floating-point type of the FFT and the mel projection.
pub trait Real: FftNum + Float + FromPrimitive {}
impl Real for f32 {}
impl Real for f64 {}

/// `v` in `T` (every f64 converts to f32 and f64).
pub(crate) fn cast<T: Real>(v: f64) -> T {
    T::from_f64(v).expect("every f64 converts to f32/f64")
}
