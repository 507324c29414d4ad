//! Deterministic augmentation for training: speed perturbation, a volume change,
//! reverberation by a room impulse response, noise from a noise corpus at a drawn SNR, and
//! SpecAugment's time warp and masks on the features, in that order (lhotse's). Every draw comes from Philox4x32-10
//! (`sonograph_rf::philox`, the generator `synth-iq` uses) keyed by the seed, its counter laid
//! out as (draw, epoch and stream, item): an item gets the same augmentation in an epoch
//! whatever the workers, the order they run in, or a resume. [`Augmenter::draw`] gives the
//! draws of an item without applying them, so that a test (or a user) can apply them
//! independently.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sonograph_io::decode::DecodeOptions;
use sonograph_rf::philox::philox4x32_10;

use crate::report::named_error;

/// What to apply, as the Loader's `augment` takes it (every part optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AugmentOptions {
    /// Speed factors, one drawn uniformly for every item (e.g. [0.9, 1.0, 1.1]): lhotse's and
    /// Kaldi's speed perturbation, the item resampled from round(rate × factor) Hz to the
    /// rate, so that it lasts 1/factor as long.
    pub speed: Option<Vec<f64>>,
    /// A gain in dB drawn uniformly from [low, high] for every item.
    pub volume_db: Option<[f64; 2]>,
    pub reverb: Option<ReverbOptions>,
    pub noise: Option<NoiseOptions>,
    pub spec_augment: Option<SpecAugmentOptions>,
}

/// Noise mixed into items (lhotse's and MUSAN's way): a clip of the corpus, at an SNR drawn
/// uniformly from `snr_db`, with probability `prob`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoiseOptions {
    /// A folder of noise files (walked) or a manifest of them.
    pub source: PathBuf,
    pub snr_db: [f64; 2],
    #[serde(default = "always")]
    pub prob: f64,
}

/// Reverberation (lhotse's `ReverbWithImpulseResponse`, after Kaldi's `wav-reverberate
/// --shift-output`): the item convolved with an impulse response of the corpus, from the
/// response's largest value on for the item's length, scaled back to the item's mean square;
/// with probability `prob`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReverbOptions {
    /// A folder of impulse responses (walked) or a manifest of them.
    pub source: PathBuf,
    #[serde(default = "always")]
    pub prob: f64,
}

fn always() -> f64 {
    1.0
}

/// SpecAugment's masks as NeMo draws them (`SpecAugment` in
/// nemo/collections/asr/parts/submodules/spectr_augment.py, NeMo commit 0495c527): each
/// frequency mask starts at a uniform integer in 0..=bins − freq_width and is a uniform
/// 0..=freq_width bins wide; each time mask, with `w` = time_width (frames, or a share of the
/// item's frames, at least 1), starts in 0..=max(1, frames − w) and is 0..=w frames wide. The
/// masked values are `mask_value` (NeMo's default, 0). Before the masks, where `time_warp` is
/// over 0, lhotse's time warp (`time_warp` in lhotse/dataset/signal_transforms.py, lhotse
/// 1.33.0; NeMo has none): the item's frames before a boundary drawn uniformly in
/// time_warp + 1..=frames − time_warp − 1 are stretched or squeezed, bicubically as
/// `torch.nn.functional.interpolate` does, so that the boundary moves to a uniform frame within
/// time_warp of it, and the frames after it fill the rest; an item of 2 × time_warp + 1 frames
/// or fewer is left as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecAugmentOptions {
    /// lhotse's `time_warp_factor` (its default is 80; here 0, none, as NeMo).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub time_warp: usize,
    #[serde(default)]
    pub freq_masks: usize,
    #[serde(default = "ten")]
    pub freq_width: usize,
    #[serde(default)]
    pub time_masks: usize,
    #[serde(default = "ten_frames")]
    pub time_width: TimeWidth,
    #[serde(default)]
    pub mask_value: f32,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn ten() -> usize {
    10
}

fn ten_frames() -> TimeWidth {
    TimeWidth::Frames(10)
}

/// The widest time mask: frames, or a share of the item's frames (NeMo's adaptive width).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TimeWidth {
    Frames(usize),
    Share(f64),
}

impl AugmentOptions {
    /// The options, checked, in their own names.
    pub fn check(&self) -> Result<(), String> {
        let range = |name: &str, r: [f64; 2], lo: f64, hi: f64| {
            if !(r[0].is_finite() && r[1].is_finite() && lo <= r[0] && r[0] <= r[1] && r[1] <= hi) {
                return Err(format!(
                    "{name} [{}, {}] must be a range low <= high within [{lo}, {hi}]",
                    r[0], r[1]
                ));
            }
            Ok(())
        };
        if let Some(factors) = &self.speed {
            if factors.is_empty() || factors.len() > 64 {
                return Err("speed: give 1 to 64 factors".into());
            }
            if let Some(f) = factors.iter().find(|f| !(0.5..=2.0).contains(*f)) {
                return Err(format!("speed: the factor {f} is outside [0.5, 2]"));
            }
        }
        if let Some(v) = self.volume_db {
            range("volume_db", v, -60.0, 60.0)?;
        }
        if let Some(r) = &self.reverb {
            if !(0.0..=1.0).contains(&r.prob) {
                return Err(format!("reverb.prob {} must be within [0, 1]", r.prob));
            }
        }
        if let Some(n) = &self.noise {
            range("noise.snr_db", n.snr_db, -30.0, 100.0)?;
            if !(0.0..=1.0).contains(&n.prob) {
                return Err(format!("noise.prob {} must be within [0, 1]", n.prob));
            }
        }
        if let Some(s) = &self.spec_augment {
            if s.freq_masks > 64 || s.time_masks > 1024 {
                return Err("spec_augment: at most 64 frequency and 1024 time masks".into());
            }
            if s.freq_width > MAX_MASK_WIDTH {
                return Err(format!(
                    "spec_augment.freq_width {} is over {MAX_MASK_WIDTH}",
                    s.freq_width
                ));
            }
            if s.time_warp > MAX_MASK_WIDTH {
                return Err(format!(
                    "spec_augment.time_warp {} is over {MAX_MASK_WIDTH} frames",
                    s.time_warp
                ));
            }
            if let TimeWidth::Frames(w) = s.time_width {
                if w > MAX_MASK_WIDTH {
                    return Err(format!(
                        "spec_augment.time_width {w} is over {MAX_MASK_WIDTH} frames"
                    ));
                }
            }
            if let TimeWidth::Share(p) = s.time_width {
                if !(0.0..=1.0).contains(&p) {
                    return Err(format!(
                        "spec_augment.time_width {p}: a share is within [0, 1]"
                    ));
                }
            }
            if !s.mask_value.is_finite() {
                return Err("spec_augment.mask_value must be finite".into());
            }
        }
        Ok(())
    }
}

