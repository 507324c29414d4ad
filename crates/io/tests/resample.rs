//! Resampling quality, measured on pure tones against their analytic values.

use std::f64::consts::PI;

use sonograph_io::StreamResampler;

fn tone(rate: u32, hz: f64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.5 * (2.0 * PI * hz * i as f64 / f64::from(rate)).sin()) as f32)
        .collect()
}

fn resample(x: &[f32], from: u32, to: u32, chunk: usize) -> Vec<f32> {
    let mut r = StreamResampler::new(from, to).unwrap();
    let mut out = Vec::new();
    for c in x.chunks(chunk) {
        r.process(c, &mut out);
    }
    r.finish(&mut out);
    out
}

/// Error of `y` against the ideal tone, in dB relative to the tone, over the middle part
/// (the edges see the filter's zero-padding).
fn error_db(y: &[f32], rate: u32, hz: f64) -> f64 {
    let (lo, hi) = (y.len() / 5, y.len() * 4 / 5);
    let mut err = 0.0;
    let mut sig = 0.0;
    for (i, &v) in y.iter().enumerate().take(hi).skip(lo) {
        let ideal = 0.5 * (2.0 * PI * hz * i as f64 / f64::from(rate)).sin();
        err += (f64::from(v) - ideal).powi(2);
        sig += ideal * ideal;
    }
    10.0 * (err / sig).log10()
}

#[test]
fn passband_tones_come_through_aligned_and_clean() {
    for (from, to) in [
        (44_100, 16_000),
        (48_000, 16_000),
        (8_000, 16_000),
        (22_050, 16_000),
        (16_000, 22_050),
        // Speed perturbation's 1.1 and 0.9 (resampled from 17.6 and 14.4 kHz).
        (17_600, 16_000),
        (14_400, 16_000),
    ] {
        let n = from as usize; // one second
        for frac in [0.05, 0.3, 0.6, 0.9] {
            let hz = frac * f64::from(from.min(to)) / 2.0;
            let y = resample(&tone(from, hz, n), from, to, 1000);
            assert_eq!(y.len(), (n * to as usize).div_ceil(from as usize));
            let e = error_db(&y, to, hz);
            assert!(e < -80.0, "{from}->{to} at {hz:.0} Hz: error {e:.1} dB");
        }
    }
}

#[test]
fn tones_above_the_new_nyquist_are_removed() {
    let (from, to) = (48_000, 16_000);
    let y = resample(&tone(from, 9_000.0, 48_000), from, to, 4096);
    let mid = &y[y.len() / 5..y.len() * 4 / 5];
    let rms = (mid.iter().map(|v| f64::from(v * v)).sum::<f64>() / mid.len() as f64).sqrt();
    let db = 20.0 * (rms / (0.5 / 2f64.sqrt())).log10();
    assert!(db < -90.0, "9 kHz tone leaks at {db:.1} dB");
}

#[test]
fn chunking_does_not_change_the_output() {
    let x = tone(44_100, 1234.5, 30_000);
    let a = resample(&x, 44_100, 16_000, 30_000);
    for chunk in [1, 100, 4096, 7777] {
        assert_eq!(resample(&x, 44_100, 16_000, chunk), a, "chunk {chunk}");
    }
}
