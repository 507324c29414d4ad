//! The spec each golden reference key (tests/golden/cases.json) stands for: one map for the
//! CPU's golden test (tests/golden.rs) and the GPU's parity suite
//! (crates/gpu/tests/parity.rs), which include this file.

use sonograph_dsp::spec::{Framing, LogKind, OutputKind};
use sonograph_dsp::FeatureSpec;

/// The spec each reference key stands for.
pub fn spec_for(key: &str) -> FeatureSpec {
    match key {
        "whisper-80" => FeatureSpec::preset("whisper").unwrap(),
        "whisper-128" => FeatureSpec::preset("whisper-128").unwrap(),
        "kaldi-80" | "kaldi-80-f64" => FeatureSpec::preset("kaldi").unwrap(),
        "nemo-80" => FeatureSpec::preset("nemo").unwrap(),
        "nemo-128" => FeatureSpec::preset("nemo-128").unwrap(),
        "nemo-legacy-80" => FeatureSpec::preset("nemo-legacy").unwrap(),
        "nemo-legacy-128" => FeatureSpec::preset("nemo-legacy-128").unwrap(),
        "librosa-mel" => FeatureSpec::preset("librosa").unwrap(),
        "librosa-mfcc" => FeatureSpec::preset("librosa-mfcc").unwrap(),
        "power-512" => {
            // np.abs(librosa.stft(y, n_fft=512, hop_length=160, win_length=400,
            //        center=True, pad_mode="reflect"))**2
            let mut s = FeatureSpec::preset("whisper").unwrap();
            s.n_fft = 512;
            s.drop_last_frame = false;
            s.log = LogKind::None;
            s.dynamic_range = None;
            s.affine = None;
            s.output = OutputKind::Power;
            s
        }
        "psd-welch" => {
            let s = FeatureSpec::welch(16_000, 256);
            assert_eq!(s.framing, Framing::SnipEdges);
            s
        }
        other => panic!("cases.json names an unknown key {other:?}"),
    }
}