/// The widest mask, in bins or frames: far over any spec's bins or an item's frames at a 10 ms
/// hop (an hour), far under what a draw's arithmetic could overflow.
const MAX_MASK_WIDTH: usize = 1 << 20;

/// The independent streams of draws of an item.
#[derive(Clone, Copy)]
enum Stream {
    Volume = 1,
    Noise = 2,
    Masks = 3,
    Speed = 4,
    Reverb = 5,
    Warp = 6,
}

/// Sequential draws of one (seed, epoch, item, stream).
struct Draws {
    key: [u32; 2],
    lane: u32,
    item: [u32; 2],
    next: u32,
}

impl Draws {
    fn new(seed: u64, epoch: u64, item: u64, stream: Stream) -> Draws {
        // Epochs up to 2^24 with 256 streams in one counter word.
        let lane = ((epoch as u32) << 8) | stream as u32;
        Draws {
            key: [seed as u32, (seed >> 32) as u32],
            lane,
            item: [item as u32, (item >> 32) as u32],
            next: 0,
        }
    }

    fn word(&mut self) -> u32 {
        let block = philox4x32_10(
            [self.next / 4, self.lane, self.item[0], self.item[1]],
            self.key,
        );
        let w = block[(self.next % 4) as usize];
        self.next += 1;
        w
    }

    /// Uniform on (0, 1).
    fn uniform(&mut self) -> f64 {
        (f64::from(self.word()) + 0.5) / 4_294_967_296.0
    }

    /// Uniform in [lo, hi].
    fn between(&mut self, r: [f64; 2]) -> f64 {
        r[0] + (r[1] - r[0]) * self.uniform()
    }

    /// A uniform integer in lo..=hi (`hi >= lo`; Python's `randint`).
    fn randint(&mut self, lo: usize, hi: usize) -> usize {
        let n = (hi - lo) as u128 + 1;
        lo + ((u128::from(self.word()) * n) >> 32) as usize
    }
}

/// What an item gets in an epoch.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Drawn {
    pub speed: Option<f64>,
    pub gain_db: Option<f64>,
    /// The impulse response, by its index among the corpus' responses.
    pub rir: Option<usize>,
    pub noise: Option<NoiseDraw>,
    /// (first bin, width) of each frequency mask.
    pub freq_masks: Vec<(usize, usize)>,
    /// (first frame, width) of each time mask.
    pub time_masks: Vec<(usize, usize)>,
    /// The time warp: (the boundary's frame, the frame it moves to).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_warp: Option<(usize, usize)>,
}

/// The noise an item is mixed with: the clip (by its index among the noise corpus' clips),
/// where in the clip the item's length starts (the clip repeated where it is shorter), the
/// SNR.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoiseDraw {
    pub clip: usize,
    pub offset_s: f64,
    pub snr_db: f64,
}

/// The draws of a job: its options, its seed and its noise clips' durations.
#[derive(Debug, Clone)]
pub struct Augmenter {
    pub options: AugmentOptions,
    pub seed: u64,
    /// The noise corpus' clips.
    pub noise_clips: Vec<Clip>,
    /// The impulse responses.
    pub rir_clips: Vec<Clip>,
    /// Noise files decoded whole, shared by the workers.
    pub noise_cache: Arc<NoiseCache>,
}

/// The most decoded noise the workers keep, in bytes (a MUSAN-sized corpus does not fit; its
/// files past this are decoded for each draw, as before).
const NOISE_CACHE_BYTES: usize = 256 << 20;

/// A decoded file, shared.
type Samples = Arc<Vec<f32>>;

/// Noise files decoded whole at the items' rate. A draw otherwise decodes its file from the
/// start to the drawn offset (the decoder reads its way there), for every item: a third of an
/// augmented Loader's time on a corpus of 10 s FLAC noise (bench/loader_lhotse.py).
#[derive(Default)]
pub struct NoiseCache {
    /// By (file, rate): its samples, or `None` where it is not kept (another rate than the
    /// file's, a length the header does not give, or no room).
    files: Mutex<HashMap<(PathBuf, u32), Option<Samples>>>,
    bytes: AtomicUsize,
}

impl std::fmt::Debug for NoiseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let files = self.files.lock().map_or(0, |m| m.len());
        write!(
            f,
            "NoiseCache({files} files, {} bytes)",
            self.bytes.load(Ordering::Relaxed)
        )
    }
}

