//! `FeatureSpec`: every parameter of a feature, explicit, serialisable and hashable.
//!
//! One spec drives the CPU and (later) the GPU extractor, so that the two can never disagree
//! about what a preset means.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::SpecError;

/// Window function applied to each frame before the FFT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    Hann,
    Hamming,
    /// Kaldi's window: a Hann window raised to the power 0.85 (always symmetric).
    Povey,
    Rectangular,
}

/// How frames are laid over the signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// Frame `t` is centred on sample `t * hop` (the signal is padded by `n_fft / 2` at both
    /// ends, as torch.stft and librosa do); `1 + len / hop` frames.
    Center,
    /// Kaldi's `snip_edges = true`: frame `t` starts at sample `t * hop`; only frames that fit
    /// whole are kept, `1 + (len - win_length) / hop` frames (zero when shorter than a window).
    SnipEdges,
    /// Kaldi's `snip_edges = false` (lhotse's default): `(len + hop / 2) / hop` frames, frame
    /// `t` centred on sample `t * hop + hop / 2` (it starts at `t * hop + hop / 2 −
    /// win_length / 2`), the signal mirrored at its edges with the edge sample repeated
    /// (Kaldi's `ExtractWindow`: index −1 reads sample 0, index `len` reads `len − 1`,
    /// periodic beyond one reflection). `pad_mode` does not apply. The window sits at the
    /// frame's start, zero-padded to `n_fft`, as with `SnipEdges`.
    NoSnipEdges,
}

/// Padding used by [`Framing::Center`] ([`Framing::NoSnipEdges`] always mirrors as Kaldi does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PadMode {
    /// Mirror without repeating the edge sample (numpy/torch "reflect").
    Reflect,
    /// Zeros.
    Constant,
}

/// Where pre-emphasis is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreemphasisScope {
    /// Once over the whole signal, keeping the first sample (NeMo).
    Signal,
    /// Inside each frame after DC removal, `w[0] -= c * w[0]` (Kaldi).
    Frame,
}

/// The mel scale and the way triangular filters are built on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MelScale {
    /// Slaney's auditory toolbox scale (linear below 1 kHz, log above): librosa's default.
    Slaney,
    /// HTK's `2595 log10(1 + f/700)`, triangles in Hz (librosa `htk=True`).
    Htk,
    /// Kaldi's `1127 ln(1 + f/700)` with triangles in the mel domain and no Nyquist bin.
    Kaldi,
    /// SpeechBrain's `Filterbank` (1.1): HTK's scale, triangles in Hz of height 1 centred on
    /// each mel point, both sides as wide as the gap to the point below, so a triangle's right
    /// foot is not the next centre as in librosa's.
    #[serde(rename = "speechbrain")]
    SpeechBrain,
}

/// Normalisation of each mel filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MelNorm {
    /// Divide each triangle by its width in Hz (constant energy per channel), librosa's `norm="slaney"`.
    Slaney,
    None,
}

/// Logarithm applied to the (mel) energies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogKind {
    None,
    /// Natural log (Kaldi, NeMo).
    Ln,
    /// Base-10 log (Whisper).
    Log10,
    /// `10 log10(x)` (librosa `power_to_db` with `ref = 1`).
    Db,
}

/// How zeros are kept out of the logarithm.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum LogGuard {
    /// `log(max(x, value))` (Whisper 1e-10, librosa amin 1e-10, Kaldi FLT_EPSILON).
    Clamp(f32),
    /// `log(x + value)` (NeMo 2^-24).
    Add(f32),
}

/// Normalisation of the final features over the frames of one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Normalize {
    None,
    /// NeMo's `per_feature`: each bin minus its mean over time, divided by its sample standard
    /// deviation (n - 1) plus 1e-5.
    PerFeature,
    /// transformers' `Speech2TextFeatureExtractor.utterance_cmvn`: each bin minus its mean over
    /// time, divided by its population standard deviation (numpy's `std`), with no epsilon: a
    /// bin constant over the item divides by (nearly) zero, as there.
    UtteranceCmvn,
    /// transformers' `SeamlessM4TFeatureExtractor` (`do_normalize_per_mel_bins`): each bin
    /// minus its mean over time, divided by the square root of its sample variance (n − 1)
    /// plus 1e-7. An item of one frame has no sample variance: NaN, as there.
    PerMelBin,
    /// transformers' `Wav2Vec2FeatureExtractor.zero_mean_unit_var_norm`: each bin minus its
    /// mean over time, divided by the square root of its population variance plus 1e-7 (of
    /// a [`OutputKind::Waveform`], the item's samples).
    ZeroMeanUnitVar,
}

/// Where the cepstral lifter's sine counts from: coefficient `i` is multiplied by
/// `1 + L/2 sin(π (i + start) / L)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifterStart {
    /// librosa's `feature.mfcc(lifter=L)`: `sin(π (i + 1) / L)`.
    #[default]
    One,
    /// Kaldi's `ComputeLifterCoeffs` (and lhotse's): `sin(π i / L)`, so c0 is kept as is.
    Zero,
}

impl LifterStart {
    fn is_one(&self) -> bool {
        *self == LifterStart::One
    }
}

/// What the extractor returns per frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// `|X|^2` per FFT bin.
    Power,
    /// `|X|` per FFT bin.
    Magnitude,
    /// Mel filterbank energies of `|X|^power`, no log.
    Mel,
    /// Mel energies passed through `log`.
    Logmel,
    /// DCT-II (orthonormal) of the log-mel energies, optionally liftered.
    Mfcc,
    /// Power spectral density by Welch's method: the mean periodogram of all frames, one row,
    /// scaled to units²/Hz and one-sided (doubled except DC and Nyquist), as scipy.signal.welch.
    Psd,
    /// The samples themselves, one a row, as a waveform model takes them (wav2vec 2.0,
    /// HuBERT): no spectrum. Frames of one sample (`n_fft`, `win_length` and `hop_length` 1,
    /// `snip_edges`, a rectangular window), after the input scale, pre-emphasis and dither;
    /// then the item-level steps (a normalisation over the item).
    Waveform,
}

/// What the samples of an item are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// Real audio, one value per sample.
    #[default]
    Real,
    /// Complex baseband (RF IQ): two values per sample, I then Q, in the sample buffers. The
    /// spectrum is two-sided (`n_fft` bins, DC first, or in the middle with `fftshift`).
    Complex,
}

impl InputKind {
    fn is_real(&self) -> bool {
        *self == InputKind::Real
    }
}

/// Whisper's affine scaling `(x + add) / div`, applied after the dynamic-range clamp.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Affine {
    pub add: f32,
    pub div: f32,
}

