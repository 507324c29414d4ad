//! The CPU extractor: streaming framing, window, real FFT, power, sparse mel, log, and the
//! item-level steps (dynamic-range clamp, affine scaling, DCT, per-feature normalisation,
//! Welch averaging).
//!
//! One item at a time: `begin`, any number of `push`es, `finish`. Frames are computed as soon
//! as their samples have arrived, so a long file is being processed while it is still being
//! decoded. All buffers live in the extractor and are reused across items: nothing is
//! allocated per frame.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};
use rustfft::num_complex::Complex;

use crate::complex::ComplexStft;
use crate::dct::Dct;
use crate::dither::unit_noise;
use crate::error::{ItemError, SpecError};
use crate::fastlog;
use crate::float::cast;
pub use crate::float::Real;
use crate::mel::MelBank;
use crate::signal::{padded_index, scale_and_preemphasize, EdgePadding};
use crate::span::{check_finite, check_span, piece_of_fixed_item, prepared_window, Span};
use crate::spec::{
    FeatureSpec, Framing, InputKind, LogGuard, LogKind, Normalize, OutputKind, PreemphasisScope,
};
use crate::window::window;

/// The most values [`CpuExtractor::begin_sized`] reserves (64 MiB of f32): a header can lie,
/// and a longer item's rows grow past it as they come.
const MAX_RESERVED_VALUES: usize = 1 << 24;

/// Arithmetic precision of the spectral core. Outputs are always f32.
///
/// f64 keeps every bin of a linear power spectrum within 1e-4 relative of an exact DFT, even
/// 100 dB below the frame's peak; f32 is faster and is what the references themselves use,
/// and its error is far below the golden tolerance on log outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    F32,
    #[default]
    F64,
}

impl Precision {
    /// "f32" or "f64", as flags and file metadata spell it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }
}

/// Per-precision state: FFT plan, window, filter weights and the frame scratch.
struct Core<T: Real> {
    fft: Arc<dyn RealToComplex<T>>,
    window: Vec<T>,
    /// Sparse mel filters as (first bin, weights).
    mel: Vec<(usize, Vec<T>)>,
    frame: Vec<T>,
    /// The window's samples before pre-emphasis, so that it runs as one pass from them (its
    /// recurrence in place, last sample first, does not vectorise).
    unemphasised: Vec<T>,
    spectrum: Vec<Complex<T>>,
    scratch: Vec<Complex<T>>,
    power: Vec<T>,
    /// One output row before the log, in f64.
    row: Vec<f64>,
    /// The row of a frame of zeros without dither, computed the first time one comes and then
    /// copied: digital silence and padding (`whisper-hf` pads every clip with zeros to 30 s,
    /// most of its frames for a short clip) cost a copy, not an FFT. Every frame of ±0 gives
    /// the same row (powers are squares, so signs vanish), so the copy is the computed row.
    silent_row: Option<Vec<f32>>,
    /// Off only where a test holds the shortcut to the full computation.
    copy_silent_rows: bool,
}

impl<T: Real> Core<T> {
    fn new(spec: &FeatureSpec, bank: Option<&MelBank>) -> Self {
        let fft = RealFftPlanner::<T>::new().plan_fft_forward(spec.n_fft);
        let spectrum = fft.make_output_vec();
        let scratch = fft.make_scratch_vec();
        Core {
            window: window(spec.window, spec.win_length, spec.periodic)
                .into_iter()
                .map(cast)
                .collect(),
            mel: bank
                .map(|b| {
                    b.filters
                        .iter()
                        .map(|f| (f.start, f.weights.iter().map(|&w| cast(w)).collect()))
                        .collect()
                })
                .unwrap_or_default(),
            frame: vec![T::zero(); spec.n_fft],
            unemphasised: vec![T::zero(); spec.win_length],
            power: vec![T::zero(); spectrum.len()],
            row: Vec::with_capacity(spectrum.len().max(spec.n_mels)),
            spectrum,
            scratch,
            fft,
            silent_row: None,
            copy_silent_rows: true,
        }
    }

    /// Computes one frame from its `win_length` samples and appends its row to `out`.
    fn frame(
        &mut self,
        spec: &FeatureSpec,
        segment: &[f32],
        offset: usize,
        frame_index: u32,
        out: &mut Vec<f32>,
        psd_sum: &mut [f64],
    ) {
        // Dither is drawn per frame: a dithered frame of zeros is not silent.
        let silent =
            self.copy_silent_rows && spec.dither == 0.0 && segment.iter().all(|&s| s == 0.0);
        if silent {
            if let Some(row) = &self.silent_row {
                // (A PSD's row is empty: its power, all zeros, adds nothing to the sums.)
                out.extend_from_slice(row);
                return;
            }
        }
        let at = out.len();
        frame_kernel(self, spec, segment, offset, frame_index, out, psd_sum);
        if silent {
            self.silent_row = Some(out[at..].to_vec());
        }
    }
}

/// The per-frame work, compiled for AVX-512, AVX2+FMA (and NEON) besides the baseline and
/// chosen at run time: window, power, mel and log vectorise two and four times as wide as with
/// SSE2, with the same bits (nothing is reassociated or fused). (The FFT is rustfft's, which
/// dispatches by itself.)
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512vl+avx512dq+avx512bw+avx2+fma",
    "x86_64+avx2+fma",
    "aarch64+neon"
))]
fn frame_kernel<T: Real>(
    core: &mut Core<T>,
    spec: &FeatureSpec,
    segment: &[f32],
    offset: usize,
    frame_index: u32,
    out: &mut Vec<f32>,
    psd_sum: &mut [f64],
) {
    {
        let this = core;
        let win = spec.win_length;
        this.frame.fill(T::zero());
        let seg = &mut this.frame[offset..offset + win];
        let plain = spec.dither == 0.0
            && !spec.remove_dc
            && (spec.preemphasis == 0.0 || spec.preemphasis_scope == PreemphasisScope::Signal);
        if plain {
            for ((dst, &src), &w) in seg.iter_mut().zip(segment).zip(&this.window) {
                *dst = cast::<T>(f64::from(src)) * w;
            }
        } else {
            // Kaldi's order: dither, remove DC, pre-emphasis, window.
            for (dst, &src) in seg.iter_mut().zip(segment) {
                *dst = cast(f64::from(src));
            }
            if spec.dither > 0.0 {
                // In T, as the GPU does: the noise is exact in f32, so both round alike.
                let d: T = cast(f64::from(spec.dither));
                for (m, v) in seg.iter_mut().enumerate() {
                    let g = unit_noise(spec.dither_seed, frame_index, m as u32);
                    *v = *v + cast::<T>(f64::from(g)) * d;
                }
            }
            if spec.remove_dc {
                let mean = frame_sum(seg) / cast(win as f64);
                seg.iter_mut().for_each(|v| *v = *v - mean);
            }
            if spec.preemphasis > 0.0 && spec.preemphasis_scope == PreemphasisScope::Frame {
                // x[i] − c·x[i − 1] (x[0] − c·x[0] first), then the window: Kaldi's order, each
                // value rounded as the GPU's in-place recurrence rounds it.
                let c: T = cast(f64::from(spec.preemphasis));
                let x = &mut this.unemphasised;
                x.copy_from_slice(seg);
                seg[0] = (x[0] - c * x[0]) * this.window[0];
                for ((v, pair), &w) in seg[1..].iter_mut().zip(x.windows(2)).zip(&this.window[1..])
                {
                    *v = (pair[1] - c * pair[0]) * w;
                }
            } else {
                for (v, &w) in seg.iter_mut().zip(&this.window) {
                    *v = *v * w;
                }
            }
        }
        if spec.output == OutputKind::Waveform {
            // The sample itself (scaled, pre-emphasised, dithered): no spectrum.
            out.push(seg[0].to_f64().unwrap_or(f64::NAN) as f32);
            return;
        }
        this.fft
            .process_with_scratch(&mut this.frame, &mut this.spectrum, &mut this.scratch)
            .expect("buffer lengths come from the plan");
        for (p, c) in this.power.iter_mut().zip(&this.spectrum) {
            *p = c.re * c.re + c.im * c.im;
        }
        let to_f64 = |v: &T| v.to_f64().unwrap_or(f64::NAN);
        this.row.clear();
        match spec.output {
            OutputKind::Power => {
                let bins = &this.power[..spec.n_spectrum_bins()];
                this.row.extend(bins.iter().map(to_f64));
            }
            OutputKind::Magnitude => {
                let bins = &this.power[..spec.n_spectrum_bins()];
                this.row.extend(bins.iter().map(|p| to_f64(p).sqrt()));
            }
            OutputKind::Psd => {
                for (s, p) in psd_sum.iter_mut().zip(&this.power) {
                    *s += to_f64(p);
                }
                return;
            }
            // Its row went out before the FFT.
            OutputKind::Waveform => return,
            OutputKind::Mel | OutputKind::Logmel | OutputKind::Mfcc => {
                if spec.power == 1.0 {
                    this.power.iter_mut().for_each(|p| *p = p.sqrt());
                }
                for (start, weights) in &this.mel {
                    let bins = &this.power[*start..*start + weights.len()];
                    let e = weights
                        .iter()
                        .zip(bins)
                        .fold(T::zero(), |acc, (&w, &p)| acc + w * p);
                    this.row.push(to_f64(&e));
                }
            }
        }
        log_row(spec, &mut this.row, out);
    }
}