impl NoiseCache {
    /// `path`'s samples at `rate`, decoded whole the first time, where the file is at `rate`
    /// already (so that a slice of it is what decoding from an offset gives, sample for
    /// sample) and fits; `None` otherwise.
    fn file(&self, path: &Path, rate: u32) -> Option<Samples> {
        let key = (path.to_path_buf(), rate);
        if let Some(known) = self.files.lock().ok()?.get(&key) {
            return known.clone();
        }
        // Decoded outside the lock: two workers may both decode a file the first time.
        let kept = sonograph_io::AudioReader::open(path, &DecodeOptions::default())
            .ok()
            .filter(|r| r.info().sample_rate == rate)
            .and_then(|r| {
                let bytes = r.info().declared_frames?.checked_mul(4)?;
                let bytes = usize::try_from(bytes).ok()?;
                self.reserve(bytes).then_some((r, bytes))
            })
            .and_then(|(r, reserved)| {
                let samples = sonograph_io::decode_reader(r, rate).ok();
                // Held as decoded, whatever the header said (the draw's own decode says why
                // one failed; nothing is kept).
                let held = samples.as_ref().map_or(0, |s| s.len() * 4);
                let fits = held <= reserved || self.reserve(held - reserved);
                self.release(if fits {
                    reserved.saturating_sub(held)
                } else {
                    reserved
                });
                samples.filter(|_| fits).map(Arc::new)
            });
        let mut files = self.files.lock().ok()?;
        if let Some(first) = files.get(&key) {
            // Another worker decoded it meanwhile: its copy is the one kept.
            if let Some(ours) = &kept {
                self.release(ours.len() * 4);
            }
            return first.clone();
        }
        files.insert(key, kept.clone());
        kept
    }

    fn release(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Room for `bytes` more under [`NOISE_CACHE_BYTES`], taken if there is.
    fn reserve(&self, bytes: usize) -> bool {
        self.bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes)
                    .filter(|&total| total <= NOISE_CACHE_BYTES)
            })
            .is_ok()
    }
}

/// A clip of a noise or impulse-response corpus: its file, where it starts in it, its
/// length.
#[derive(Debug, Clone, PartialEq)]
pub struct Clip {
    pub path: PathBuf,
    pub offset_s: f64,
    pub seconds: f64,
}

impl Augmenter {
    /// The augmenter of `options` and `seed`: the noise and impulse-response corpora listed
    /// (a folder, a manifest or a bucket prefix) and their clips' durations read on `threads`
    /// threads. A corpus that is empty, or a clip of it that cannot be read, is refused now
    /// rather than failing the items it would be drawn for.
    pub fn load(options: AugmentOptions, seed: u64, threads: usize) -> Result<Augmenter, String> {
        options.check()?;
        let noise_clips = match &options.noise {
            Some(n) => corpus_clips(&n.source, "noise", threads)?,
            None => Vec::new(),
        };
        let rir_clips = match &options.reverb {
            Some(r) => corpus_clips(&r.source, "reverb", threads)?,
            None => Vec::new(),
        };
        Ok(Augmenter {
            options,
            seed,
            noise_clips,
            rir_clips,
            noise_cache: Arc::default(),
        })
    }

    /// `samples` (at `rate`, of the file `path`) as item `item` gets them in `epoch`: speed
    /// perturbed, then the gain, the impulse response and the noise; with the draws, whose
    /// masks are drawn for the features of `bins` bins and `frames_of` the samples' frames.
    pub fn waveform(
        &self,
        epoch: u64,
        item: u64,
        mut samples: Vec<f32>,
        rate: u32,
        path: &Path,
        features: Option<(usize, &dyn Fn(usize) -> usize)>,
    ) -> Result<(Vec<f32>, Drawn), String> {
        if let Some(factor) = self.speed(epoch, item) {
            samples = apply_speed(samples, rate, factor).map_err(|e| named_error(path, e))?;
        }
        let seconds = samples.len() as f64 / f64::from(rate);
        let shape = features.map(|(bins, frames_of)| (frames_of(samples.len()), bins));
        let drawn = self.draw(epoch, item, seconds, shape);
        let noise = match &drawn.noise {
            Some(n) => Some(self.noise_samples(n, samples.len(), rate)?),
            None => None,
        };
        let rir = match drawn.rir {
            Some(k) => Some(rir_samples(&self.rir_clips[k], rate)?),
            None => None,
        };
        apply_to_waveform(&drawn, &mut samples, rir.as_deref(), noise.as_deref());
        Ok((samples, drawn))
    }