/// Every parameter of a feature. Construct one from a preset (`FeatureSpec::preset`) or load
/// one from JSON/TOML; call [`FeatureSpec::validate`] before use (the extractor does).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureSpec {
    /// Real audio or complex IQ. Left out of the JSON when real, so that audio specs keep
    /// their `spec_id`.
    #[serde(default, skip_serializing_if = "InputKind::is_real")]
    pub input: InputKind,
    /// Rate the audio is resampled to before extraction (Hz). IQ is never resampled: a
    /// recording at another rate is refused.
    pub sample_rate: u32,
    /// FFT size.
    pub n_fft: usize,
    /// Window length in samples (≤ n_fft; the window is zero-padded to n_fft).
    pub win_length: usize,
    /// Hop between frames in samples.
    pub hop_length: usize,
    pub window: WindowKind,
    /// Periodic (DFT-even, `N` in the denominator) or symmetric (`N - 1`) window. Povey is
    /// always symmetric.
    pub periodic: bool,
    pub framing: Framing,
    pub pad_mode: PadMode,
    /// Factor applied to the decoded samples (1 = float scale in [-1, 1]; 32768 = int16 scale,
    /// as Kaldi's tools read WAV files).
    pub input_scale: f32,
    /// Standard deviation of the dither added to each frame sample (0 = off): zero-mean,
    /// near-Gaussian noise keyed by (seed, frame, sample), see [`crate::dither`].
    pub dither: f32,
    /// Seed of the dither; with the same seed the output is reproducible.
    pub dither_seed: u64,
    /// Subtract each frame's mean before pre-emphasis and windowing (Kaldi).
    pub remove_dc: bool,
    /// Pre-emphasis coefficient (0 = off).
    pub preemphasis: f32,
    pub preemphasis_scope: PreemphasisScope,
    /// Exponent on the magnitude before the mel projection: 1 (magnitude) or 2 (power).
    pub power: f32,
    pub mel_scale: MelScale,
    pub mel_norm: MelNorm,
    pub n_mels: usize,
    /// Lowest mel edge (Hz).
    pub fmin: f32,
    /// Highest mel edge (Hz); `None` = Nyquist; a value ≤ 0 is an offset from Nyquist (Kaldi).
    pub fmax: Option<f32>,
    pub log: LogKind,
    pub log_guard: LogGuard,
    /// Clamp every value to at least `max - range` of the item, in the log's units
    /// (Whisper: 8 in log10, librosa: top_db 80 in dB).
    pub dynamic_range: Option<f32>,
    pub affine: Option<Affine>,
    pub normalize: Normalize,
    /// Drop the last frame (Whisper's `stft[..., :-1]`).
    pub drop_last_frame: bool,
    /// Leave out the Nyquist bin of power/magnitude outputs (Kaldi never uses it).
    pub drop_nyquist: bool,
    /// Complex input only: put the zero frequency in the middle of each row (numpy's
    /// `fftshift`: bins −n_fft/2 … n_fft/2 − 1) instead of first. Left out of the JSON when
    /// false, so that audio specs keep their `spec_id`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fftshift: bool,
    /// Shortest item accepted, in samples at `sample_rate`; a shorter one fails with
    /// [`ItemError::TooShort`](crate::ItemError::TooShort), as the matched code fails
    /// (NeMo ≤ 2.4: torch's reflect padding needs more than `n_fft / 2` samples). 0 = any.
    /// Left out of the JSON when 0, so that specs without it keep their `spec_id`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_samples: usize,
    /// Every item zero-padded at its end to, or cut at, this many samples before framing, so
    /// that every item gives the same frames (transformers' `WhisperFeatureExtractor`: 30 s,
    /// 480,000 samples, as openai-whisper's `transcribe` pads). 0 = the item as it is. Left
    /// out of the JSON when 0, so that specs without it keep their `spec_id`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fixed_samples: usize,
    /// Every item gives exactly this many frames: a longer one is cut to the samples they read
    /// (whole frames only: `snip_edges` framing), a shorter one's frames are followed by frames
    /// of zeros in the log's units, before the affine scaling (transformers'
    /// `ASTFeatureExtractor`: 1,024). 0 = the item's own frames. Left out of the JSON when 0,
    /// so that specs without it keep their `spec_id`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fixed_frames: usize,
    /// Consecutive frames concatenated into one output row after the item-level steps, the
    /// last row zero-padded where the frames do not divide (SeamlessM4T's `stride` 2: rows of
    /// 160 from 80 bins). 0 or 1 = a row a frame, left out of the JSON so that specs without
    /// it keep their `spec_id`.
    #[serde(default, skip_serializing_if = "is_unstacked")]
    pub stack_frames: usize,
    /// Number of cepstral coefficients kept for `output = "mfcc"`.
    pub n_mfcc: usize,
    /// Cepstral lifter coefficient (0 = off): `c[i] *= 1 + L/2 sin(pi (i + 1) / L)`, as librosa,
    /// or from `i` with [`lifter_start`](Self::lifter_start) `zero`, as Kaldi.
    pub lifter: f32,
    /// Where the lifter's sine counts from. Left out of the JSON at librosa's `one`, so that
    /// specs without it keep their `spec_id`.
    #[serde(default, skip_serializing_if = "LifterStart::is_one")]
    pub lifter_start: LifterStart,
    pub output: OutputKind,
}

/// The longest fixed length a spec may ask for: an hour at 48 kHz (an item is held whole).
pub const MAX_FIXED_SAMPLES: usize = 3600 * 48_000;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn is_unstacked(n: &usize) -> bool {
    *n <= 1
}

/// The most frames a spec may stack into one row.
pub const MAX_STACK_FRAMES: usize = 16;

fn is_false(b: &bool) -> bool {
    !*b
}

/// A named spec with the code it reproduces.
#[derive(Debug, Clone)]
pub struct Preset {
    pub name: &'static str,
    pub matches: &'static str,
    pub spec: FeatureSpec,
}

impl FeatureSpec {
    /// A neutral base: 16 kHz, 400/160 periodic Hann, centred with reflect padding, power mel.
    fn base() -> Self {
        FeatureSpec {
            input: InputKind::Real,
            sample_rate: 16_000,
            n_fft: 400,
            win_length: 400,
            hop_length: 160,
            window: WindowKind::Hann,
            periodic: true,
            framing: Framing::Center,
            pad_mode: PadMode::Reflect,
            input_scale: 1.0,
            dither: 0.0,
            dither_seed: 0,
            remove_dc: false,
            preemphasis: 0.0,
            preemphasis_scope: PreemphasisScope::Signal,
            power: 2.0,
            mel_scale: MelScale::Slaney,
            mel_norm: MelNorm::Slaney,
            n_mels: 80,
            fmin: 0.0,
            fmax: None,
            log: LogKind::None,
            log_guard: LogGuard::Clamp(1e-10),
            dynamic_range: None,
            affine: None,
            normalize: Normalize::None,
            drop_last_frame: false,
            drop_nyquist: false,
            fftshift: false,
            min_samples: 0,
            fixed_samples: 0,
            fixed_frames: 0,
            stack_frames: 0,
            n_mfcc: 20,
            lifter: 0.0,
            lifter_start: LifterStart::One,
            output: OutputKind::Mel,
        }
    }

    /// openai-whisper's `log_mel_spectrogram` (80 or 128 mels).
    pub fn whisper(n_mels: usize) -> Self {
        FeatureSpec {
            n_mels,
            log: LogKind::Log10,
            log_guard: LogGuard::Clamp(1e-10),
            dynamic_range: Some(8.0),
            affine: Some(Affine { add: 4.0, div: 4.0 }),
            drop_last_frame: true,
            output: OutputKind::Logmel,
            ..Self::base()
        }
    }

    /// transformers' `WhisperFeatureExtractor(feature_size=n_mels)` as fine-tuning recipes
    /// call it (`padding="max_length"`, `truncation=True`): [`Self::whisper`] of the audio
    /// zero-padded or cut to 30 s, 3,000 frames whatever its length.
    pub fn whisper_hf(n_mels: usize) -> Self {
        FeatureSpec {
            fixed_samples: 30 * 16_000,
            ..Self::whisper(n_mels)
        }
    }

    /// Kaldi's `compute-fbank-feats` / kaldi-native-fbank defaults with dither 0.
    pub fn kaldi(n_mels: usize) -> Self {
        FeatureSpec {
            n_fft: 512,
            window: WindowKind::Povey,
            periodic: false,
            framing: Framing::SnipEdges,
            input_scale: 32768.0,
            remove_dc: true,
            preemphasis: 0.97,
            preemphasis_scope: PreemphasisScope::Frame,
            mel_scale: MelScale::Kaldi,
            mel_norm: MelNorm::None,
            n_mels,
            fmin: 20.0,
            fmax: Some(0.0),
            log: LogKind::Ln,
            log_guard: LogGuard::Clamp(f32::EPSILON),
            drop_nyquist: true,
            output: OutputKind::Logmel,
            ..Self::base()
        }
    }

    /// transformers' `Speech2TextFeatureExtractor()` (5.24, its numpy path): [`Self::kaldi`]'s
    /// 80 bins, then utterance CMVN.
    pub fn speech2text() -> Self {
        FeatureSpec {
            normalize: Normalize::UtteranceCmvn,
            ..Self::kaldi(80)
        }
    }