/// The sum of a frame's samples for Kaldi's DC mean, in four interleaved lanes (sample m in
/// lane m mod 4), the lanes added as (0 + 1) + (2 + 3), then the remainder in order: the
/// GPU's kernels (frame.wgsl, fused.wgsl) sum in this order too, so both get the same mean to
/// the bit. The lanes' additions are independent, where one running sum waits on each.
#[inline(always)]
fn frame_sum<T: Real>(x: &[T]) -> T {
    let mut lanes = [T::zero(); 4];
    let mut quads = x.chunks_exact(4);
    for q in &mut quads {
        for (a, &v) in lanes.iter_mut().zip(q) {
            *a = *a + v;
        }
    }
    let mut sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for &v in quads.remainder() {
        sum = sum + v;
    }
    sum
}

/// Applies the spec's guard and log to a row of energies and appends it to `out` as f32.
#[inline(always)]
pub fn log_row(spec: &FeatureSpec, row: &mut [f64], out: &mut Vec<f32>) {
    let scale = match spec.log {
        LogKind::None => {
            out.extend(row.iter().map(|&v| v as f32));
            return;
        }
        LogKind::Ln => 1.0,
        LogKind::Log10 => std::f64::consts::LOG10_E,
        LogKind::Db => 10.0 * std::f64::consts::LOG10_E,
    };
    match spec.log_guard {
        LogGuard::Clamp(floor) => {
            let floor = f64::from(floor);
            row.iter_mut().for_each(|v| *v = v.max(floor));
        }
        LogGuard::Add(eps) => {
            let eps = f64::from(eps);
            row.iter_mut().for_each(|v| *v += eps);
        }
    }
    fastlog::ln_in_place(row);
    out.extend(row.iter().map(|&v| (v * scale) as f32));
}

/// The complex path's state: the STFT plan and one row before the log, in f64.
struct ComplexCore<T: Real> {
    stft: ComplexStft<T>,
    row: Vec<f64>,
}

impl<T: Real> ComplexCore<T> {
    fn new(spec: &FeatureSpec) -> Self {
        ComplexCore {
            stft: ComplexStft::for_spec(spec),
            row: Vec::with_capacity(spec.n_fft),
        }
    }

    /// Computes `frames` frames of the interleaved I/Q values `iq` (the first frame starts at
    /// `iq[0]`) and appends their rows — power or magnitude, through the log — to `out`.
    fn rows(&mut self, spec: &FeatureSpec, iq: &[f32], frames: usize, out: &mut Vec<f32>) {
        let magnitude = spec.output == OutputKind::Magnitude;
        let row = &mut self.row;
        self.stft.frames(iq, frames, |power| {
            row.clear();
            row.extend(power.iter().map(|p| {
                let v = p.to_f64().unwrap_or(f64::NAN);
                if magnitude {
                    v.sqrt()
                } else {
                    v
                }
            }));
            log_row(spec, row, out);
        });
    }
}

/// The spectral core in the chosen precision: a real FFT a frame at a time for audio, the
/// complex STFT many frames at a time for IQ.
enum Engine {
    F32(Core<f32>),
    F64(Core<f64>),
    ComplexF32(ComplexCore<f32>),
    ComplexF64(ComplexCore<f64>),
}

impl Engine {
    fn new(spec: &FeatureSpec, precision: Precision, bank: Option<&MelBank>) -> Self {
        match (spec.input, precision) {
            (InputKind::Real, Precision::F32) => Engine::F32(Core::new(spec, bank)),
            (InputKind::Real, Precision::F64) => Engine::F64(Core::new(spec, bank)),
            (InputKind::Complex, Precision::F32) => Engine::ComplexF32(ComplexCore::new(spec)),
            (InputKind::Complex, Precision::F64) => Engine::ComplexF64(ComplexCore::new(spec)),
        }
    }

    /// [`Core::frame`] in the chosen precision. Real input only: the extractor sends complex
    /// specs to [`Engine::complex_rows`] before any frame is read.
    fn frame(
        &mut self,
        spec: &FeatureSpec,
        segment: &[f32],
        offset: usize,
        frame_index: u32,
        out: &mut Vec<f32>,
        psd_sum: &mut [f64],
    ) {
        match self {
            Engine::F32(core) => core.frame(spec, segment, offset, frame_index, out, psd_sum),
            Engine::F64(core) => core.frame(spec, segment, offset, frame_index, out, psd_sum),
            Engine::ComplexF32(_) | Engine::ComplexF64(_) => {
                unreachable!("complex specs are computed by Engine::complex_rows")
            }
        }
    }

    /// Every frame computed in full, silent ones too (a test's reference for the copies).
    #[cfg(test)]
    fn compute_silent_rows(&mut self) {
        match self {
            Engine::F32(core) => core.copy_silent_rows = false,
            Engine::F64(core) => core.copy_silent_rows = false,
            Engine::ComplexF32(_) | Engine::ComplexF64(_) => {}
        }
    }

    /// [`ComplexCore::rows`] in the chosen precision. Complex input only (see `frame`).
    fn complex_rows(&mut self, spec: &FeatureSpec, iq: &[f32], frames: usize, out: &mut Vec<f32>) {
        match self {
            Engine::ComplexF32(core) => core.rows(spec, iq, frames, out),
            Engine::ComplexF64(core) => core.rows(spec, iq, frames, out),
            Engine::F32(_) | Engine::F64(_) => {
                unreachable!("real specs are computed a frame at a time by Engine::frame")
            }
        }
    }
}

