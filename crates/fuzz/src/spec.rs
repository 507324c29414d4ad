//! `spec`: feature specs as `--spec FILE` and the jobs API take them (JSON or TOML), and the
//! CPU extractor of every spec that validates, run on a short signal.

use sonograph_dsp::spec::{LogGuard, LogKind, Normalize};
use sonograph_dsp::{CpuExtractor, FeatureSpec, ItemError};

use crate::harness::{assert_same, run};

/// The most work the extractor is given per input: frames × FFT size.
const WORK_BUDGET: usize = 1 << 20;
/// The longest signal tried, in samples.
const MAX_SIGNAL: usize = 1 << 18;

/// The bytes as a spec file: JSON, and TOML.
pub fn spec(data: &[u8]) {
    run("spec", || {
        // A spec file is read as text; bytes that are not UTF-8 never reach the parsers.
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        if let Ok(spec) = FeatureSpec::from_json(text) {
            check_spec(&spec, false);
        }
        if let Ok(spec) = FeatureSpec::from_toml(text) {
            check_spec(&spec, true);
        }
    })
}

/// What a spec that parsed and validated must do: validate again, survive a JSON round trip
/// (and a TOML one when it came from TOML) with its id, and run on the CPU.
pub(crate) fn check_spec(spec: &FeatureSpec, from_toml: bool) {
    spec.validate()
        .unwrap_or_else(|e| panic!("a parsed spec does not validate: {e}"));
    let json = spec.to_json();
    let back = FeatureSpec::from_json(&json)
        .unwrap_or_else(|e| panic!("a spec's JSON does not read back: {e}\n{json}"));
    assert_eq!(&back, spec, "a spec changed through its JSON");
    assert_eq!(
        back.spec_id(),
        spec.spec_id(),
        "the spec id changed through JSON"
    );
    if from_toml {
        let text = toml::to_string(spec)
            .unwrap_or_else(|e| panic!("a spec read from TOML cannot be written as TOML: {e}"));
        let back = FeatureSpec::from_toml(&text)
            .unwrap_or_else(|e| panic!("a spec's TOML does not read back: {e}\n{text}"));
        assert_eq!(&back, spec, "a spec changed through its TOML");
    }
    run_extractor(spec);
}

/// A chirp of `n` samples (interleaved I/Q values for complex input), at amplitude 0.5.
fn chirp(n: usize, complex: bool) -> Vec<f32> {
    let phase = |i: usize| {
        let t = i as f64;
        std::f64::consts::TAU * (0.01 * t + 1e-6 * t * t)
    };
    if complex {
        (0..n)
            .flat_map(|i| [(0.5 * phase(i).cos()) as f32, (0.5 * phase(i).sin()) as f32])
            .collect()
    } else {
        (0..n).map(|i| (0.5 * phase(i).sin()) as f32).collect()
    }
}

/// A signal length that gives the spec a few frames within the work budget, if one does.
fn signal_len(spec: &FeatureSpec) -> Option<usize> {
    let tries = [
        spec.n_fft + 3 * spec.hop_length,
        spec.win_length + spec.hop_length,
        spec.n_fft / 2 + 2,
        spec.win_length,
        spec.n_fft / 2 + 1,
        1,
    ];
    // A fixed item length frames that many samples, whatever the signal's.
    let framed = |n: usize| match spec.fixed_samples {
        0 => n,
        fixed => fixed,
    };
    // A fixed frame count is that many rows, whatever the signal's.
    if spec
        .fixed_frames
        .saturating_mul(spec.n_fft.max(spec.frame_bins()))
        > WORK_BUDGET
    {
        return None;
    }
    tries
        .into_iter()
        .filter(|&n| n > 0 && framed(n) <= MAX_SIGNAL)
        .find(|&n| spec.n_raw_frames(framed(n)).saturating_mul(spec.n_fft) <= WORK_BUDGET)
}

/// A spec whose values stay finite on a signal in [-1, 1]: no scale that overflows f32, a
/// log guarded away from zero, an affine step that does not blow values up.
fn keeps_finite(spec: &FeatureSpec) -> bool {
    let guard = match spec.log_guard {
        LogGuard::Clamp(v) | LogGuard::Add(v) => v,
    };
    let affine = spec
        .affine
        .is_none_or(|a| a.div.abs() >= 1e-6 && a.add.abs() <= 1e6);
    // transformers' utterance CMVN divides by a bin's deviation with nothing added: a bin
    // constant over the item (the log floor, a single frame) is 0/0, as there.
    spec.normalize != Normalize::UtteranceCmvn
        && spec.input_scale <= 65_536.0
        && (spec.log == LogKind::None || guard >= 1e-30)
        && affine
        && spec.lifter <= 1e6
}

fn run_extractor(spec: &FeatureSpec) {
    let mut ex = CpuExtractor::new(spec)
        .unwrap_or_else(|e| panic!("the CPU extractor refuses a valid spec: {e}"));
    let Some(n) = signal_len(spec) else {
        return;
    };
    let complex = spec.is_complex();
    let signal = chirp(n, complex);
    let mut whole = Vec::new();
    let result = ex.extract(&signal, &mut whole);
    // The same item streamed in two pieces (split between an I and its Q for odd splits).
    let mut streamed = Vec::new();
    ex.begin();
    let cut = signal.len() / 3 + 1;
    let pushed = ex
        .push(&signal[..cut.min(signal.len())])
        .and_then(|()| ex.push(&signal[cut.min(signal.len())..]));
    let stream_result = pushed.and_then(|()| ex.finish(&mut streamed));
    match (&result, &stream_result) {
        (Ok(frames), Ok(stream_frames)) => {
            let frames = *frames;
            assert_eq!(frames, spec.n_frames(n), "{n} samples gave {frames} frames");
            assert_eq!(*stream_frames, frames, "streaming gave another frame count");
            assert_eq!(
                whole.len(),
                frames * spec.n_bins(),
                "rows of the wrong width"
            );
            assert_same("streamed and whole features", &streamed, &whole);
            // A sample variance (NeMo's, SeamlessM4T's) of one frame is 0/0, as there.
            let one_frame_normalised =
                matches!(spec.normalize, Normalize::PerFeature | Normalize::PerMelBin)
                    && frames < 2;
            if keeps_finite(spec) && !one_frame_normalised {
                if let Some(i) = whole.iter().position(|v| !v.is_finite()) {
                    panic!(
                        "value {i} of {} is {} on a chirp of {n} samples",
                        whole.len(),
                        whole[i]
                    );
                }
            }
        }
        (Err(ItemError::TooShort { samples, min }), Err(ItemError::TooShort { .. })) => {
            assert!(samples < min && *min == spec.min_samples);
        }
        (a, b) => panic!("a chirp of {n} samples: whole {a:?}, streamed {b:?}"),
    }
}