    /// transformers 5.24's `SeamlessM4TFeatureExtractor()(audio, sampling_rate=16000)`: the
    /// Kaldi fbank of `speech2text` (80 bins of the samples × 2^15, povey window, pre-emphasis
    /// 0.97, DC removed, snip_edges, log floored at FLT_EPSILON), each bin normalised over the
    /// item's frames (mean, sample variance + 1e-7), then two frames to a row of 160 (`stride`
    /// 2), an odd last frame beside 80 zeros, as its padding to a multiple of 2 leaves it.
    pub fn seamless_m4t() -> Self {
        FeatureSpec {
            normalize: Normalize::PerMelBin,
            stack_frames: 2,
            ..Self::kaldi(80)
        }
    }

    /// NeMo ≥ 2.5's `AudioToMelSpectrogramPreprocessor` as configured for
    /// FastConformer/Parakeet, with dither 0 (NeMo dithers only in training). Since NeMo commit
    /// 0fd4de5 (first in v2.5.0) the STFT pads with zeros and an item of `len` samples has
    /// `len / hop` valid frames: the STFT's last frame is masked, not a feature, and the
    /// per-feature statistics are taken over the valid frames alone (`drop_last_frame`).
    pub fn nemo(n_mels: usize) -> Self {
        FeatureSpec {
            n_fft: 512,
            periodic: false,
            pad_mode: PadMode::Constant,
            preemphasis: 0.97,
            preemphasis_scope: PreemphasisScope::Signal,
            n_mels,
            log: LogKind::Ln,
            log_guard: LogGuard::Add(5.960_464_5e-8), // 2^-24
            normalize: Normalize::PerFeature,
            drop_last_frame: true,
            output: OutputKind::Logmel,
            ..Self::base()
        }
    }

    /// NeMo ≤ 2.4's preprocessor, which models trained before v2.5 saw: torch.stft's default
    /// reflect padding, `len / hop + 1` frames, all of them normalised. torch refuses to
    /// reflect-pad an input of `n_fft / 2` samples or fewer, so such items fail here too.
    pub fn nemo_legacy(n_mels: usize) -> Self {
        FeatureSpec {
            pad_mode: PadMode::Reflect,
            drop_last_frame: false,
            min_samples: 512 / 2 + 1,
            ..Self::nemo(n_mels)
        }
    }

    /// torchaudio's `AmplitudeToDB()(MelSpectrogram()(y))` at their defaults (torchaudio
    /// 2.11): 400-point periodic Hann frames every 200 samples (`win_length // 2`), centred with
    /// reflect padding, power, 128 HTK mels without norm from 0 Hz to Nyquist, then
    /// `10 log10(max(x, 1e-10))` with no `top_db`.
    pub fn torchaudio_mel_db() -> Self {
        FeatureSpec {
            hop_length: 200,
            n_mels: 128,
            mel_scale: MelScale::Htk,
            mel_norm: MelNorm::None,
            log: LogKind::Db,
            log_guard: LogGuard::Clamp(1e-10),
            output: OutputKind::Logmel,
            ..Self::base()
        }
    }

    /// ESPnet2's `DefaultFrontend(fs=16000)` at its defaults (espnet 202511): a 512-point
    /// periodic Hann window every 128 samples, centred with reflect padding (torch.stft), power,
    /// 80 Slaney mels with Slaney norm (`librosa.filters.mel`) from 0 Hz to Nyquist, then
    /// `ln(max(x, 1e-10))`. No normalisation: ESPnet's recipes add `global_mvn` or
    /// `utterance_mvn` as a separate layer with statistics of their own.
    pub fn espnet() -> Self {
        FeatureSpec {
            n_fft: 512,
            win_length: 512,
            hop_length: 128,
            log: LogKind::Ln,
            log_guard: LogGuard::Clamp(1e-10),
            output: OutputKind::Logmel,
            ..Self::base()
        }
    }

    /// SpeechBrain's `speechbrain.lobes.features.Fbank()` at its defaults (speechbrain
    /// 1.1.2): a 400-point periodic Hamming window every 160 samples, centred with zero
    /// padding (`pad_mode="constant"`), power, 40 filters on SpeechBrain's triangles over
    /// HTK's scale from 0 Hz to Nyquist, then `10 log10(max(x, 1e-10))` floored at the item's
    /// maximum minus 80 dB (`top_db`).
    pub fn speechbrain_fbank() -> Self {
        FeatureSpec {
            window: WindowKind::Hamming,
            pad_mode: PadMode::Constant,
            n_mels: 40,
            mel_scale: MelScale::SpeechBrain,
            mel_norm: MelNorm::None,
            log: LogKind::Db,
            log_guard: LogGuard::Clamp(1e-10),
            dynamic_range: Some(80.0),
            output: OutputKind::Logmel,
            ..Self::base()
        }
    }

    /// lhotse's `Fbank()` (`FbankConfig` defaults, lhotse 1.33): the Kaldi fbank of
    /// [`Self::kaldi`] on the samples as they are (no 2^15 scale), framed as Kaldi's
    /// `snip_edges = false` (`(len + 80) / 160` frames, the edges mirrored), mel up to 400 Hz
    /// under Nyquist (`high_freq = -400`). lhotse mirrors each edge once by flipping the
    /// item's own samples, so an item under 140 samples leaves its last frame short and
    /// lhotse fails: refused here too.
    pub fn lhotse_fbank() -> Self {
        FeatureSpec {
            framing: Framing::NoSnipEdges,
            input_scale: 1.0,
            fmax: Some(-400.0),
            min_samples: 140,
            ..Self::kaldi(80)
        }
    }

    /// lhotse's `Mfcc()` (`MfccConfig` defaults, lhotse 1.33): [`Self::lhotse_fbank`]'s
    /// framing over 23 filters, then the orthonormal DCT-II to 13 coefficients and Kaldi's
    /// lifter of 22 (`1 + 11 sin(π i / 22)`, c0 kept).
    pub fn lhotse_mfcc() -> Self {
        FeatureSpec {
            n_mels: 23,
            n_mfcc: 13,
            lifter: 22.0,
            lifter_start: LifterStart::Zero,
            output: OutputKind::Mfcc,
            ..Self::lhotse_fbank()
        }
    }

    /// transformers 5.24's `ASTFeatureExtractor()(audio, sampling_rate=16000)` (the Audio
    /// Spectrogram Transformer, as its AudioSet checkpoints are fine-tuned), its torchaudio path
    /// (`torchaudio.compliance.kaldi.fbank(window_type="hanning", num_mel_bins=128)`): the
    /// Kaldi fbank of 128 bins on the samples as they are (no 2^15), a symmetric Hann window,
    /// 1,024 frames whatever the item (cut after the 10.255 s they read, or completed with
    /// frames of zeros), then
    /// `(x − mean) / (2 std)` with AudioSet's mean −4.2677393 and std 4.5689974.
    pub fn ast() -> Self {
        FeatureSpec {
            window: WindowKind::Hann,
            periodic: false,
            input_scale: 1.0,
            fixed_frames: 1024,
            affine: Some(Affine {
                add: 4.267_739_3,
                div: 2.0 * 4.568_997_4,
            }),
            ..Self::kaldi(128)
        }
    }

    /// transformers 5.24's `Wav2Vec2FeatureExtractor()(audio, sampling_rate=16000)` (wav2vec
    /// 2.0, HuBERT, WavLM, XLS-R as fine-tuned in transformers): the waveform itself, zero mean
    /// and unit variance over the item (`do_normalize`: population variance + 1e-7), one sample
    /// a row.
    pub fn wav2vec2() -> Self {
        FeatureSpec {
            n_fft: 1,
            win_length: 1,
            hop_length: 1,
            window: WindowKind::Rectangular,
            framing: Framing::SnipEdges,
            normalize: Normalize::ZeroMeanUnitVar,
            output: OutputKind::Waveform,
            ..Self::base()
        }
    }