/// The CPU feature extractor for one spec. Not `Sync`: give each thread its own (they are
/// cheap; see [`extract_batch`]).
pub struct CpuExtractor {
    spec: FeatureSpec,
    engine: Engine,
    dct: Option<Dct>,
    pad_left: usize,
    /// Offset of the window inside the n_fft frame (torch centres it; Kaldi puts it first).
    window_offset: usize,
    // Per-item state.
    /// Padded-signal samples from padded index `pending_start` on.
    pending: Vec<f32>,
    pending_start: usize,
    signal_len: usize,
    started: bool,
    prev_input: f32,
    next_frame: usize,
    raw: Vec<f32>,
    psd_sum: Vec<f64>,
    psd_frames: usize,
    in_item: bool,
}

impl CpuExtractor {
    pub fn new(spec: &FeatureSpec) -> Result<Self, SpecError> {
        Self::with_precision(spec, Precision::default())
    }

    pub fn with_precision(spec: &FeatureSpec, precision: Precision) -> Result<Self, SpecError> {
        spec.validate()?;
        let uses_mel = matches!(
            spec.output,
            OutputKind::Mel | OutputKind::Logmel | OutputKind::Mfcc
        );
        let bank = uses_mel.then(|| MelBank::new(spec));
        let engine = Engine::new(spec, precision, bank.as_ref());
        Ok(CpuExtractor {
            dct: Dct::of_spec(spec),
            spec: spec.clone(),
            engine,
            pad_left: spec.pad_left(),
            window_offset: spec.window_offset(),
            pending: Vec::new(),
            pending_start: 0,
            signal_len: 0,
            started: false,
            prev_input: 0.0,
            next_frame: 0,
            raw: Vec::new(),
            psd_sum: vec![0.0; spec.n_fft / 2 + 1],
            psd_frames: 0,
            in_item: false,
        })
    }

    pub fn spec(&self) -> &FeatureSpec {
        &self.spec
    }

    /// Computes the features of one whole item and appends them (row-major, frames × bins)
    /// to `out`; returns the frame count.
    pub fn extract(&mut self, samples: &[f32], out: &mut Vec<f32>) -> Result<usize, ItemError> {
        if self.spec.is_fixed_length() && samples.is_empty() {
            // Nothing to pad: as the CPU's stream and the GPU say of an empty item.
            return Err(ItemError::Empty);
        }
        let fixed = self.spec.fixed_length(samples);
        let samples = &fixed[..];
        if self.spec.output == OutputKind::Psd {
            self.begin();
            self.push(samples)?;
            return self.finish(out);
        }
        // All of it at once: frames read the samples in place, sized outputs, no streaming
        // buffer (the span path gives the streamed frames bit for bit).
        let n = samples.len() / self.spec.values_per_sample();
        self.extract_span(samples, &Span::whole(&self.spec, n), out)
    }

    /// Computes a piece of an item from its window (see [`Span`]) and appends its rows (with
    /// the item-level steps over the piece alone, as [`take_frames`](Self::take_frames) does)
    /// to `out`; returns the frame count. Ends any item being streamed.
    pub fn extract_span(
        &mut self,
        window: &[f32],
        span: &Span,
        out: &mut Vec<f32>,
    ) -> Result<usize, ItemError> {
        if self.spec.is_fixed_length() {
            // An item is padded or cut whole: a piece of one has no fixed length to take.
            if *span != Span::whole(&self.spec, window.len()) {
                return Err(piece_of_fixed_item(&self.spec));
            }
            if self.spec.fixed_length(window).len() != window.len() {
                // `extract` pads or cuts it to exactly that length (an empty one is refused),
                // and comes back here with it.
                return self.extract(window, out);
            }
        }
        if self.spec.output == OutputKind::Psd {
            // Only a whole item passes the check: Welch averages all its frames.
            check_span(&self.spec, window.len(), span)?;
            return self.extract(window, out);
        }
        self.begin();
        self.in_item = false;
        if self.spec.is_complex() {
            return self.complex_span(window, span, out);
        }
        let mut scratch = std::mem::take(&mut self.pending);
        let (prepared, base) = match prepared_window(&self.spec, window, span, &mut scratch) {
            Ok(p) => p,
            Err(e) => {
                self.pending = scratch;
                return Err(e);
            }
        };
        let spec = &self.spec;
        self.raw.reserve(span.frames * self.raw_width());
        let mut segment = vec![0f32; spec.win_length];
        for j in span.first_frame..span.first_frame + span.frames {
            let start = spec.frame_start(j);
            let end = start + spec.win_length as isize;
            let samples = if start >= base as isize && end <= span.signal_len as isize {
                // Inside the signal (all but the edge frames): read in place.
                let from = start as usize - base;
                &prepared[from..from + spec.win_length]
            } else {
                for (m, s) in segment.iter_mut().enumerate() {
                    *s = padded_index(spec, start + m as isize, span.signal_len)
                        .map_or(0.0, |i| prepared[i - base]);
                }
                &segment[..]
            };
            self.engine.frame(
                spec,
                samples,
                self.window_offset,
                j as u32,
                &mut self.raw,
                &mut self.psd_sum,
            );
        }
        scratch.clear();
        self.pending = scratch;
        Ok(self.finish_raw(span.last && self.spec.drop_last_frame, out))
    }

    /// [`extract_span`](Self::extract_span) of complex input: `window` holds the span's
    /// samples as interleaved I/Q values.
    fn complex_span(
        &mut self,
        window: &[f32],
        span: &Span,
        out: &mut Vec<f32>,
    ) -> Result<usize, ItemError> {
        if !window.len().is_multiple_of(2) {
            return Err(ItemError::HalfSample {
                values: window.len(),
            });
        }
        check_span(&self.spec, window.len() / 2, span)?;
        check_finite(window, span.sample_start, 2)?;
        self.raw.reserve(span.frames * self.spec.frame_bins());
        if span.frames > 0 {
            // Whole frames start inside the signal, and check_span saw that the window holds
            // every sample they read.
            let first = self.spec.frame_start(span.first_frame) as usize - span.sample_start;
            self.engine
                .complex_rows(&self.spec, &window[2 * first..], span.frames, &mut self.raw);
        }
        Ok(self.finish_raw(span.last && self.spec.drop_last_frame, out))
    }

    /// Starts a new item, dropping any unfinished one.
    pub fn begin(&mut self) {
        self.pending.clear();
        self.pending_start = 0;
        self.signal_len = 0;
        self.started = false;
        self.prev_input = 0.0;
        self.next_frame = 0;
        self.raw.clear();
        self.psd_sum.fill(0.0);
        self.psd_frames = 0;
        self.in_item = true;
    }

    /// Frees the buffers grown past `max_values` values (a long item's), keeping the rest.
    pub fn trim(&mut self, max_values: usize) {
        for buffer in [&mut self.pending, &mut self.raw] {
            if buffer.capacity() > max_values {
                *buffer = Vec::new();
            }
        }
    }

    /// Starts a new item expected to hold about `samples` samples (a header's length): the
    /// rows are sized for it at once instead of growing (and moving) as the frames come.
    pub fn begin_sized(&mut self, samples: usize) {
        self.begin();
        let rows = self.spec.n_raw_frames(samples) * self.raw_width();
        self.raw.reserve(rows.min(MAX_RESERVED_VALUES));
    }