    /// `len` samples of the drawn noise clip from the drawn offset, the clip repeated where it
    /// is shorter.
    fn noise_samples(&self, n: &NoiseDraw, len: usize, rate: u32) -> Result<Vec<f32>, String> {
        let clip = &self.noise_clips[n.clip];
        let path = &clip.path;
        let opts = DecodeOptions {
            offset_s: clip.offset_s + n.offset_s,
            // Never past the clip's end (a manifest's entry may be a part of a long file).
            duration_s: Some((len as f64 / f64::from(rate)).min(clip.seconds - n.offset_s)),
            ..Default::default()
        };
        // The decoder's own offset and length in samples (`AudioReader::open`), from the file
        // decoded whole where it is kept.
        let file = self.noise_cache.file(path, rate);
        let cached = file.as_deref().and_then(|file| {
            let at = |s: f64| (s.max(0.0) * f64::from(rate)).round() as usize;
            let skip = at(opts.offset_s);
            let take = at(opts.duration_s.unwrap_or(0.0));
            (skip < file.len()).then(|| &file[skip..(skip + take).min(file.len())])
        });
        let decoded;
        let clip = match cached {
            Some(samples) => samples,
            None => {
                decoded = sonograph_io::decode_mono(path, &opts, rate)
                    .map_err(|e| named_error(path, format!("noise: {e}")))?;
                &decoded[..]
            }
        };
        if clip.is_empty() {
            return Err(named_error(path, "noise: the clip is empty".into()));
        }
        // Whole copies of the clip, then its start: a cycling iterator copied a sample at a
        // time (4 % of an augmented epoch).
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let take = clip.len().min(len - out.len());
            out.extend_from_slice(&clip[..take]);
        }
        Ok(out)
    }

    /// The speed factor of item `item` in `epoch`, where speed perturbation is asked for: the
    /// first step, which sets the length the others see.
    pub fn speed(&self, epoch: u64, item: u64) -> Option<f64> {
        let factors = self.options.speed.as_ref()?;
        let mut d = Draws::new(self.seed, epoch, item, Stream::Speed);
        Some(factors[d.randint(0, factors.len() - 1)])
    }

    /// The draws of item `item` in `epoch`, `seconds` long after its speed perturbation, and
    /// the masks of its features where `frames` and `bins` are given.
    pub fn draw(
        &self,
        epoch: u64,
        item: u64,
        seconds: f64,
        features: Option<(usize, usize)>,
    ) -> Drawn {
        let o = &self.options;
        let mut drawn = Drawn {
            speed: self.speed(epoch, item),
            ..Drawn::default()
        };
        if let Some(range) = o.volume_db {
            drawn.gain_db = Some(Draws::new(self.seed, epoch, item, Stream::Volume).between(range));
        }
        if let (Some(r), false) = (&o.reverb, self.rir_clips.is_empty()) {
            let mut d = Draws::new(self.seed, epoch, item, Stream::Reverb);
            if d.uniform() < r.prob {
                drawn.rir = Some(d.randint(0, self.rir_clips.len() - 1));
            }
        }
        if let (Some(n), false) = (&o.noise, self.noise_clips.is_empty()) {
            let mut d = Draws::new(self.seed, epoch, item, Stream::Noise);
            if d.uniform() < n.prob {
                let clip = d.randint(0, self.noise_clips.len() - 1);
                let room = (self.noise_clips[clip].seconds - seconds).max(0.0);
                drawn.noise = Some(NoiseDraw {
                    clip,
                    offset_s: room * d.uniform(),
                    snr_db: d.between(n.snr_db),
                });
            }
        }
        if let (Some(s), Some((frames, _))) = (&o.spec_augment, features) {
            let factor = s.time_warp;
            // lhotse's `randint(factor + 1, t - factor)` and `randint(center - factor,
            // center + factor + 1)`: numpy's, whose upper bound is excluded.
            if factor > 0 && frames > 2 * factor + 1 {
                let mut d = Draws::new(self.seed, epoch, item, Stream::Warp);
                let center = d.randint(factor + 1, frames - factor - 1);
                let warped = d.randint(center - factor, center + factor);
                drawn.time_warp = (warped != center).then_some((center, warped));
            }
        }
        if let (Some(s), Some((frames, bins))) = (&o.spec_augment, features) {
            let mut d = Draws::new(self.seed, epoch, item, Stream::Masks);
            for _ in 0..s.freq_masks {
                let width = s.freq_width.min(bins);
                let left = d.randint(0, bins - width);
                drawn.freq_masks.push((left, d.randint(0, width)));
            }
            for _ in 0..s.time_masks {
                let width = match s.time_width {
                    TimeWidth::Frames(w) => w,
                    TimeWidth::Share(p) => ((frames as f64 * p) as usize).max(1),
                };
                let left = d.randint(0, frames.saturating_sub(width).max(1));
                drawn.time_masks.push((left, d.randint(0, width)));
            }
        }
        drawn
    }
}

/// An impulse response's samples at `rate`.
fn rir_samples(clip: &Clip, rate: u32) -> Result<Vec<f32>, String> {
    let opts = DecodeOptions {
        offset_s: clip.offset_s,
        duration_s: Some(clip.seconds),
        ..Default::default()
    };
    sonograph_io::decode_mono(&clip.path, &opts, rate)
        .map_err(|e| named_error(&clip.path, format!("impulse response: {e}")))
}

/// The clips of a corpus (a folder, a manifest or a bucket prefix), their durations read;
/// `what` names it in errors.
fn corpus_clips(source: &Path, what: &str, threads: usize) -> Result<Vec<Clip>, String> {
    let listed = crate::listing::list(source)?;
    let seconds = crate::listing::durations(&listed, threads);
    let mut clips = Vec::new();
    for ((id, item), d) in listed.into_iter().zip(seconds) {
        let item = item.map_err(|e| format!("{what} {id}: {e}"))?;
        if d <= 0.0 {
            return Err(format!("{what} {}: no audio in it", item.path.display()));
        }
        clips.push(Clip {
            path: item.path,
            offset_s: item.offset_s,
            seconds: d,
        });
    }
    if clips.is_empty() {
        return Err(format!("{what} {}: no audio files in it", source.display()));
    }
    Ok(clips)
}

thread_local! {
    /// The speed perturbation's resamplers, by (from, to) rate, made once on each worker.
    static RESAMPLERS: std::cell::RefCell<
        std::collections::HashMap<(u32, u32), sonograph_io::resample::StreamResampler>,
    > = std::cell::RefCell::new(std::collections::HashMap::new());
}

/// `samples` (at `rate`) played `factor` times as fast: resampled from round(rate × factor) Hz
/// to `rate` (lhotse's `Speed`), by the resampler that brings files to a spec's rate.
pub fn apply_speed(samples: Vec<f32>, rate: u32, factor: f64) -> Result<Vec<f32>, String> {
    let from = (f64::from(rate) * factor).round() as u32;
    if from == rate {
        return Ok(samples);
    }
    RESAMPLERS.with(|cache| {
        let mut cache = cache.borrow_mut();
        let resampler = match cache.entry((from, rate)) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(sonograph_io::resample::StreamResampler::new(from, rate)?)
            }
        };
        resampler.reset();
        let mut out = Vec::with_capacity(samples.len() * rate as usize / from as usize + 1);
        resampler.process(&samples, &mut out);
        resampler.finish(&mut out);
        Ok(out)
    })
}