    /// librosa `feature.melspectrogram` + `power_to_db` at librosa's defaults.
    pub fn librosa_mel() -> Self {
        FeatureSpec {
            sample_rate: 22_050,
            n_fft: 2048,
            win_length: 2048,
            hop_length: 512,
            pad_mode: PadMode::Constant,
            n_mels: 128,
            log: LogKind::Db,
            log_guard: LogGuard::Clamp(1e-10),
            dynamic_range: Some(80.0),
            output: OutputKind::Logmel,
            ..Self::base()
        }
    }

    /// librosa `feature.mfcc` at librosa's defaults.
    pub fn librosa_mfcc() -> Self {
        FeatureSpec {
            n_mfcc: 20,
            output: OutputKind::Mfcc,
            ..Self::librosa_mel()
        }
    }

    /// A spectrogram of complex IQ: two-sided `|X|²` of periodic-Hann frames of `n_fft`
    /// samples with half overlap, whole frames only, DC in the middle, in dB
    /// (`10 log10(max(x, 1e-10))`). What `torch.stft(iq, n_fft, n_fft // 2,
    /// window=torch.hann_window(n_fft), center=False).abs() ** 2` gives, fftshifted over
    /// frequency and in dB.
    pub fn iq_spectrogram(sample_rate: u32, n_fft: usize) -> Self {
        FeatureSpec {
            input: InputKind::Complex,
            sample_rate,
            n_fft,
            win_length: n_fft,
            hop_length: n_fft / 2,
            framing: Framing::SnipEdges,
            log: LogKind::Db,
            log_guard: LogGuard::Clamp(1e-10),
            fftshift: true,
            output: OutputKind::Power,
            ..Self::base()
        }
    }

    /// [`Self::iq_spectrogram`] without the log: linear `|X|²`.
    pub fn iq_power(sample_rate: u32, n_fft: usize) -> Self {
        FeatureSpec {
            log: LogKind::None,
            ..Self::iq_spectrogram(sample_rate, n_fft)
        }
    }

    /// All presets, in the order `sonograph presets` lists them.
    pub fn presets() -> Vec<Preset> {
        vec![
            Preset {
                name: "whisper",
                matches: "openai-whisper audio.log_mel_spectrogram, 80 mels (large-v3: whisper-128)",
                spec: Self::whisper(80),
            },
            Preset {
                name: "whisper-128",
                matches: "openai-whisper audio.log_mel_spectrogram(n_mels=128) (large-v3)",
                spec: Self::whisper(128),
            },
            Preset {
                name: "whisper-hf",
                matches: "transformers WhisperFeatureExtractor (5.24): the audio zero-padded or cut to 30 s, 80 mels, 3000 frames",
                spec: Self::whisper_hf(80),
            },
            Preset {
                name: "whisper-hf-128",
                matches: "transformers WhisperFeatureExtractor(feature_size=128) (large-v3), 3000 frames",
                spec: Self::whisper_hf(128),
            },
            Preset {
                name: "kaldi",
                matches: "Kaldi compute-fbank-feats / kaldi-native-fbank, 80 bins, dither 0",
                spec: Self::kaldi(80),
            },
            Preset {
                name: "speech2text",
                matches: "transformers Speech2TextFeatureExtractor (5.24): Kaldi fbank of 80 bins, utterance CMVN",
                spec: Self::speech2text(),
            },
            Preset {
                name: "seamless-m4t",
                matches: "transformers SeamlessM4TFeatureExtractor (5.24): Kaldi fbank of 80 bins, per-bin normalisation, two frames to a row of 160",
                spec: Self::seamless_m4t(),
            },
            Preset {
                name: "ast",
                matches: "transformers ASTFeatureExtractor (5.24, torchaudio path): Kaldi fbank of 128 bins, 1024 frames, AudioSet mean/std",
                spec: Self::ast(),
            },
            Preset {
                name: "wav2vec2",
                matches: "transformers Wav2Vec2FeatureExtractor (5.24): the waveform, zero mean and unit variance over the item",
                spec: Self::wav2vec2(),
            },
            Preset {
                name: "nemo",
                matches: "NeMo >= 2.5 AudioToMelSpectrogramPreprocessor (FastConformer/Parakeet), 80 mels, dither 0",
                spec: Self::nemo(80),
            },
            Preset {
                name: "nemo-128",
                matches: "NeMo >= 2.5 AudioToMelSpectrogramPreprocessor, 128 mels (Parakeet TDT v2/v3, Canary)",
                spec: Self::nemo(128),
            },
            Preset {
                name: "nemo-legacy",
                matches: "NeMo <= 2.4 AudioToMelSpectrogramPreprocessor (reflect padding, len/hop + 1 frames), 80 mels",
                spec: Self::nemo_legacy(80),
            },
            Preset {
                name: "nemo-legacy-128",
                matches: "NeMo <= 2.4 AudioToMelSpectrogramPreprocessor, 128 mels",
                spec: Self::nemo_legacy(128),
            },
            Preset {
                name: "torchaudio",
                matches: "torchaudio (2.11) AmplitudeToDB()(MelSpectrogram()(y)): 128 HTK mels, hop 200, dB without top_db",
                spec: Self::torchaudio_mel_db(),
            },
            Preset {
                name: "espnet",
                matches: "ESPnet2 DefaultFrontend(fs=16000): n_fft 512, hop 128, 80 Slaney mels, ln",
                spec: Self::espnet(),
            },
            Preset {
                name: "speechbrain",
                matches: "SpeechBrain (1.1) lobes.features.Fbank(): 40 filters, Hamming, zero-padded centre, dB with top_db 80",
                spec: Self::speechbrain_fbank(),
            },
            Preset {
                name: "lhotse-fbank",
                matches: "lhotse (1.33) Fbank(): Kaldi fbank of 80 bins, snip_edges=False, samples unscaled, mel up to Nyquist - 400 Hz",
                spec: Self::lhotse_fbank(),
            },
            Preset {
                name: "lhotse-mfcc",
                matches: "lhotse (1.33) Mfcc(): 23 filters, 13 coefficients, Kaldi's lifter 22, snip_edges=False",
                spec: Self::lhotse_mfcc(),
            },
            Preset {
                name: "librosa",
                matches: "librosa.power_to_db(librosa.feature.melspectrogram(y, sr=22050)), top_db 80",
                spec: Self::librosa_mel(),
            },
            Preset {
                name: "librosa-mfcc",
                matches: "librosa.feature.mfcc(y, sr=22050), 20 coefficients",
                spec: Self::librosa_mfcc(),
            },
            Preset {
                name: "iq-spectrogram",
                matches: "complex IQ at 200 kHz: torch.stft(iq, 256, 128, hann_window(256), center=False).abs()**2, fftshift, 10 log10(max(x, 1e-10))",
                spec: Self::iq_spectrogram(200_000, 256),
            },
            Preset {
                name: "iq-power",
                matches: "complex IQ at 200 kHz: torch.stft(iq, 256, 128, hann_window(256), center=False).abs()**2, fftshift (linear)",
                spec: Self::iq_power(200_000, 256),
            },
        ]
    }