    /// Feeds the next samples of the current item (at the spec's rate, float scale) and
    /// computes every frame they complete.
    pub fn push(&mut self, samples: &[f32]) -> Result<(), ItemError> {
        if !self.in_item {
            self.begin();
        }
        if self.spec.is_complex() {
            return self.push_complex(samples);
        }
        // A fixed length takes the item's first samples only (the rest is cut).
        let samples = match self.spec.cut_samples() {
            0 => samples,
            n => &samples[..samples.len().min(n.saturating_sub(self.signal_len))],
        };
        if let Some(i) = samples.iter().position(|s| !s.is_finite()) {
            let index = self.signal_len + i;
            self.in_item = false;
            return Err(ItemError::NonFinite {
                index,
                value: samples[i],
            });
        }
        let at_start = self.signal_len == 0;
        self.prev_input = scale_and_preemphasize(
            &self.spec,
            samples,
            at_start,
            self.prev_input,
            &mut self.pending,
        );
        self.signal_len += samples.len();
        if !self.started && self.can_start() {
            self.start_with_left_pad();
        }
        if self.started {
            self.run_frames(self.pad_left + self.signal_len);
            self.drain_consumed();
        }
        Ok(())
    }

    /// Completes the item: computes the frames that need the right padding, applies the
    /// item-level steps and appends the rows to `out`. Returns the frame count.
    pub fn finish(&mut self, out: &mut Vec<f32>) -> Result<usize, ItemError> {
        if !self.in_item || self.signal_len == 0 {
            self.in_item = false;
            return Err(ItemError::Empty);
        }
        if self.signal_len < self.spec.fixed_samples {
            // Zeros to the fixed length, framed as any sample is.
            let zeros = vec![0.0; (self.spec.fixed_samples - self.signal_len).min(1 << 16)];
            while self.signal_len < self.spec.fixed_samples {
                let n = zeros.len().min(self.spec.fixed_samples - self.signal_len);
                self.push(&zeros[..n])?;
            }
        }
        self.in_item = false;
        if self.signal_len < self.spec.min_samples {
            return Err(ItemError::TooShort {
                samples: self.signal_len,
                min: self.spec.min_samples,
            });
        }
        if self.spec.is_complex() {
            // Every whole frame was computed as its samples came.
            let values = 2 * self.pending_start + self.pending.len();
            if !values.is_multiple_of(2) {
                return Err(ItemError::HalfSample { values });
            }
            return Ok(self.post_process(out));
        }
        if !self.started {
            self.start_with_left_pad();
        }
        if matches!(self.spec.framing, Framing::Center | Framing::NoSnipEdges) {
            self.append_right_pad();
        }
        let total_raw = self.spec.n_raw_frames(self.signal_len);
        let available = self.pending_start + self.pending.len();
        self.run_frames(available);
        debug_assert_eq!(self.next_frame, total_raw);
        Ok(self.post_process(out))
    }

    /// [`push`](Self::push) of interleaved I/Q values. `pending` holds the values from sample
    /// `pending_start` on (ending in half a sample when a chunk ended between I and Q); whole
    /// frames need no padding, so each is computed as soon as its last sample is in.
    fn push_complex(&mut self, values: &[f32]) -> Result<(), ItemError> {
        let seen = 2 * self.pending_start + self.pending.len();
        if let Some(i) = values.iter().position(|s| !s.is_finite()) {
            self.in_item = false;
            return Err(ItemError::NonFinite {
                index: (seen + i) / 2,
                value: values[i],
            });
        }
        self.pending.extend_from_slice(values);
        self.signal_len = (seen + values.len()) / 2;
        let ready = self.spec.n_raw_frames(self.signal_len);
        if ready > self.next_frame {
            let from = 2 * (self.spec.frame_start(self.next_frame) as usize - self.pending_start);
            let frames = ready - self.next_frame;
            self.engine
                .complex_rows(&self.spec, &self.pending[from..], frames, &mut self.raw);
            self.next_frame = ready;
        }
        // What no later frame reads goes, once there is enough of it to be worth moving (a
        // hop longer than the window skips samples: never past those seen).
        let keep_from = (self.spec.frame_start(self.next_frame) as usize).min(self.signal_len);
        if keep_from > self.pending_start + 4096.max(self.spec.n_fft) {
            self.pending.drain(..2 * (keep_from - self.pending_start));
            self.pending_start = keep_from;
        }
        Ok(())
    }

    fn can_start(&self) -> bool {
        match EdgePadding::of(&self.spec) {
            EdgePadding::Zeros => true,
            // numpy's reflection reads the samples 1..=pad_left, Kaldi's 0..pad_left.
            EdgePadding::Reflect => self.signal_len > self.pad_left,
            EdgePadding::Symmetric => self.signal_len >= self.pad_left,
        }
    }

    fn start_with_left_pad(&mut self) {
        if self.pad_left == 0 {
            self.started = true;
            return;
        }
        let n = self.signal_len;
        let pad: Vec<f32> = (0..self.pad_left)
            .map(|j| self.padded_sample(j as isize - self.pad_left as isize, n))
            .collect();
        self.pending.splice(0..0, pad);
        self.started = true;
    }

    /// The value at signal index `i` (which may lie outside `0..n`) under the pad mode; the
    /// signal must still be in `pending`.
    fn padded_sample(&self, i: isize, n: usize) -> f32 {
        let Some(idx) = padded_index(&self.spec, i, n) else {
            return 0.0;
        };
        let pos = self.pad_left + idx - self.pending_start;
        if self.started {
            self.pending[pos]
        } else {
            // Before the left pad is in place, pending holds the bare signal.
            self.pending[idx]
        }
    }

    /// The padding after the signal that its last frame reads: `pad_left` samples when frames
    /// are centred (torch pads both sides alike); under Kaldi's `snip_edges = false`, what the
    /// last window reaches past the end (at most `win_length / 2 + 1`).
    fn append_right_pad(&mut self) {
        let n = self.signal_len;
        let right = match self.spec.framing {
            Framing::NoSnipEdges => match self.spec.n_raw_frames(n) {
                0 => 0,
                frames => (self.spec.frame_start(frames - 1) + self.spec.win_length as isize
                    - n as isize)
                    .max(0) as usize,
            },
            _ => self.pad_left,
        };
        let pad: Vec<f32> = (0..right)
            .map(|d| self.padded_sample((n + d) as isize, n))
            .collect();
        self.pending.extend(pad);
    }

    /// Computes every frame whose window ends at or before padded index `available`.
    fn run_frames(&mut self, available: usize) {
        let spec = &self.spec;
        let total_raw = spec.n_raw_frames(self.signal_len);
        // 0 but for centred frames, whose window torch centres in n_fft.
        let seg_offset = self.window_offset;
        loop {
            let start = self.next_frame * spec.hop_length + seg_offset;
            let end = start + spec.win_length;
            if end > available {
                break;
            }
            // While streaming, total_raw only grows; this guards the final pass.
            if self.next_frame >= total_raw && self.finished_signal() {
                break;
            }
            let segment = &self.pending[start - self.pending_start..end - self.pending_start];
            self.engine.frame(
                spec,
                segment,
                self.window_offset,
                self.next_frame as u32,
                &mut self.raw,
                &mut self.psd_sum,
            );
            if spec.output == OutputKind::Psd {
                self.psd_frames += 1;
            }
            self.next_frame += 1;
        }
    }