/// `samples` with the gain, the impulse response `rir` and the noise `noise` (the clip's
/// samples from the drawn offset, at least as long as the item) mixed at the drawn SNR: the
/// noise scaled so that the mean squares of the item and the noise are `snr_db` apart
/// (lhotse's `mix`); a silent item gets no noise, its SNR being undefined.
pub fn apply_to_waveform(
    drawn: &Drawn,
    samples: &mut [f32],
    rir: Option<&[f32]>,
    noise: Option<&[f32]>,
) {
    if let Some(g) = drawn.gain_db {
        let k = 10f64.powf(g / 20.0);
        for s in samples.iter_mut() {
            *s = (f64::from(*s) * k) as f32;
        }
    }
    if let (Some(_), Some(rir)) = (drawn.rir, rir) {
        reverberate(samples, rir);
    }
    let (Some(draw), Some(noise)) = (&drawn.noise, noise) else {
        return;
    };
    let n = samples.len().min(noise.len());
    let power = |x: &[f32]| sum_of_squares(x) / x.len() as f64;
    if n == 0 {
        return;
    }
    let (signal, noise_power) = (power(samples), power(&noise[..n]));
    if signal == 0.0 || noise_power == 0.0 {
        return;
    }
    let scale = (signal / (noise_power * 10f64.powf(draw.snr_db / 10.0))).sqrt();
    for (s, &v) in samples.iter_mut().zip(noise) {
        *s = (f64::from(*s) + scale * f64::from(v)) as f32;
    }
}

/// Σ x², in f64, over four interleaved partial sums: one running sum is a chain of dependent
/// additions that the compiler may not reorder (a few % of an augmented epoch).
fn sum_of_squares<T: Copy + Into<f64>>(x: &[T]) -> f64 {
    let square = |v: T| v.into() * v.into();
    let mut acc = [0.0f64; 4];
    let mut quads = x.chunks_exact(4);
    for q in &mut quads {
        for (a, &v) in acc.iter_mut().zip(q) {
            *a += square(v);
        }
    }
    let rest: f64 = quads.remainder().iter().map(|&v| square(v)).sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + rest
}

thread_local! {
    /// The reverberation's FFT plans, made once per size on each worker thread.
    static PLANNER: std::cell::RefCell<realfft::RealFftPlanner<f64>> =
        std::cell::RefCell::new(realfft::RealFftPlanner::new());
}

/// `samples` convolved with `rir` (in f64, by FFT, overlap-add in blocks the size of the
/// response), from the response's largest value on for the item's length, scaled back to the
/// item's mean square (lhotse's `ReverbWithImpulseResponse` with `normalize_output`).
pub fn reverberate(samples: &mut [f32], rir: &[f32]) {
    let (n, m) = (samples.len(), rir.len());
    if n == 0 || m == 0 {
        return;
    }
    // Blocks of `size - m + 1` samples: each block's convolution fits one FFT of `size`. One
    // FFT the length of the whole item cost 3x as much on 20 s items.
    let size = (2 * m).next_power_of_two().max(1024);
    let block = size - m + 1;
    let (forward, inverse) = PLANNER.with(|p| {
        let mut p = p.borrow_mut();
        (p.plan_fft_forward(size), p.plan_fft_inverse(size))
    });
    let mut time = vec![0.0f64; size];
    let mut spectrum = forward.make_output_vec();
    let mut response = forward.make_output_vec();
    for (t, &v) in time.iter_mut().zip(rir) {
        *t = f64::from(v);
    }
    forward
        .process(&mut time, &mut response)
        .expect("buffers of the plan's sizes");
    let mut full = vec![0.0f64; n + m - 1];
    for start in (0..n).step_by(block) {
        let end = (start + block).min(n);
        time.fill(0.0);
        for (t, &v) in time.iter_mut().zip(&samples[start..end]) {
            *t = f64::from(v);
        }
        forward
            .process(&mut time, &mut spectrum)
            .expect("buffers of the plan's sizes");
        for (s, r) in spectrum.iter_mut().zip(&response) {
            *s *= r;
        }
        // The products of two real spectra keep DC and Nyquist real, as the inverse requires.
        inverse
            .process(&mut spectrum, &mut time)
            .expect("buffers of the plan's sizes");
        for (f, t) in full[start..].iter_mut().zip(&time[..end - start + m - 1]) {
            *f += t / size as f64;
        }
    }
    // numpy's argmax: the first of the largest values.
    let shift = rir
        .iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
            if v > best.1 {
                (i, v)
            } else {
                best
            }
        })
        .0;
    let before = sum_of_squares(samples) / n as f64;
    let out = &full[shift..shift + n];
    let after = sum_of_squares(out) / n as f64;
    let scale = if after > 0.0 {
        (before / after).sqrt()
    } else {
        1.0
    };
    for (s, v) in samples.iter_mut().zip(out) {
        *s = (v * scale) as f32;
    }
}

/// SpecAugment's grid over an item of `rows` output rows of `spec`: (frames, bands). Where the
/// spec stacks frames into a row (SeamlessM4T), a row is frames of `frame_bins` bands back to
/// back in memory, so masks cover bands and frames, never halves of rows.
pub fn mask_grid(spec: &sonograph_dsp::FeatureSpec, rows: usize) -> (usize, usize) {
    (rows * spec.stack_frames.max(1), spec.frame_bins())
}