    /// The preset called `name`, if any.
    pub fn preset(name: &str) -> Result<Self, SpecError> {
        Self::presets()
            .into_iter()
            .find(|p| p.name == name)
            .map(|p| p.spec)
            .ok_or_else(|| SpecError::UnknownPreset {
                name: name.to_string(),
                known: Self::presets()
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    pub fn from_json(text: &str) -> Result<Self, SpecError> {
        let spec: Self =
            serde_json::from_str(text).map_err(|e| SpecError::Parse(format!("JSON: {e}")))?;
        spec.validate()?;
        Ok(spec)
    }

    pub fn from_toml(text: &str) -> Result<Self, SpecError> {
        let spec: Self =
            toml::from_str(text).map_err(|e| SpecError::Parse(format!("TOML: {e}")))?;
        spec.validate()?;
        Ok(spec)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a FeatureSpec always serialises")
    }

    /// Stable identifier: the first 16 hex digits of the SHA-256 of the canonical JSON. Field
    /// order is the struct's, so equal specs always hash equally, across runs and machines.
    pub fn spec_id(&self) -> String {
        let canonical = serde_json::to_string(self).expect("a FeatureSpec always serialises");
        let digest = Sha256::digest(canonical.as_bytes());
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The spectral core this spec computes in by default (`--precision auto`): f32 where the
    /// golden suite shows it holds the reference to the tolerance with margin and the
    /// reference itself computes in f32 (Whisper's torch code, and transformers' extractor
    /// for `whisper-hf`: 6e-5 from it at most on its fixtures), f64 everywhere else.
    pub fn default_precision(&self) -> crate::Precision {
        let whisper = [Self::whisper(80), Self::whisper(128)];
        let whisper_hf = [Self::whisper_hf(80), Self::whisper_hf(128)];
        if whisper.contains(self) || whisper_hf.contains(self) {
            crate::Precision::F32
        } else {
            crate::Precision::F64
        }
    }

    /// Complex (IQ) input.
    pub fn is_complex(&self) -> bool {
        self.input == InputKind::Complex
    }

    /// Whether every item is taken whole at a fixed length (`fixed_samples` or
    /// `fixed_frames`): such an item is never cut into pieces.
    pub fn is_fixed_length(&self) -> bool {
        self.fixed_samples > 0 || self.fixed_frames > 0
    }

    /// Where every item is cut (0: nowhere): at `fixed_samples`, or after the samples that
    /// `fixed_frames` whole frames read.
    pub fn cut_samples(&self) -> usize {
        match (self.fixed_samples, self.fixed_frames) {
            (0, 0) => 0,
            (0, frames) => (frames - 1) * self.hop_length + self.win_length,
            (samples, _) => samples,
        }
    }

    /// The fixed item length in seconds (the audio an item's features can hold), where the
    /// spec has one.
    pub fn fixed_seconds(&self) -> Option<f64> {
        self.is_fixed_length()
            .then(|| self.cut_samples() as f64 / f64::from(self.sample_rate))
    }

    /// `samples` as the spec frames them: cut at [`cut_samples`](Self::cut_samples), and
    /// zero-padded at the end to `fixed_samples` where it is set (an empty item stays empty:
    /// it has nothing to pad); as they are otherwise.
    pub fn fixed_length<'a>(&self, samples: &'a [f32]) -> std::borrow::Cow<'a, [f32]> {
        let cut = self.cut_samples();
        if cut > 0 && samples.len() > cut {
            return std::borrow::Cow::Borrowed(&samples[..cut]);
        }
        let n = self.fixed_samples;
        if n == 0 || samples.is_empty() || samples.len() == n {
            return std::borrow::Cow::Borrowed(samples);
        }
        let mut padded = Vec::with_capacity(n);
        padded.extend_from_slice(samples);
        padded.resize(n, 0.0);
        std::borrow::Cow::Owned(padded)
    }

    /// Values one sample takes in a sample buffer: 1 for audio, 2 for IQ (I then Q).
    pub fn values_per_sample(&self) -> usize {
        match self.input {
            InputKind::Real => 1,
            InputKind::Complex => 2,
        }
    }

    /// Nyquist frequency in Hz.
    pub fn nyquist(&self) -> f64 {
        f64::from(self.sample_rate) / 2.0
    }

    /// Upper mel edge in Hz, resolving `None` and Kaldi's offsets from Nyquist.
    pub fn fmax_hz(&self) -> f64 {
        match self.fmax {
            None => self.nyquist(),
            Some(f) if f <= 0.0 => self.nyquist() + f64::from(f),
            Some(f) => f64::from(f),
        }
    }

    /// Number of FFT bins the spectrum has: one-sided for audio (`n_fft / 2 + 1`, less the
    /// Nyquist bin when dropped), two-sided for IQ (`n_fft`).
    pub fn n_spectrum_bins(&self) -> usize {
        match self.input {
            InputKind::Real => self.n_fft / 2 + 1 - usize::from(self.drop_nyquist),
            InputKind::Complex => self.n_fft,
        }
    }

    /// Width of one output frame.
    pub fn n_bins(&self) -> usize {
        self.frame_bins() * self.stack_frames.max(1)
    }

    /// Values of one frame's features, before [`stack_frames`](Self::stack_frames) puts
    /// several frames in a row.
    pub fn frame_bins(&self) -> usize {
        match self.output {
            OutputKind::Power | OutputKind::Magnitude => self.n_spectrum_bins(),
            OutputKind::Psd => self.n_fft / 2 + 1,
            OutputKind::Mel | OutputKind::Logmel => self.n_mels,
            OutputKind::Mfcc => self.n_mfcc,
            OutputKind::Waveform => 1,
        }
    }

    /// Frames produced for an item of `n_samples` input samples (after resampling): under a
    /// fixed item length, those of that length, whatever the item's.
    pub fn n_frames(&self, n_samples: usize) -> usize {
        if n_samples == 0 {
            return 0;
        }
        if self.fixed_frames > 0 {
            return self.fixed_frames;
        }
        let framed = match self.fixed_samples {
            0 => n_samples,
            fixed => fixed,
        };
        let raw = self.n_raw_frames(framed);
        let frames = match self.output {
            OutputKind::Psd => usize::from(raw > 0),
            _ if self.drop_last_frame => raw.saturating_sub(1),
            _ => raw,
        };
        frames.div_ceil(self.stack_frames.max(1))
    }

    /// Samples of padding before the signal: `n_fft / 2` when frames are centred,
    /// `win_length / 2 − hop / 2` under Kaldi's `snip_edges = false` (each floored, as Kaldi's
    /// `FirstSampleOfFrame` computes it; `validate` keeps the hop within the window), else 0.
    pub fn pad_left(&self) -> usize {
        match self.framing {
            Framing::Center => self.n_fft / 2,
            Framing::NoSnipEdges => (self.win_length / 2).saturating_sub(self.hop_length / 2),
            Framing::SnipEdges => 0,
        }
    }

    /// Where the window sits inside a centred `n_fft` frame (torch centres a shorter window);
    /// 0 with Kaldi's framing, whose frames are `win_length` long.
    pub fn window_offset(&self) -> usize {
        match self.framing {
            Framing::Center => (self.n_fft - self.win_length) / 2,
            Framing::SnipEdges | Framing::NoSnipEdges => 0,
        }
    }

    /// Signal index (negative inside the left padding) of the first sample frame `j` reads.
    /// The one definition of where frames sit, for every backend.
    pub fn frame_start(&self, j: usize) -> isize {
        (j * self.hop_length + self.window_offset()) as isize - self.pad_left() as isize
    }

    /// Frames the STFT computes before `drop_last_frame` and PSD averaging.
    pub fn n_raw_frames(&self, n_samples: usize) -> usize {
        match self.framing {
            _ if n_samples == 0 => 0,
            // torch pads n_fft / 2 on each side: one sample short of n_fft when n_fft is odd.
            Framing::Center => {
                1 + (n_samples + 2 * (self.n_fft / 2) - self.n_fft) / self.hop_length
            }
            Framing::SnipEdges if n_samples < self.win_length => 0,
            Framing::SnipEdges => 1 + (n_samples - self.win_length) / self.hop_length,
            Framing::NoSnipEdges => (n_samples + self.hop_length / 2) / self.hop_length,
        }
    }

    /// Checks that every parameter is in range and that they fit together.
    pub fn validate(&self) -> Result<(), SpecError> {
        let bad = |field: &'static str, reason: String| Err(SpecError::Invalid { field, reason });
        // IQ is recorded at any rate up to the GHz (and never resampled); audio is not.
        let rates = match self.input {
            InputKind::Real => 1_000..=768_000,
            InputKind::Complex => 1..=u32::MAX,
        };
        if !rates.contains(&self.sample_rate) {
            return bad(
                "sample_rate",
                format!(
                    "{} Hz is outside {}..={}",
                    self.sample_rate,
                    rates.start(),
                    rates.end()
                ),
            );
        }
        // A waveform's frames are single samples (checked below); a spectrum needs two.
        let smallest_fft = if self.output == OutputKind::Waveform {
            1
        } else {
            2
        };
        if !(smallest_fft..=1 << 16).contains(&self.n_fft) {
            return bad(
                "n_fft",
                format!("{} is outside {smallest_fft}..=65536", self.n_fft),
            );
        }
        if self.win_length == 0 || self.win_length > self.n_fft {
            return bad(
                "win_length",
                format!("{} must be in 1..=n_fft ({})", self.win_length, self.n_fft),
            );
        }
        if self.hop_length == 0 {
            return bad("hop_length", "must be at least 1".into());
        }
        if !self.input_scale.is_finite() || self.input_scale <= 0.0 {
            return bad(
                "input_scale",
                format!("{} must be finite and > 0", self.input_scale),
            );
        }
        if !self.dither.is_finite() || self.dither < 0.0 {
            return bad("dither", format!("{} must be finite and ≥ 0", self.dither));
        }
        if !self.preemphasis.is_finite() || !(0.0..=1.0).contains(&self.preemphasis) {
            return bad(
                "preemphasis",
                format!("{} must be in 0..=1", self.preemphasis),
            );
        }
        if self.power != 1.0 && self.power != 2.0 {
            return bad("power", format!("{} must be 1 or 2", self.power));
        }
        if self.window == WindowKind::Povey && self.periodic {
            return bad("periodic", "the povey window is always symmetric".into());
        }
        let uses_mel = matches!(
            self.output,
            OutputKind::Mel | OutputKind::Logmel | OutputKind::Mfcc
        );
        if uses_mel {
            if self.n_mels == 0 || self.n_mels > 4096 {
                return bad("n_mels", format!("{} must be in 1..=4096", self.n_mels));
            }
            let fmax = self.fmax_hz();
            if !self.fmin.is_finite() || self.fmin < 0.0 || f64::from(self.fmin) >= fmax {
                return bad(
                    "fmin",
                    format!("{} Hz must be ≥ 0 and below fmax ({fmax} Hz)", self.fmin),
                );
            }
            if fmax > self.nyquist() + 1e-6 {
                return bad(
                    "fmax",
                    format!("{fmax} Hz is above Nyquist ({} Hz)", self.nyquist()),
                );
            }
        }
        match (self.output, self.log) {
            (OutputKind::Logmel | OutputKind::Mfcc, LogKind::None) => {
                return bad("log", format!("output {:?} needs a log", self.output));
            }
            (OutputKind::Mel, l) if l != LogKind::None => {
                return bad(
                    "log",
                    "output \"mel\" is linear; use \"logmel\" for a log".into(),
                );
            }
            _ => {}
        }
        let guard = match self.log_guard {
            LogGuard::Clamp(v) | LogGuard::Add(v) => v,
        };
        if !guard.is_finite() || guard < 0.0 {
            return bad("log_guard", format!("{guard} must be finite and ≥ 0"));
        }
        if let Some(r) = self.dynamic_range {
            if self.log == LogKind::None || !r.is_finite() || r <= 0.0 {
                return bad("dynamic_range", format!("{r} must be > 0 and needs a log"));
            }
        }
        if let Some(a) = self.affine {
            if !a.add.is_finite() || !a.div.is_finite() || a.div == 0.0 {
                return bad("affine", "add and div must be finite, div non-zero".into());
            }
        }
        if self.output == OutputKind::Mfcc && (self.n_mfcc == 0 || self.n_mfcc > self.n_mels) {
            return bad(
                "n_mfcc",
                format!("{} must be in 1..=n_mels ({})", self.n_mfcc, self.n_mels),
            );
        }
        if !self.lifter.is_finite() || self.lifter < 0.0 {
            return bad("lifter", format!("{} must be finite and ≥ 0", self.lifter));
        }
        self.validate_input()?;
        if self.output == OutputKind::Waveform {
            let why = match () {
                _ if (self.n_fft, self.win_length, self.hop_length) != (1, 1, 1) => {
                    "takes frames of one sample: n_fft, win_length and hop_length 1"
                }
                _ if self.framing != Framing::SnipEdges
                    || self.window != WindowKind::Rectangular =>
                {
                    "takes every sample as it is: \"snip_edges\" framing, a rectangular window"
                }
                _ if self.remove_dc
                    || (self.preemphasis != 0.0
                        && self.preemphasis_scope == PreemphasisScope::Frame) =>
                {
                    "a frame of one sample has no DC to remove nor a sample before it: use \
                     signal-scope pre-emphasis"
                }
                _ if self.log != LogKind::None || self.dynamic_range.is_some() => {
                    "is a waveform: no log, no dynamic range"
                }
                _ => "",
            };
            if !why.is_empty() {
                return bad("output", format!("\"waveform\" {why}"));
            }
        }
        if self.framing == Framing::NoSnipEdges && self.hop_length > self.win_length {
            return bad(
                "hop_length",
                format!(
                    "{} must be ≤ win_length ({}) under \"no_snip_edges\": Kaldi centres each \
                     window on its hop",
                    self.hop_length, self.win_length
                ),
            );
        }
        if self.output == OutputKind::Psd && self.framing != Framing::SnipEdges {
            return bad(
                "framing",
                "psd averages whole segments as Welch does: use \"snip_edges\"".into(),
            );
        }
        Ok(())
    }

    /// What complex input allows: the two-sided power or magnitude spectrogram of whole
    /// frames, through the log and the item-level steps; the steps defined on real audio
    /// (mel, PSD, dither, DC removal, pre-emphasis, centred frames) are refused by name
    /// rather than given a meaning of sonograph's own.
    fn validate_input(&self) -> Result<(), SpecError> {
        let bad = |field: &'static str, reason: String| Err(SpecError::Invalid { field, reason });
        if self.stack_frames > 1 {
            if self.output == OutputKind::Psd {
                return bad(
                    "stack_frames",
                    "a Welch PSD is one row an item: there are no frames to stack".into(),
                );
            }
            if self.stack_frames > MAX_STACK_FRAMES {
                return bad(
                    "stack_frames",
                    format!("{} is over {MAX_STACK_FRAMES}", self.stack_frames),
                );
            }
        }
        if self.fixed_samples > 0 {
            if self.input != InputKind::Real {
                return bad(
                    "fixed_samples",
                    "pads or cuts audio items; IQ recordings are framed as they are".into(),
                );
            }
            if self.output == OutputKind::Psd {
                return bad(
                    "fixed_samples",
                    "a Welch PSD averages the item's frames: padding would change it".into(),
                );
            }
            if self.fixed_samples > MAX_FIXED_SAMPLES {
                return bad(
                    "fixed_samples",
                    format!("{} is over {MAX_FIXED_SAMPLES}", self.fixed_samples),
                );
            }
        }
        if self.fixed_frames > 0 {
            let why = match () {
                _ if self.fixed_samples > 0 => "pads or cuts rows; fixed_samples already fixes them",
                _ if self.framing != Framing::SnipEdges => {
                    "cuts an item to the samples its frames read: whole frames only (\"snip_edges\")"
                }
                _ if self.input != InputKind::Real || self.output == OutputKind::Psd => {
                    "pads or cuts the frames of audio features; a PSD or IQ has no such frames"
                }
                _ if self.drop_last_frame || self.stack_frames > 1 => {
                    "counts the item's frames as they come: not with drop_last_frame or stack_frames"
                }
                _ if self.dynamic_range.is_some()
                    || self.normalize != Normalize::None
                    || self.output == OutputKind::Waveform =>
                {
                    "pads with frames of zeros before the item-level steps: a dynamic range, a \
                     normalisation or a waveform would take the padding for the item"
                }
                _ if self.fixed_frames > MAX_FIXED_SAMPLES / self.hop_length => {
                    "is longer than the longest fixed item"
                }
                _ => "",
            };
            if !why.is_empty() {
                return bad("fixed_frames", format!("{}: {why}", self.fixed_frames));
            }
        }
        if self.input == InputKind::Real {
            if self.fftshift {
                return bad(
                    "fftshift",
                    "reorders a two-sided spectrum: it needs \"input\": \"complex\"".into(),
                );
            }
            return Ok(());
        }
        if !matches!(self.output, OutputKind::Power | OutputKind::Magnitude) {
            return bad(
                "output",
                format!(
                    "complex input gives two-sided \"power\" or \"magnitude\" rows (with a log \
                     if asked); {:?} is defined on real audio (rf-features --psd gives the Welch \
                     PSD of IQ)",
                    self.output
                ),
            );
        }
        if self.framing != Framing::SnipEdges {
            return bad(
                "framing",
                "complex input is framed in whole segments: use \"snip_edges\" (as \
                 torch.stft(center=False) and scipy.signal.spectrogram)"
                    .into(),
            );
        }
        let real_only = [
            ("dither", self.dither != 0.0),
            ("remove_dc", self.remove_dc),
            ("preemphasis", self.preemphasis != 0.0),
            ("drop_nyquist", self.drop_nyquist),
        ];
        if let Some(&(field, _)) = real_only.iter().find(|(_, set)| *set) {
            return bad(
                field,
                "applies to real audio only; complex input needs it off".into(),
            );
        }
        Ok(())
    }

    /// A Welch PSD spec (scipy.signal.welch defaults: periodic Hann, 50% overlap, constant
    /// detrend, density scaling).
    pub fn welch(sample_rate: u32, nperseg: usize) -> Self {
        FeatureSpec {
            sample_rate,
            n_fft: nperseg,
            win_length: nperseg,
            hop_length: nperseg - nperseg / 2,
            framing: Framing::SnipEdges,
            remove_dc: true,
            output: OutputKind::Psd,
            ..Self::base()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid_and_round_trips_through_json_and_toml() {
        for p in FeatureSpec::presets() {
            p.spec
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e}", p.name));
            let json = p.spec.to_json();
            assert_eq!(FeatureSpec::from_json(&json).unwrap(), p.spec, "{}", p.name);
            let toml_text = toml::to_string(&p.spec).unwrap();
            assert_eq!(
                FeatureSpec::from_toml(&toml_text).unwrap(),
                p.spec,
                "{}",
                p.name
            );
        }
    }

    #[test]
    fn spec_id_is_stable_and_sensitive() {
        let a = FeatureSpec::whisper(80);
        assert_eq!(a.spec_id(), FeatureSpec::whisper(80).spec_id());
        assert_eq!(a.spec_id().len(), 16);
        assert_ne!(a.spec_id(), FeatureSpec::whisper(128).spec_id());
        let mut b = a.clone();
        b.hop_length += 1;
        assert_ne!(a.spec_id(), b.spec_id());
    }

    #[test]
    fn invalid_specs_name_the_field() {
        let mut s = FeatureSpec::whisper(80);
        s.win_length = 1000;
        let err = s.validate().unwrap_err().to_string();
        assert!(err.contains("win_length"), "{err}");
        let mut s = FeatureSpec::whisper(80);
        s.fmax = Some(9000.0);
        assert!(s.validate().unwrap_err().to_string().contains("fmax"));
        assert!(FeatureSpec::from_json("{\"sample_rate\": 1}").is_err());
        let err = FeatureSpec::preset("nope").unwrap_err().to_string();
        assert!(err.contains("whisper"), "{err}");
    }

    /// `fixed_frames` (AST): every item gives that many frames; a longer one is cut where its
    /// last frame ends, a piece refused; where the framing does not take whole frames, or
    /// another fixed length is set, the spec says why.
    #[test]
    fn fixed_frames_cut_where_the_last_frame_ends_and_refuse_what_they_cannot_mean() {
        let spec = FeatureSpec::ast();
        spec.validate().unwrap();
        assert_eq!(spec.cut_samples(), 1023 * 160 + 400);
        assert_eq!(spec.fixed_seconds(), Some(10.255));
        for n in [1, 400, 164_080, 1_000_000] {
            assert_eq!(spec.n_frames(n), 1024, "{n}");
        }
        assert_eq!(spec.n_frames(0), 0);
        let long = vec![0.1f32; 200_000];
        assert_eq!(spec.fixed_length(&long).len(), 164_080);
        assert_eq!(
            spec.fixed_length(&long[..1000]).len(),
            1000,
            "not padded: its frames are"
        );
        assert!(spec.to_json().contains("\"fixed_frames\": 1024"));
        assert!(!FeatureSpec::kaldi(80).to_json().contains("fixed_frames"));
        let field = |f: &dyn Fn(&mut FeatureSpec)| {
            let mut s = FeatureSpec::ast();
            f(&mut s);
            match s.validate() {
                Err(SpecError::Invalid { field, .. }) => field,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(field(&|s| s.framing = Framing::Center), "fixed_frames");
        assert_eq!(field(&|s| s.fixed_samples = 16_000), "fixed_frames");
        assert_eq!(field(&|s| s.stack_frames = 2), "fixed_frames");
        assert_eq!(field(&|s| s.fixed_frames = usize::MAX / 2), "fixed_frames");
        assert_eq!(field(&|s| s.dynamic_range = Some(80.0)), "fixed_frames");
        assert_eq!(
            field(&|s| s.normalize = Normalize::PerFeature),
            "fixed_frames"
        );
        let mut ex = crate::CpuExtractor::new(&spec).unwrap();
        let piece = crate::span::Span {
            sample_start: 0,
            signal_len: 200_000,
            first_frame: 0,
            frames: 40,
            last: false,
        };
        assert!(matches!(
            ex.extract_span(&long[..8000], &piece, &mut Vec::new()),
            Err(crate::ItemError::BadSpan(_))
        ));
        // A piece is not taken from a stream either: the item is finished whole.
        ex.begin();
        ex.push(&long).unwrap();
        assert_eq!(ex.take_frames(40, &mut Vec::new()), 0);
        // Whole, streamed, or given longer than the cut: the same 1,024 rows.
        let x: Vec<f32> = (0..200_000)
            .map(|i| (i as f32 * 0.01).sin() * 0.3)
            .collect();
        let mut whole = Vec::new();
        assert_eq!(ex.extract(&x, &mut whole), Ok(1024));
        let mut cut = Vec::new();
        assert_eq!(ex.extract(&x[..164_080], &mut cut), Ok(1024));
        assert_eq!(whole, cut);
        ex.begin();
        for c in x.chunks(7777) {
            ex.push(c).unwrap();
        }
        let mut streamed = Vec::new();
        assert_eq!(ex.finish(&mut streamed), Ok(1024));
        assert_eq!(streamed, whole);
    }

    /// A waveform output takes every sample as it is, one a row: a spec that would frame,
    /// window, log or DC-correct it is refused by name.
    #[test]
    fn waveform_specs_take_single_samples_or_say_why_not() {
        let spec = FeatureSpec::wav2vec2();
        spec.validate().unwrap();
        assert_eq!((spec.n_bins(), spec.n_frames(16_000)), (1, 16_000));
        let field = |f: &dyn Fn(&mut FeatureSpec)| {
            let mut s = FeatureSpec::wav2vec2();
            f(&mut s);
            match s.validate() {
                Err(SpecError::Invalid { field, .. }) => field,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(field(&|s| s.n_fft = 2), "output");
        assert_eq!(field(&|s| s.n_fft = 0), "n_fft");
        assert_eq!(field(&|s| s.window = WindowKind::Hann), "output");
        assert_eq!(field(&|s| s.log = LogKind::Ln), "output");
        assert_eq!(field(&|s| s.remove_dc = true), "output");
        assert_eq!(
            field(&|s| {
                s.preemphasis = 0.97;
                s.preemphasis_scope = PreemphasisScope::Frame;
            }),
            "output"
        );
        // A spectrum still needs two samples a frame.
        let mut tiny = FeatureSpec::kaldi(80);
        (tiny.n_fft, tiny.win_length, tiny.hop_length) = (1, 1, 1);
        assert!(tiny.validate().is_err());
    }

    /// The fields complex input brought are left out of audio specs' JSON, so their ids are
    /// those recorded before (in every output folder and ledger made since).
    #[test]
    fn audio_specs_keep_their_json_and_spec_id() {
        for p in FeatureSpec::presets()
            .iter()
            .filter(|p| !p.spec.is_complex())
        {
            let json = p.spec.to_json();
            assert!(
                !json.contains("\"input\"") && !json.contains("fftshift"),
                "{}: {json}",
                p.name
            );
        }
        // Ids as sonograph wrote them before complex input existed (report.json of `extract`).
        for (name, id) in [
            ("whisper", "8405a48f2226c81e"),
            ("kaldi", "69129e463e1a9609"),
            ("nemo", "eaa819291297224b"),
            ("librosa", "4b55b2727d94dc82"),
        ] {
            assert_eq!(FeatureSpec::preset(name).unwrap().spec_id(), id, "{name}");
        }
        let iq = FeatureSpec::preset("iq-spectrogram").unwrap();
        let json = iq.to_json();
        assert!(json.contains("\"input\": \"complex\"") && json.contains("\"fftshift\": true"));
        assert_eq!(FeatureSpec::from_json(&json).unwrap(), iq);
        assert_eq!((iq.n_bins(), iq.values_per_sample()), (256, 2));
        assert_ne!(
            iq.spec_id(),
            FeatureSpec::preset("iq-power").unwrap().spec_id()
        );
    }

    /// Complex input takes power and magnitude rows of whole frames; what is defined on real
    /// audio is refused naming the field, and fftshift needs complex input.
    #[test]
    fn complex_specs_refuse_what_is_defined_on_real_audio() {
        let iq = FeatureSpec::iq_spectrogram(2_400_000, 1024);
        iq.validate().unwrap();
        let field = |s: &FeatureSpec| match s.validate() {
            Err(SpecError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let with = |f: &dyn Fn(&mut FeatureSpec)| {
            let mut s = iq.clone();
            f(&mut s);
            field(&s)
        };
        assert_eq!(with(&|s| s.output = OutputKind::Logmel), "output");
        assert_eq!(with(&|s| s.output = OutputKind::Psd), "output");
        assert_eq!(with(&|s| s.framing = Framing::Center), "framing");
        assert_eq!(with(&|s| s.dither = 1.0), "dither");
        assert_eq!(with(&|s| s.remove_dc = true), "remove_dc");
        assert_eq!(with(&|s| s.preemphasis = 0.97), "preemphasis");
        assert_eq!(with(&|s| s.drop_nyquist = true), "drop_nyquist");
        assert_eq!(with(&|s| s.sample_rate = 0), "sample_rate");
        let mut magnitude = iq.clone();
        magnitude.output = OutputKind::Magnitude;
        magnitude.log = LogKind::None;
        magnitude.fftshift = false;
        magnitude.validate().unwrap();
        let mut audio = FeatureSpec::whisper(80);
        audio.fftshift = true;
        assert_eq!(field(&audio), "fftshift");
        audio.fftshift = false;
        audio.sample_rate = 2_400_000;
        assert_eq!(field(&audio), "sample_rate");
    }

    #[test]
    fn frame_counts_follow_the_references() {
        let w = FeatureSpec::whisper(80);
        // torch.stft(center=True) gives 1 + len/hop frames; whisper drops the last.
        assert_eq!(w.n_frames(480_000), 3000);
        assert_eq!(w.n_frames(0), 0);
        let k = FeatureSpec::kaldi(80);
        assert_eq!(k.n_frames(399), 0);
        assert_eq!(k.n_frames(400), 1);
        assert_eq!(k.n_frames(16_000), 98);
        assert_eq!(k.fmax_hz(), 8000.0);
        assert_eq!(k.n_bins(), 80);
    }

    #[test]
    fn stacked_frames_make_wider_rows_and_fewer_of_them() {
        let m4t = FeatureSpec::seamless_m4t();
        m4t.validate().unwrap();
        assert_eq!((m4t.frame_bins(), m4t.n_bins()), (80, 160));
        // 98 Kaldi frames in a second: 49 rows; 99 frames: 50, the last half zeros.
        assert_eq!(m4t.n_frames(16_000), 49);
        assert_eq!(m4t.n_frames(16_160), 50);
        assert_eq!(m4t.n_frames(399), 0);
        let mut psd = FeatureSpec::welch(16_000, 256);
        psd.stack_frames = 2;
        assert!(psd.validate().is_err(), "a PSD has one row");
        let mut many = FeatureSpec::kaldi(80);
        many.stack_frames = MAX_STACK_FRAMES + 1;
        assert!(many.validate().is_err());
        many.stack_frames = 1;
        assert_eq!(
            many.spec_id(),
            FeatureSpec::kaldi(80).spec_id(),
            "1 is no stacking"
        );
    }

    #[test]
    fn a_fixed_length_pads_or_cuts_whole_items_only() {
        let spec = FeatureSpec::whisper_hf(80);
        spec.validate().unwrap();
        let short = spec.fixed_length(&[1.0; 10]);
        assert_eq!(short.len(), 480_000);
        assert!(short[..10].iter().all(|&x| x == 1.0) && short[10..].iter().all(|&x| x == 0.0));
        let long = vec![0.5f32; 480_010];
        assert_eq!(&*spec.fixed_length(&long), &long[..480_000]);
        assert!(
            spec.fixed_length(&[]).is_empty(),
            "an empty item stays empty"
        );
        // Without a fixed length, and in the JSON (so other specs keep their spec_id).
        assert_eq!(
            FeatureSpec::whisper(80).fixed_length(&long).len(),
            long.len()
        );
        assert!(!FeatureSpec::whisper(80).to_json().contains("fixed_samples"));
        assert!(!FeatureSpec::whisper(80).to_json().contains("stack_frames"));
        assert!(spec.to_json().contains("\"fixed_samples\": 480000"));
        // Where padding has no meaning, the spec says so.
        let mut psd = FeatureSpec::welch(16_000, 256);
        psd.fixed_samples = 1000;
        assert!(psd.validate().is_err());
        let mut iq = FeatureSpec::preset("iq-power").unwrap();
        iq.fixed_samples = 1000;
        assert!(iq.validate().is_err());
        // A piece of an item has no length of its own to pad: refused, whatever the window.
        let mut ex = crate::CpuExtractor::new(&spec).unwrap();
        let window = vec![0.1f32; 8000];
        let piece = crate::span::Span {
            sample_start: 0,
            signal_len: 16_000,
            first_frame: 0,
            frames: 40,
            last: false,
        };
        assert!(matches!(
            ex.extract_span(&window, &piece, &mut Vec::new()),
            Err(crate::ItemError::BadSpan(_))
        ));
        // An empty item has nothing to pad: refused, whichever way it comes.
        assert_eq!(
            ex.extract(&[], &mut Vec::new()),
            Err(crate::ItemError::Empty)
        );
        let none = crate::span::Span::whole(&spec, 0);
        assert_eq!(
            ex.extract_span(&[], &none, &mut Vec::new()),
            Err(crate::ItemError::Empty)
        );
        // A whole item through the span path is padded as `extract` pads it.
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let whole = crate::span::Span::whole(&spec, window.len());
        assert_eq!(ex.extract_span(&window, &whole, &mut a), Ok(3000));
        assert_eq!(ex.extract(&window, &mut b), Ok(3000));
        assert_eq!(a, b);
    }
}