    fn finished_signal(&self) -> bool {
        !self.in_item
    }

    /// Drops the samples no future frame (nor the right reflection) needs.
    fn drain_consumed(&mut self) {
        let next_start = self.next_frame * self.spec.hop_length + self.window_offset;
        let keep_tail = self.spec.n_fft + 1;
        let end = self.pending_start + self.pending.len();
        let drop_to = next_start.min(end.saturating_sub(keep_tail));
        if drop_to > self.pending_start + 4096.max(self.spec.n_fft) {
            self.pending.drain(..drop_to - self.pending_start);
            self.pending_start = drop_to;
        }
    }

    /// Width of a raw row (MFCC rows are log-mel until the DCT at the end).
    fn raw_width(&self) -> usize {
        match self.spec.output {
            OutputKind::Mfcc => self.spec.n_mels,
            _ => self.spec.frame_bins(),
        }
    }

    /// Frames computed and not yet taken by [`take_frames`](Self::take_frames) or `finish`.
    pub fn pending_frames(&self) -> usize {
        self.raw.len() / self.raw_width()
    }

    /// Takes the first `frames` computed frames of the current item and finishes them as a
    /// row of their own: the item-level steps (dynamic-range clamp, DCT, affine scaling,
    /// per-feature normalisation) see only these frames. Frame values are those of the whole
    /// item, so consecutive pieces concatenate to the item's frames. Returns the row count
    /// (the frames, or fewer where the spec stacks frames into rows).
    /// (Welch PSD keeps no frames; it has none to take.)
    pub fn take_frames(&mut self, frames: usize, out: &mut Vec<f32>) -> usize {
        if self.spec.is_fixed_length() {
            // Padded or cut whole (`finish`): a piece of such an item has no length to take.
            return 0;
        }
        let width = self.raw_width();
        let n = frames.min(self.pending_frames());
        let mut piece: Vec<f32> = self.raw.drain(..n * width).collect();
        self.finish_rows(&mut piece, false, out)
    }

    /// Item-level steps over the raw rows; appends the final rows to `out`.
    fn post_process(&mut self, out: &mut Vec<f32>) -> usize {
        if self.spec.output == OutputKind::Psd {
            return self.finish_psd(out);
        }
        self.finish_raw(self.spec.drop_last_frame, out)
    }

    /// Finishes the raw rows computed so far into `out` and empties them, keeping their
    /// buffer for the next span or item.
    fn finish_raw(&mut self, drop_last: bool, out: &mut Vec<f32>) -> usize {
        let mut raw = std::mem::take(&mut self.raw);
        let frames = self.finish_rows(&mut raw, drop_last, out);
        raw.clear();
        self.raw = raw;
        frames
    }

    fn finish_rows(&self, raw: &mut Vec<f32>, drop_last: bool, out: &mut Vec<f32>) -> usize {
        finish_rows(&self.spec, self.dct.as_ref(), raw, drop_last, out)
    }

    fn finish_psd(&mut self, out: &mut Vec<f32>) -> usize {
        welch_row(&self.spec, &self.psd_sum, self.psd_frames, out)
    }
}

/// The item-level steps over raw rows (log-mel rows for MFCC): drop the last frame if asked,
/// dynamic-range clamp, DCT, affine scaling, per-feature normalisation, then frames stacked
/// into rows (`stack_frames`). Appends the final rows to `out`; returns their count. One
/// definition for the CPU and the GPU path.
pub fn finish_rows(
    spec: &FeatureSpec,
    dct: Option<&Dct>,
    raw: &mut Vec<f32>,
    drop_last: bool,
    out: &mut Vec<f32>,
) -> usize {
    let width = match spec.output {
        OutputKind::Mfcc => spec.n_mels,
        _ => spec.frame_bins(),
    };
    let mut frames = raw.len() / width;
    if drop_last && frames > 0 {
        frames -= 1;
        raw.truncate(frames * width);
    }
    if spec.fixed_frames > 0 {
        // Cut, or completed with frames of zeros in the log's units (before the affine, as
        // transformers' ASTFeatureExtractor pads its fbank).
        frames = spec.fixed_frames;
        raw.resize(frames * width, 0.0);
    }
    if let Some(range) = spec.dynamic_range {
        let max = raw.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let floor = max - range;
        raw.iter_mut().for_each(|v| *v = v.max(floor));
    }
    let start = out.len();
    if dct.is_none() && out.is_empty() {
        // The rows are the output: hand the buffer over instead of copying it.
        std::mem::swap(raw, out);
    } else if let Some(dct) = dct {
        out.reserve(frames * dct.n_out());
        let mut input = vec![0.0f64; width];
        let mut coeffs = vec![0.0f64; dct.n_out()];
        for row in raw.chunks_exact(width) {
            input
                .iter_mut()
                .zip(row)
                .for_each(|(d, &s)| *d = f64::from(s));
            dct.apply(&input, &mut coeffs);
            out.extend(coeffs.iter().map(|&c| c as f32));
        }
    } else {
        out.extend_from_slice(raw);
    }
    let rows = &mut out[start..];
    if let Some(a) = spec.affine {
        rows.iter_mut().for_each(|v| *v = (*v + a.add) / a.div);
    }
    if spec.normalize != Normalize::None && frames > 0 {
        normalize_bins(rows, spec.frame_bins(), frames, spec.normalize);
    }
    match spec.stack_frames {
        0 | 1 => frames,
        stack => {
            // Rows are frames back to back: `stack` of them are one row already; the last
            // row is completed with zeros.
            let rows = frames.div_ceil(stack);
            out.resize(start + rows * stack * spec.frame_bins(), 0.0);
            rows
        }
    }
}

/// Welch's PSD from the sum of `frames` periodograms (`n_fft / 2 + 1` bins): the mean,
/// density-scaled (1 / (rate · Σw²)) and one-sided (doubled but DC, and Nyquist when n_fft is
/// even), as scipy.signal.welch. Appends one row; returns 1, or 0 without frames.
pub fn welch_row(
    spec: &FeatureSpec,
    power_sum: &[f64],
    frames: usize,
    out: &mut Vec<f32>,
) -> usize {
    if frames == 0 {
        return 0;
    }
    let w = window(spec.window, spec.win_length, spec.periodic);
    let energy: f64 = w.iter().map(|v| v * v).sum();
    let scale = 1.0 / (f64::from(spec.sample_rate) * energy * frames as f64);
    let n = power_sum.len();
    let last_doubled = if spec.n_fft.is_multiple_of(2) {
        n - 1
    } else {
        n
    };
    let mut row: Vec<f64> = power_sum
        .iter()
        .enumerate()
        .map(|(k, &s)| {
            let doubled = if k >= 1 && k < last_doubled { 2.0 } else { 1.0 };
            s * scale * doubled
        })
        .collect();
    log_row(spec, &mut row, out);
    1
}

/// Lanes of a band's sums over an item: frame t is added into lane t % `SUM_LANES`, in frame
/// order, then the lanes are added in a tree (lane l takes lane l + s, for s = 128, 64, ..., 1).
/// The GPU's kernels/item_steps.wgsl sums a band with a workgroup of this many invocations in
/// this order, so the device's means and deviations are the host's to the bit; and no
/// invocation walks a whole item (lavapipe stops an invocation's loops after 65,535
/// iterations, silently: a 30 s waveform has 480,000 frames).
pub const SUM_LANES: usize = 256;