/// The time warp and then the masks on `rows` (frames of `bins` values), NeMo's slices: a mask
/// past the end stops there.
pub fn apply_to_features(drawn: &Drawn, rows: &mut [f32], bins: usize, mask_value: f32) {
    let frames = rows.len() / bins.max(1);
    // Drawn for this item's frames, so inside them; a draw for other rows is left unapplied.
    if let Some((center, warped)) = drawn.time_warp.filter(|&(c, w)| c.max(w) < frames) {
        let (before, after) = rows[..frames * bins].split_at(center * bins);
        let warped_rows = [
            bicubic_frames(before, bins, warped),
            bicubic_frames(after, bins, frames - warped),
        ]
        .concat();
        rows[..frames * bins].copy_from_slice(&warped_rows);
    }
    for &(left, width) in &drawn.freq_masks {
        let end = (left + width).min(bins);
        for frame in rows.chunks_exact_mut(bins) {
            frame[left.min(end)..end].fill(mask_value);
        }
    }
    for &(left, width) in &drawn.time_masks {
        let (start, end) = (left.min(frames), (left + width).min(frames));
        rows[start * bins..end * bins].fill(mask_value);
    }
}

/// `rows` (frames of `bins` values) resized to `out_frames` frames along time alone, as
/// `torch.nn.functional.interpolate(x[None, None], size=(out_frames, bins), mode="bicubic",
/// align_corners=False)` computes it (torch 2.15: aten/src/ATen/native/UpSample.h, as its
/// wheel ships it, for the indices and weights): the source frame of output frame i is
/// (i + 0.5) × in/out − 0.5 in f32, not clamped below (cubic); its whole part at most in − 1
/// and its fraction t clamped to [0, 1]; Keys' cubic convolution with A = −0.75 at t + 1, t,
/// 1 − t and (1 − t) + 1 over the four frames around it, the edge frames repeated; the four
/// terms summed in order, in f32. Along the bands the size is unchanged, so torch's weights
/// there are exactly (0, 1, 0, 0). python/tests/test_torch.py checks it against torch.
fn bicubic_frames(rows: &[f32], bins: usize, out_frames: usize) -> Vec<f32> {
    const A: f32 = -0.75;
    let frames = rows.len() / bins;
    let near = |x: f32| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let far = |x: f32| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    let scale = frames as f32 / out_frames as f32;
    let mut out = Vec::with_capacity(out_frames * bins);
    for i in 0..out_frames {
        let source = scale * (i as f32 + 0.5) - 0.5;
        let whole = (source.floor() as i64).min(frames as i64 - 1);
        let t = (source - whole as f32).clamp(0.0, 1.0);
        let weights = [far(t + 1.0), near(t), near(1.0 - t), far((1.0 - t) + 1.0)];
        let tap = |k: i64| {
            let at = (whole - 1 + k).clamp(0, frames as i64 - 1) as usize * bins;
            &rows[at..at + bins]
        };
        // Band by band, each the four taps in order (vectorised across the bands).
        let [w0, w1, w2, w3] = weights;
        out.extend(
            tap(0)
                .iter()
                .zip(tap(1))
                .zip(tap(2))
                .zip(tap(3))
                .map(|(((a, b), c), d)| a * w0 + b * w1 + c * w2 + d * w3),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn augmenter(options: AugmentOptions) -> Augmenter {
        Augmenter {
            options,
            seed: 7,
            rir_clips: Vec::new(),
            noise_clips: vec![
                Clip {
                    path: "a".into(),
                    offset_s: 0.0,
                    seconds: 3.0,
                },
                Clip {
                    path: "b".into(),
                    offset_s: 1.0,
                    seconds: 0.5,
                },
            ],
            noise_cache: Arc::default(),
        }
    }

    #[test]
    fn draws_are_a_function_of_seed_epoch_and_item_only() {
        let a = augmenter(AugmentOptions {
            speed: None,
            reverb: None,
            volume_db: Some([-6.0, 6.0]),
            noise: Some(NoiseOptions {
                source: "n".into(),
                snr_db: [5.0, 20.0],
                prob: 1.0,
            }),
            spec_augment: Some(SpecAugmentOptions {
                freq_masks: 2,
                freq_width: 27,
                time_masks: 2,
                time_width: TimeWidth::Share(0.05),
                mask_value: 0.0,
                time_warp: 0,
            }),
        });
        let one = a.draw(3, 41, 1.0, Some((400, 80)));
        assert_eq!(a.draw(3, 41, 1.0, Some((400, 80))), one);
        assert_ne!(a.draw(4, 41, 1.0, Some((400, 80))), one);
        assert_ne!(a.draw(3, 42, 1.0, Some((400, 80))), one);
        let g = one.gain_db.unwrap();
        assert!((-6.0..=6.0).contains(&g));
        let noise = one.noise.unwrap();
        assert!((5.0..=20.0).contains(&noise.snr_db));
        assert!(noise.offset_s <= if noise.clip == 0 { 2.0 } else { 0.0 });
        for &(left, w) in &one.freq_masks {
            assert!(left <= 80 - 27 && w <= 27);
        }
        for &(left, w) in &one.time_masks {
            assert!(left <= 400 - 20 && w <= 20);
        }
        // Over many items the draws cover their ranges.
        let gains: Vec<f64> = (0..2000)
            .map(|i| a.draw(0, i, 1.0, None).gain_db.unwrap())
            .collect();
        let mean = gains.iter().sum::<f64>() / gains.len() as f64;
        assert!(mean.abs() < 0.3, "{mean}");
        assert!(gains.iter().any(|&g| g > 5.8) && gains.iter().any(|&g| g < -5.8));
    }

    #[test]
    fn mask_widths_are_bounded_and_any_width_draws_within_it() {
        let wide = |width: usize| AugmentOptions {
            spec_augment: Some(SpecAugmentOptions {
                freq_masks: 1,
                freq_width: 10,
                time_masks: 1,
                time_width: TimeWidth::Frames(width),
                mask_value: 0.0,
                time_warp: 0,
            }),
            ..Default::default()
        };
        let e = wide(usize::MAX).check().unwrap_err();
        assert!(e.contains("time_width"), "{e}");
        let a = augmenter(wide(MAX_MASK_WIDTH));
        a.options.check().unwrap();
        for item in 0..100 {
            let d = a.draw(0, item, 1.0, Some((50, 80)));
            let (left, width) = d.time_masks[0];
            assert!(left <= 1 && width <= MAX_MASK_WIDTH);
        }
    }

    #[test]
    fn time_warps_are_drawn_as_lhotse_draws_them_and_leave_the_masks_as_they_were() {
        let warp = |factor: usize| {
            augmenter(AugmentOptions {
                spec_augment: Some(SpecAugmentOptions {
                    freq_masks: 2,
                    freq_width: 27,
                    time_masks: 2,
                    time_width: TimeWidth::Frames(20),
                    mask_value: 0.0,
                    time_warp: factor,
                }),
                ..Default::default()
            })
        };
        let (plain, warped) = (warp(0), warp(10));
        let (mut centers, mut moves) = (Vec::new(), Vec::new());
        for item in 0..3000 {
            let d = warped.draw(1, item, 1.0, Some((40, 80)));
            // The warp's stream is its own: the masks are those of the same job without it.
            let p = plain.draw(1, item, 1.0, Some((40, 80)));
            assert_eq!(
                (&d.freq_masks, &d.time_masks),
                (&p.freq_masks, &p.time_masks)
            );
            assert_eq!(p.time_warp, None);
            if let Some((center, to)) = d.time_warp {
                assert!((11..=29).contains(&center) && to != center, "{center} {to}");
                centers.push(center);
                moves.push(to as i64 - center as i64);
            }
        }
        // numpy's randint(11, 30) and randint(c - 10, c + 11): both ends reached, and one
        // draw in 21 leaves the item as it is.
        assert_eq!(centers.iter().min(), Some(&11));
        assert_eq!(centers.iter().max(), Some(&29));
        assert_eq!(moves.iter().min(), Some(&-10));
        assert_eq!(moves.iter().max(), Some(&10));
        let unwarped = 3000 - centers.len();
        assert!((90..200).contains(&unwarped), "{unwarped}");
        // Items of 2 × 10 + 1 frames or fewer are not warped.
        assert!((0..200).all(|i| warped.draw(0, i, 1.0, Some((21, 80))).time_warp.is_none()));
        assert!((0..200).any(|i| warped.draw(0, i, 1.0, Some((22, 80))).time_warp.is_some()));
        let e = warp(MAX_MASK_WIDTH + 1).options.check().unwrap_err();
        assert!(e.contains("spec_augment.time_warp"), "{e}");
    }

    #[test]
    fn bicubic_frames_keep_the_frames_at_their_size_and_a_ramp_straight() {
        let bins = 3;
        let rows: Vec<f32> = (0..30 * bins).map(|v| (v as f32 * 0.37).sin()).collect();
        assert_eq!(bicubic_frames(&rows, bins, 30), rows);
        // The four weights sum to 1: a constant stays (Keys' A = −0.75 is not the A = −0.5
        // that would also keep a straight line; torch's output is the reference for the rest).
        let constant = vec![-3.25f32; 30 * bins];
        for out in [1, 17, 45] {
            let resized = bicubic_frames(&constant, bins, out);
            assert_eq!(resized.len(), out * bins);
            assert!(
                resized.iter().all(|v| (v + 3.25).abs() < 4e-6),
                "{out}: {resized:?}"
            );
        }
        let ramp: Vec<f32> = (0..30)
            .flat_map(|f| [f as f32, 2.0 * f as f32, -1.0])
            .collect();
        // The warp moves the boundary frame and keeps the item's length.
        let drawn = Drawn {
            time_warp: Some((10, 14)),
            ..Drawn::default()
        };
        let mut warped = ramp.clone();
        apply_to_features(&drawn, &mut warped, bins, 0.0);
        assert_eq!(warped.len(), ramp.len());
        assert!(warped[14 * bins] > 9.5 && warped[14 * bins] < 10.5);
        assert!(warped
            .chunks(bins)
            .zip(warped.chunks(bins).skip(1))
            .all(|(a, b)| a[0] <= b[0]));
        // A draw for more frames than the rows hold is not applied (and does not panic).
        let beyond = Drawn {
            time_warp: Some((28, 31)),
            ..Drawn::default()
        };
        let mut kept = ramp.clone();
        apply_to_features(&beyond, &mut kept, bins, 0.0);
        assert_eq!(kept, ramp);
    }

    /// A noise file kept decoded whole gives a draw the samples that decoding it from the
    /// drawn offset gives, bit for bit (FLAC and WAV, offsets between samples, a draw longer
    /// than what is left); a file at another rate than the items' is decoded for each draw,
    /// and so is one that is not there (the draw fails naming it).
    #[test]
    fn kept_noise_is_what_decoding_from_the_offset_gives() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data");
        for (name, rate, kept) in [
            ("speech_16000_mono_s16.flac", 16_000, true),
            ("speech_16000_mono_s16.wav", 16_000, true),
            ("speech_44100_stereo.flac", 16_000, false),
        ] {
            let path = data.join(name);
            let seconds = sonograph_io::decode_mono(&path, &DecodeOptions::default(), rate)
                .unwrap()
                .len() as f64
                / f64::from(rate);
            let mut a = augmenter(AugmentOptions::default());
            a.noise_clips = vec![Clip {
                path: path.clone(),
                offset_s: 0.25,
                seconds: seconds - 0.25,
            }];
            for (offset_s, len) in [(0.0, 8000), (0.123_456_7, 4001), (1.000_031, 100_000)] {
                let draw = NoiseDraw {
                    clip: 0,
                    offset_s,
                    snr_db: 0.0,
                };
                let got = a.noise_samples(&draw, len, rate).unwrap();
                let opts = DecodeOptions {
                    offset_s: 0.25 + offset_s,
                    duration_s: Some((len as f64 / f64::from(rate)).min(seconds - 0.25 - offset_s)),
                    ..Default::default()
                };
                let decoded = sonograph_io::decode_mono(&path, &opts, rate).unwrap();
                let want: Vec<f32> = decoded.iter().copied().cycle().take(len).collect();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert!(bits(&got) == bits(&want), "{name} at {offset_s} s");
            }
            assert_eq!(a.noise_cache.file(&path, rate).is_some(), kept, "{name}");
        }
        let mut a = augmenter(AugmentOptions::default());
        a.noise_clips[0].path = data.join("no such noise.flac");
        let draw = NoiseDraw {
            clip: 0,
            offset_s: 0.0,
            snr_db: 0.0,
        };
        let e = a.noise_samples(&draw, 100, 16_000).unwrap_err();
        assert!(e.contains("no such noise.flac"), "{e}");
    }

    #[test]
    fn noise_is_mixed_at_the_drawn_snr() {
        let samples: Vec<f32> = (0..16000).map(|i| (i as f32 * 0.01).sin()).collect();
        let noise: Vec<f32> = (0..16000)
            .map(|i| ((i * 7919) % 201) as f32 / 100.0 - 1.0)
            .collect();
        let drawn = Drawn {
            noise: Some(NoiseDraw {
                clip: 0,
                offset_s: 0.0,
                snr_db: 10.0,
            }),
            ..Default::default()
        };
        let mut mixed = samples.clone();
        apply_to_waveform(&drawn, &mut mixed, None, Some(&noise));
        let p = |x: &[f64]| x.iter().map(|v| v * v).sum::<f64>();
        let added: Vec<f64> = mixed
            .iter()
            .zip(&samples)
            .map(|(&m, &s)| f64::from(m) - f64::from(s))
            .collect();
        let clean: Vec<f64> = samples.iter().map(|&s| f64::from(s)).collect();
        let snr = 10.0 * (p(&clean) / p(&added)).log10();
        assert!((snr - 10.0).abs() < 1e-3, "{snr}");
    }

    /// Rows of two frames (SeamlessM4T): a band mask covers that band in both frames of every
    /// row, a time mask whole frames, on the grid `mask_grid` gives.
    #[test]
    fn masks_on_stacked_rows_cover_bands_and_frames() {
        let spec = sonograph_dsp::FeatureSpec::seamless_m4t();
        let (frames, bands) = mask_grid(&spec, 3);
        assert_eq!((frames, bands), (6, 80));
        let drawn = Drawn {
            freq_masks: vec![(70, 20)],
            time_masks: vec![(3, 1)],
            ..Drawn::default()
        };
        let mut rows = vec![1.0f32; 3 * 160];
        apply_to_features(&drawn, &mut rows, bands, 0.0);
        for (i, &v) in rows.iter().enumerate() {
            let (frame, band) = (i / 80, i % 80);
            let masked = band >= 70 || frame == 3;
            assert_eq!(v == 0.0, masked, "frame {frame} band {band}");
        }
    }
}

#[cfg(test)]
mod reverb_tests {
    use super::*;

    #[test]
    fn reverberation_is_the_direct_convolution_shifted_and_rescaled() {
        // Five blocks of the overlap-add (1,018 samples each for a short response).
        let x: Vec<f32> = (0..5000)
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let h: Vec<f32> = vec![0.1, 0.3, 1.0, -0.5, 0.25, 0.0, 0.1];
        let mut y = x.clone();
        reverberate(&mut y, &h);
        // By hand: the full convolution from h's peak (index 2) on, to x's mean square.
        let full: Vec<f64> = (0..x.len() + h.len() - 1)
            .map(|k| {
                (0..h.len())
                    .filter(|&j| k >= j && k - j < x.len())
                    .map(|j| f64::from(h[j]) * f64::from(x[k - j]))
                    .sum()
            })
            .collect();
        let cut = &full[2..2 + x.len()];
        let p = |v: &mut dyn Iterator<Item = f64>| v.map(|a| a * a).sum::<f64>();
        let scale = (p(&mut x.iter().map(|&v| f64::from(v))) / p(&mut cut.iter().copied())).sqrt();
        for (got, want) in y.iter().zip(cut) {
            assert!(
                (f64::from(*got) - want * scale).abs() < 1e-6,
                "{got} {want}"
            );
        }
    }

    #[test]
    fn speed_perturbation_changes_the_length_by_the_factor() {
        let x: Vec<f32> = (0..16000).map(|i| (i as f32 * 0.01).sin()).collect();
        let once = apply_speed(x.clone(), 16000, 1.1).unwrap();
        assert_eq!(once.len(), 14546);
        // The resampler is kept for the next item, and starts it afresh.
        assert_eq!(apply_speed(x.clone(), 16000, 1.1).unwrap(), once);
        let mut fresh = sonograph_io::resample::StreamResampler::new(17600, 16000).unwrap();
        let mut expect = Vec::new();
        fresh.process(&x, &mut expect);
        fresh.finish(&mut expect);
        assert_eq!(once, expect);
        assert_eq!(apply_speed(x.clone(), 16000, 0.9).unwrap().len(), 17778);
        assert_eq!(apply_speed(x, 16000, 1.0).unwrap().len(), 16000);
    }
}