/// Per band of `rows` (`width` values a frame), the sum of `term(band, value)` over the frames,
/// in [`SUM_LANES`] order, starting from std's neutral element (as `Iterator::sum` does).
fn band_sums(rows: &[f32], width: usize, term: impl Fn(usize, f32) -> f64) -> Vec<f64> {
    let zero: f64 = std::iter::empty::<f64>().sum();
    let mut lanes = vec![zero; SUM_LANES * width];
    // The rows read once, in order (each lane still takes its frames in frame order).
    for (t, row) in rows.chunks_exact(width).enumerate() {
        let lane = &mut lanes[(t % SUM_LANES) * width..][..width];
        for (b, (s, &v)) in lane.iter_mut().zip(row).enumerate() {
            *s += term(b, v);
        }
    }
    let mut half = SUM_LANES / 2;
    while half > 0 {
        let (low, high) = lanes.split_at_mut(half * width);
        for (s, &t) in low.iter_mut().zip(&high[..half * width]) {
            *s += t;
        }
        half /= 2;
    }
    lanes.truncate(width);
    lanes
}

/// Per-bin normalisation over one item's frames: each bin minus its mean, divided by its
/// standard deviation as `kind` takes it. NeMo's `normalize_batch(..., "per_feature")`: the
/// sample deviation (n - 1; NaN → 0) plus 1e-5. transformers' `utterance_cmvn`: the population
/// deviation (n), nothing added. Each sum in [`SUM_LANES`] order (the GPU's).
fn normalize_bins(rows: &mut [f32], width: usize, frames: usize, kind: Normalize) {
    let mean: Vec<f64> = band_sums(rows, width, |_, v| f64::from(v))
        .into_iter()
        .map(|s| s / frames as f64)
        .collect();
    let var = band_sums(rows, width, |b, v| {
        (f64::from(v) - mean[b]) * (f64::from(v) - mean[b])
    });
    let std: Vec<f64> = var
        .iter()
        .map(|s| match kind {
            Normalize::UtteranceCmvn => (s / frames as f64).sqrt(),
            Normalize::PerMelBin => (s / (frames as f64 - 1.0) + 1e-7).sqrt(),
            Normalize::ZeroMeanUnitVar => (s / frames as f64 + 1e-7).sqrt(),
            _ => {
                let var = s / (frames as f64 - 1.0);
                (if var.is_nan() { 0.0 } else { var.sqrt() }) + 1e-5
            }
        })
        .collect();
    for row in rows.chunks_exact_mut(width) {
        for ((v, &m), &std) in row.iter_mut().zip(&mean).zip(&std) {
            *v = ((f64::from(*v) - m) / std) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::span::span_window;

    /// Frames of digital silence are copies of the first one computed: the same bits as
    /// computing each, for every preset (whisper-hf's padding to 30 s included), both
    /// precisions, leading, inner and trailing silence, signed zeros, whole and streamed.
    #[test]
    fn silent_frames_copied_equal_silent_frames_computed() {
        let tone = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|i| ((i as f32) * 0.031).sin() * 0.4 + 0.01)
                .collect()
        };
        let mut x = vec![0.0f32; 7_000];
        x.extend(tone(9_000));
        x.extend(std::iter::repeat_n(-0.0f32, 6_000));
        x.extend(tone(5_000));
        x.extend(vec![0.0f32; 8_000]);
        for p in FeatureSpec::presets() {
            for precision in [Precision::F32, Precision::F64] {
                let mut fast = CpuExtractor::with_precision(&p.spec, precision).unwrap();
                let mut full = CpuExtractor::with_precision(&p.spec, precision).unwrap();
                full.engine.compute_silent_rows();
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let frames = fast.extract(&x, &mut a).unwrap();
                assert_eq!(full.extract(&x, &mut b), Ok(frames), "{}", p.name);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert!(bits(&a) == bits(&b), "{} {precision:?}", p.name);
                fast.begin();
                for chunk in x.chunks(3_333) {
                    fast.push(chunk).unwrap();
                }
                let mut streamed = Vec::new();
                fast.finish(&mut streamed).unwrap();
                assert!(
                    bits(&streamed) == bits(&b),
                    "{} {precision:?} streamed",
                    p.name
                );
            }
        }
    }

    #[test]
    fn per_feature_normalisation_equals_a_walk_down_each_column_in_lanes_bit_for_bit() {
        // The definition as a walk down each column, frame t into lane t % 256 and the lanes
        // added in a tree (kernels/item_steps.wgsl's order): the row-by-row version must give
        // the same bits, one frame, fewer frames than lanes and all-zero columns included;
        // and each mean within 1e-15 of the plain sum's.
        fn by_columns(rows: &mut [f32], width: usize, frames: usize) -> Vec<f64> {
            let in_lanes = |column: &dyn Fn(usize) -> f64| {
                let mut lanes = vec![-0.0f64; SUM_LANES];
                for t in 0..frames {
                    lanes[t % SUM_LANES] += column(t);
                }
                let mut s = SUM_LANES / 2;
                while s > 0 {
                    for l in 0..s {
                        lanes[l] += lanes[l + s];
                    }
                    s /= 2;
                }
                lanes[0]
            };
            let input = rows.to_vec();
            let mut means = Vec::new();
            for b in 0..width {
                let value = |t: usize| f64::from(input[t * width + b]);
                let mean = in_lanes(&value) / frames as f64;
                let square = |t: usize| (value(t) - mean) * (value(t) - mean);
                let var = in_lanes(&square) / (frames as f64 - 1.0);
                let std = if var.is_nan() { 0.0 } else { var.sqrt() } + 1e-5;
                for t in 0..frames {
                    rows[t * width + b] = ((value(t) - mean) / std) as f32;
                }
                means.push(mean);
            }
            means
        }
        let width = 80;
        for frames in [1usize, 2, 255, 3001] {
            let mut rows: Vec<f32> = (0..width * frames)
                .map(|i| match i % width {
                    0 => 0.0,
                    1 => -0.0,
                    b => ((i * 7919 % 10007) as f32 * 0.37).sin() * (b as f32) - 11.0,
                })
                .collect();
            let plain: Vec<f64> = (0..width)
                .map(|b| {
                    rows.iter()
                        .skip(b)
                        .step_by(width)
                        .map(|&v| f64::from(v))
                        .sum::<f64>()
                })
                .map(|s| s / frames as f64)
                .collect();
            let mut expected = rows.clone();
            let means = by_columns(&mut expected, width, frames);
            for (m, p) in means.iter().zip(&plain) {
                assert!(
                    (m - p).abs() <= 1e-15 * p.abs().max(1.0),
                    "{frames} frames: {m} {p}"
                );
            }
            normalize_bins(&mut rows, width, frames, Normalize::PerFeature);
            let bits = |r: &[f32]| r.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert!(bits(&rows) == bits(&expected), "{frames} frames");
        }
    }

    #[test]
    fn streaming_in_any_chunking_equals_one_shot() {
        let x = chirp(40_000);
        // Dither is keyed by frame, so a dithered spec streams to the same output too. IQ
        // presets read the chirp as interleaved I/Q pairs, split anywhere (chunks of odd sizes
        // end between an I and its Q).
        let mut dithered = FeatureSpec::kaldi(40);
        dithered.dither = 1.0;
        dithered.dither_seed = 99;
        let specs = FeatureSpec::presets().into_iter().map(|p| p.spec);
        for spec in specs.chain([dithered]) {
            let mut ex = CpuExtractor::new(&spec).unwrap();
            let mut whole = Vec::new();
            let frames = ex.extract(&x, &mut whole).unwrap();
            assert_eq!(frames, spec.n_frames(x.len() / spec.values_per_sample()));
            assert!(frames > 0);
            for chunk in [1usize, 7, 160, 1000, 4097] {
                ex.begin();
                for c in x.chunks(chunk) {
                    ex.push(c).unwrap();
                }
                let mut streamed = Vec::new();
                assert_eq!(ex.finish(&mut streamed).unwrap(), frames);
                assert_eq!(streamed, whole, "chunk {chunk}");
            }
        }
    }

    /// |DFT|² of one frame, in f64, straight from the definition.
    fn naive_power(x: &[f32]) -> Vec<f64> {
        let n = x.len();
        (0..=n / 2)
            .map(|k| {
                let (mut re, mut im) = (0.0f64, 0.0f64);
                for (t, &v) in x.iter().enumerate() {
                    let a = -2.0 * std::f64::consts::PI * ((k * t) % n) as f64 / n as f64;
                    re += f64::from(v) * a.cos();
                    im += f64::from(v) * a.sin();
                }
                re * re + im * im
            })
            .collect()
    }

    #[test]
    fn real_fft_path_matches_a_naive_f64_dft() {
        use crate::spec::WindowKind;
        // Deterministic pseudo-random frames; sizes with radix 2, 5 and a prime factor.
        let mut state = 12345u64;
        for n_fft in [400usize, 512, 401, 97] {
            let x: Vec<f32> = (0..n_fft * 3)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                })
                .collect();
            let mut spec = FeatureSpec::welch(16_000, n_fft);
            spec.output = OutputKind::Power;
            spec.window = WindowKind::Rectangular;
            spec.remove_dc = false;
            spec.hop_length = n_fft;
            for (precision, rtol) in [(Precision::F64, 1e-9), (Precision::F32, 1e-4)] {
                let mut out = Vec::new();
                let frames = CpuExtractor::with_precision(&spec, precision)
                    .unwrap()
                    .extract(&x, &mut out)
                    .unwrap();
                assert_eq!(frames, 3);
                let bins = n_fft / 2 + 1;
                for f in 0..frames {
                    let expect = naive_power(&x[f * n_fft..(f + 1) * n_fft]);
                    let peak = expect.iter().cloned().fold(0.0, f64::max);
                    for (k, &e) in expect.iter().enumerate() {
                        let got = f64::from(out[f * bins + k]);
                        // Relative to the bin, with the f32 output's own rounding as the floor.
                        let tol = rtol * e + 1e-7 * e + 1e-12 * peak;
                        assert!(
                            (got - e).abs() <= tol,
                            "n_fft {n_fft} {precision:?} frame {f} bin {k}: {got} vs {e}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn pieces_concatenate_to_the_whole_item() {
        let x = chirp(50_000);
        // Kaldi has no item-level step: pieces equal the whole item exactly.
        let spec = FeatureSpec::kaldi(80);
        let mut ex = CpuExtractor::new(&spec).unwrap();
        let mut whole = Vec::new();
        let frames = ex.extract(&x, &mut whole).unwrap();
        ex.begin();
        let mut pieces = Vec::new();
        let mut taken = 0;
        for c in x.chunks(3000) {
            ex.push(c).unwrap();
            while ex.pending_frames() >= 40 + 2 {
                taken += ex.take_frames(40, &mut pieces);
            }
        }
        taken += ex.finish(&mut pieces).unwrap();
        assert_eq!(taken, frames);
        assert_eq!(pieces, whole);
    }

    fn chirp(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let t = i as f64 / 16_000.0;
                (0.3 * (2.0 * std::f64::consts::PI * (100.0 + 2000.0 * t) * t).sin()) as f32
            })
            .collect()
    }

    /// Pieces as the stream cuts them (`take_frames` while 27 frames are pending), each
    /// computed alone from its window, equal the stream's pieces bit for bit: every preset,
    /// with dither, in both precisions.
    #[test]
    fn spans_equal_the_streamed_pieces() {
        let x = chirp(50_000);
        let mut specs: Vec<(&str, FeatureSpec)> = FeatureSpec::presets()
            .into_iter()
            .map(|p| (p.name, p.spec))
            .collect();
        let mut dithered = FeatureSpec::nemo(80);
        dithered.dither = 1e-3;
        specs.push(("nemo dithered", dithered));
        // A fixed item length is padded or cut whole: it has no pieces (refused, tested in spec.rs).
        specs.retain(|(_, spec)| !spec.is_fixed_length());
        for (name, spec) in specs {
            for precision in [Precision::F32, Precision::F64] {
                let mut ex = CpuExtractor::with_precision(&spec, precision).unwrap();
                ex.begin();
                let (mut streamed, mut cuts) = (Vec::new(), Vec::new());
                for c in x.chunks(3000) {
                    ex.push(c).unwrap();
                    while ex.pending_frames() >= 25 + 2 {
                        ex.take_frames(25, &mut streamed);
                        cuts.push(25);
                    }
                }
                ex.finish(&mut streamed).unwrap();
                // IQ presets read the chirp as interleaved I/Q pairs.
                let v = spec.values_per_sample();
                let n = x.len() / v;
                let total = spec.n_raw_frames(n);
                let mut spans = Vec::new();
                let mut first = 0;
                for (k, frames) in cuts.iter().copied().chain([0]).enumerate() {
                    let last = k == cuts.len();
                    let frames = if last { total - first } else { frames };
                    let w = span_window(&spec, first..first + frames, n);
                    let span = Span {
                        sample_start: w.start,
                        // An earlier piece knows the item only as far as its window.
                        signal_len: if last { n } else { w.end },
                        first_frame: first,
                        frames,
                        last,
                    };
                    ex.extract_span(&x[w.start * v..w.end * v], &span, &mut spans)
                        .unwrap();
                    first += frames;
                }
                assert!(cuts.len() >= 3, "{name}: only {} cuts", cuts.len());
                assert_eq!(spans, streamed, "{name} {precision:?}");
            }
        }
    }

    /// Complex specs through the extractor: each row is the two-sided |DFT|² (or |DFT|) of
    /// its frame from the definition — the frame at `t · hop`, scaled, windowed by `win_length`
    /// and zero-padded to `n_fft` — in fftshift order when asked, through the log.
    #[test]
    fn complex_specs_match_a_naive_two_sided_dft() {
        use crate::spec::{LogKind, WindowKind};
        let n = 3000;
        let iq: Vec<f32> = (0..n)
            .flat_map(|t| {
                let a = 0.37 * t as f64 + 1e-4 * (t * t) as f64;
                let r = ((t * 7919) % 101) as f64 / 101.0 - 0.5;
                [
                    (0.6 * a.cos() + 0.1 * r) as f32,
                    (0.6 * a.sin() - 0.05) as f32,
                ]
            })
            .collect();
        let mut base = FeatureSpec::iq_spectrogram(1_000_000, 64);
        base.win_length = 60;
        base.hop_length = 24;
        base.input_scale = 2.0;
        base.window = WindowKind::Hamming;
        let mut magnitude = base.clone();
        magnitude.output = OutputKind::Magnitude;
        magnitude.log = LogKind::None;
        magnitude.fftshift = false;
        for spec in [base, magnitude] {
            let mut out = Vec::new();
            let frames = CpuExtractor::with_precision(&spec, Precision::F64)
                .unwrap()
                .extract(&iq, &mut out)
                .unwrap();
            assert_eq!(frames, 1 + (n - 60) / 24);
            assert_eq!(out.len(), frames * 64);
            let w = window(spec.window, 60, spec.periodic);
            for f in [0, 1, frames / 2, frames - 1] {
                for (k, &got) in out[f * 64..(f + 1) * 64].iter().enumerate() {
                    // Output bin k is frequency k − 32 when shifted.
                    let bin = if spec.fftshift { (k + 32) % 64 } else { k };
                    let (mut re, mut im) = (0.0f64, 0.0f64);
                    for (m, wm) in w.iter().enumerate() {
                        let s = f * 24 + m;
                        let g = 2.0 * wm;
                        let (x, y) = (g * f64::from(iq[2 * s]), g * f64::from(iq[2 * s + 1]));
                        let a = -2.0 * std::f64::consts::PI * ((bin * m) % 64) as f64 / 64.0;
                        re += x * a.cos() - y * a.sin();
                        im += x * a.sin() + y * a.cos();
                    }
                    let power = re * re + im * im;
                    let (expect, tol) = match spec.output {
                        OutputKind::Magnitude => (power.sqrt(), 1e-6 * power.sqrt() + 1e-9),
                        _ => (10.0 * power.max(1e-10).log10(), 1e-4),
                    };
                    let got = f64::from(got);
                    assert!(
                        (got - expect).abs() <= tol,
                        "{:?} frame {f} bin {k}: {got} vs {expect}",
                        spec.output
                    );
                }
            }
        }
    }

    /// IQ travels as pairs: an odd count of values is refused (whole or streamed), and a
    /// non-finite value is named by its sample's index.
    #[test]
    fn complex_items_refuse_half_samples_and_name_bad_samples() {
        let spec = FeatureSpec::iq_spectrogram(200_000, 16);
        let mut ex = CpuExtractor::new(&spec).unwrap();
        let mut out = Vec::new();
        let mut iq = vec![0.25f32; 101];
        assert_eq!(
            ex.extract(&iq, &mut out),
            Err(ItemError::HalfSample { values: 101 })
        );
        ex.begin();
        ex.push(&iq[..40]).unwrap();
        ex.push(&iq[40..]).unwrap();
        assert_eq!(
            ex.finish(&mut out),
            Err(ItemError::HalfSample { values: 101 })
        );
        iq.pop();
        iq[77] = f32::INFINITY;
        assert!(matches!(
            ex.extract(&iq, &mut out),
            Err(ItemError::NonFinite { index: 38, .. })
        ));
        ex.begin();
        assert!(matches!(
            ex.push(&iq[..41]).and_then(|()| ex.push(&iq[41..])),
            Err(ItemError::NonFinite { index: 38, .. })
        ));
        assert!(out.is_empty());
        iq[77] = 0.5;
        assert_eq!(ex.extract(&iq, &mut out), Ok(1 + (50 - 16) / 8));
    }

    #[test]
    fn spans_that_miss_samples_are_refused() {
        let x = chirp(20_000);
        let spec = FeatureSpec::whisper(80);
        let mut ex = CpuExtractor::new(&spec).unwrap();
        let w = span_window(&spec, 10..20, x.len());
        let span = |sample_start, signal_len, last| Span {
            sample_start,
            signal_len,
            first_frame: 10,
            frames: 10,
            last,
        };
        let mut out = Vec::new();
        let short = &x[w.start + 1..w.end];
        let err = ex.extract_span(short, &span(w.start + 1, x.len(), false), &mut out);
        assert!(matches!(err, Err(ItemError::BadSpan(_))), "{err:?}");
        let err = ex.extract_span(&x[w.clone()], &span(w.start, x.len(), true), &mut out);
        assert!(matches!(err, Err(ItemError::BadSpan(_))), "{err:?}");
        let mut bad = x[w.clone()].to_vec();
        bad[5] = f32::NAN;
        let err = ex.extract_span(&bad, &span(w.start, x.len(), false), &mut out);
        match err {
            Err(ItemError::NonFinite { index, .. }) => assert_eq!(index, w.start + 5),
            other => panic!("{other:?}"),
        }
        assert!(out.is_empty());
    }

    #[test]
    fn f32_and_f64_agree_on_log_outputs() {
        let x = chirp(16_000);
        let spec = FeatureSpec::whisper(80);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        CpuExtractor::with_precision(&spec, Precision::F32)
            .unwrap()
            .extract(&x, &mut a)
            .unwrap();
        CpuExtractor::with_precision(&spec, Precision::F64)
            .unwrap()
            .extract(&x, &mut b)
            .unwrap();
        let worst = a
            .iter()
            .zip(&b)
            .map(|(p, q)| (p - q).abs())
            .fold(0.0, f32::max);
        assert!(worst < 1e-4, "worst {worst}");
    }

    #[test]
    fn non_finite_samples_are_refused_with_their_index() {
        let mut ex = CpuExtractor::new(&FeatureSpec::whisper(80)).unwrap();
        let mut x = vec![0.1f32; 1000];
        x[321] = f32::NAN;
        let err = ex.extract(&x, &mut Vec::new()).unwrap_err();
        assert!(
            matches!(err, ItemError::NonFinite { index: 321, .. }),
            "{err:?}"
        );
        assert_eq!(ex.extract(&[], &mut Vec::new()), Err(ItemError::Empty));
        // The extractor is usable again after an error.
        assert!(ex.extract(&[0.0; 800], &mut Vec::new()).is_ok());
    }

    #[test]
    fn dither_is_seeded_and_reproducible() {
        let mut spec = FeatureSpec::kaldi(23);
        spec.dither = 1.0;
        let x = vec![0.0f32; 4000];
        let run = |seed| {
            let mut s = spec.clone();
            s.dither_seed = seed;
            let mut out = Vec::new();
            CpuExtractor::new(&s)
                .unwrap()
                .extract(&x, &mut out)
                .unwrap();
            out
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn short_reflect_signals_use_numpy_reflection_instead_of_failing() {
        let spec = FeatureSpec::whisper(80);
        let mut out = Vec::new();
        let frames = CpuExtractor::new(&spec)
            .unwrap()
            .extract(&[0.5, -0.25, 0.125], &mut out)
            .unwrap();
        assert_eq!(frames, 0); // 1 + 3/160 = 1 frame, minus whisper's dropped last frame
                               // NeMo ≤ 2.4 refuses it, as torch does; a custom spec without that floor reflects.
        let mut spec = FeatureSpec::nemo_legacy(80);
        assert_eq!(
            CpuExtractor::new(&spec)
                .unwrap()
                .extract(&[0.5, -0.25, 0.125], &mut out),
            Err(ItemError::TooShort {
                samples: 3,
                min: 257
            })
        );
        spec.min_samples = 0;
        assert_eq!(spec.pad_mode, crate::spec::PadMode::Reflect);
        let frames = CpuExtractor::new(&spec)
            .unwrap()
            .extract(&[0.5, -0.25, 0.125], &mut out)
            .unwrap();
        assert_eq!(frames, 1);
        assert!(out.iter().all(|v| v.is_finite()));
    }
}
