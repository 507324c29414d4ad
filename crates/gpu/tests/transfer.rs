//! The transfer path (crates/gpu/src/transfer.rs): a batch sent through the staging ring in
//! many chunks gives the rows it gives in one, bit for bit, for specs that copy the items as
//! they are and for specs that scale and pre-emphasise them, whole items and pieces alike; and
//! the ring's staging buffers are made once and reused by every later batch of the same size
//! (no staging allocation per batch). Needs a wgpu adapter (lavapipe counts); without one it
//! skips (a failure under `SONOGRAPH_REQUIRE_GPU=1`).

use sonograph_dsp::span::Span;
use sonograph_dsp::{AudioBatch, DeviceError, Extractor, FeatureBatch, FeatureSpec, Precision};
use sonograph_gpu::{GpuBackend, GpuOptions};

#[path = "shared/pieces.rs"]
mod pieces;
#[path = "../../../tests/shared/skip.rs"]
mod skip;

fn gpu(spec: &FeatureSpec) -> Option<GpuBackend> {
    let options = GpuOptions {
        precision: Precision::F32,
        ..Default::default()
    };
    gpu_with(spec, &options)
}

fn gpu_with(spec: &FeatureSpec, options: &GpuOptions) -> Option<GpuBackend> {
    match GpuBackend::new(spec, options) {
        Ok(g) => Some(g),
        Err(DeviceError::Unavailable(why)) => {
            skip::skip(&format!(
                "no wgpu adapter (install mesa-vulkan-drivers): {why}"
            ));
            None
        }
        Err(e) => panic!("the GPU backend failed to start: {e}"),
    }
}

/// Clips of different lengths (odd ones too: items start 8-byte aligned in the staging
/// memory), a piece of a long item, and an item the spec refuses (NaN) in the middle.
fn batch(spec: &FeatureSpec) -> (AudioBatch, Vec<Vec<f32>>) {
    let clips: Vec<Vec<f32>> = (0..9)
        .map(|k| {
            (0..4001 + 1733 * k)
                .map(|i| ((i * (k + 3)) as f32 * 0.0009).sin() * 0.3 + 0.01)
                .collect()
        })
        .collect();
    let mut batch = AudioBatch::new();
    for (k, c) in clips.iter().enumerate() {
        if k == 4 {
            batch.push(&[0.1, f32::NAN, 0.2]);
        }
        batch.push(c);
    }
    // A later piece of a long item: its window from sample 16,000 of a 40,000-sample signal.
    let long: Vec<f32> = (0..40_000)
        .map(|i| (i as f32 * 0.003).cos() * 0.2)
        .collect();
    let first_frame = 90;
    let start = (spec.frame_start(first_frame).max(1) - 1) as usize;
    let frames = 40;
    let end = (spec.frame_start(first_frame + frames - 1) + spec.n_fft as isize) as usize;
    let span = Span {
        sample_start: start,
        signal_len: long.len(),
        first_frame,
        frames,
        last: false,
    };
    batch.push_piece(&long[start..end.min(long.len())], Some(span));
    (batch, clips)
}

fn rows(gpu: &mut GpuBackend, batch: &AudioBatch) -> FeatureBatch {
    let mut out = FeatureBatch::new(gpu.spec().n_bins());
    gpu.extract_batch(batch, &mut out).unwrap();
    assert_eq!(out.len(), batch.len());
    out
}

/// The CPU backend's rows for `batch` (one thread).
fn cpu_rows(spec: &FeatureSpec, precision: Precision, batch: &AudioBatch) -> FeatureBatch {
    let mut cpu = sonograph_dsp::CpuBackend::with_threads(spec, precision, 1).unwrap();
    let mut out = FeatureBatch::new(spec.n_bins());
    cpu.extract_batch(batch, &mut out).unwrap();
    out
}

/// `items` of the GPU's rows have the CPU's frames and rows within 1e-3.
fn assert_close(
    on_gpu: &FeatureBatch,
    on_cpu: &FeatureBatch,
    items: impl IntoIterator<Item = usize>,
) {
    for i in items {
        let ((fg, rg), (fc, rc)) = (on_gpu.item(i).unwrap(), on_cpu.item(i).unwrap());
        assert_eq!(fg, fc, "item {i}'s frames");
        let worst = rg
            .iter()
            .zip(rc)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            worst < 1e-3,
            "item {i}: GPU rows differ from the CPU's by {worst}"
        );
    }
}

fn same(a: &FeatureBatch, b: &FeatureBatch, what: &str) {
    assert_eq!(a.len(), b.len());
    for i in 0..a.len() {
        match (a.item(i), b.item(i)) {
            (Ok((fa, ra)), Ok((fb, rb))) => {
                assert_eq!(fa, fb, "{what}: item {i}'s frames");
                assert!(ra == rb, "{what}: item {i}'s rows differ");
            }
            (Err(ea), Err(eb)) => assert_eq!(ea.to_string(), eb.to_string()),
            (x, y) => panic!("{what}: item {i}: {x:?} vs {y:?}"),
        }
    }
}

#[test]
fn many_chunks_through_the_ring_give_the_rows_of_one() {
    // Whisper copies the samples as they are; Kaldi scales them and pre-emphasises each
    // frame; NeMo pre-emphasises the signal (a piece's first sample is context).
    for spec in [
        FeatureSpec::whisper(80),
        FeatureSpec::kaldi(80),
        FeatureSpec::nemo(80),
    ] {
        let Some(mut one) = gpu(&spec) else { return };
        let (batch, _) = batch(&spec);
        let whole = rows(&mut one, &batch);
        assert_eq!(
            one.transfer_stats().unwrap().chunks,
            1,
            "one chunk by default"
        );
        let mut many = gpu(&spec).expect("opened above");
        // An item a chunk: more chunks than the ring has slots, so each slot is reused
        // within the batch.
        many.set_chunk_bytes(4);
        let chunked = rows(&mut many, &batch);
        let stats = many.transfer_stats().unwrap();
        // The NaN item is sent too: its samples are scanned as they are copied.
        assert_eq!(stats.chunks, batch.len() as u64, "{stats:?}");
        same(&whole, &chunked, "one chunk against an item per chunk");
        assert!(whole.item(4).is_err(), "the NaN item fails alone");
    }
}

#[test]
fn the_ring_is_made_once_and_reused_batch_after_batch() {
    let spec = FeatureSpec::whisper(80);
    let Some(mut g) = gpu(&spec) else { return };
    g.set_chunk_bytes(64 << 10);
    let (batch, _) = batch(&spec);
    let first = rows(&mut g, &batch);
    let after_one = g.transfer_stats().unwrap();
    assert!(after_one.chunks >= 4, "{after_one:?}");
    assert!(after_one.staging_allocations > 0);
    for _ in 0..5 {
        same(&first, &rows(&mut g, &batch), "a later batch");
    }
    let after_six = g.transfer_stats().unwrap();
    assert_eq!(
        after_six.staging_allocations, after_one.staging_allocations,
        "no staging memory was made after the first batch: {after_six:?}"
    );
    assert_eq!(after_six.staging_bytes, after_one.staging_bytes);
    assert_eq!(after_six.chunks, 6 * after_one.chunks);
    // Where the device has timestamp queries (lavapipe has), every chunk's kernels are timed.
    if after_six.timed_chunks > 0 {
        assert_eq!(after_six.timed_chunks, after_six.chunks);
        assert!(after_six.kernel_seconds > 0.0, "{after_six:?}");
    }
    // A smaller batch fits in what is there.
    let small = AudioBatch::from_items([vec![0.1f32; 8000].as_slice()]);
    rows(&mut g, &small);
    assert_eq!(
        g.transfer_stats().unwrap().staging_allocations,
        after_one.staging_allocations
    );
}

#[test]
fn an_item_copied_in_several_pieces_gives_the_cpu_rows() {
    // Over 2^19 samples and odd: the host copies it into the staging memory in three pieces
    // on different threads (FILL_PIECE_SAMPLES, 2^18). Each piece is its own tone, so a piece
    // written in the wrong place or not at all moves whole bands, far beyond f32 rounding.
    // Whisper's pieces are the samples as they are; NeMo's are pre-emphasised and Kaldi's
    // scaled on the way, each piece from the sample before it (in f64, where both presets
    // hold the CPU's rows within 1e-4: see parity.rs).
    let piece = 1usize << 18;
    let item: Vec<f32> = (0..2 * piece + 12_345)
        .map(|i| {
            let tone = [0.011f32, 0.047, 0.13][i / piece];
            (i as f32 * tone).sin() * 0.25
        })
        .collect();
    for (spec, precision) in [
        (FeatureSpec::whisper(80), Precision::F32),
        (FeatureSpec::nemo(80), Precision::F64),
        (FeatureSpec::kaldi(80), Precision::F64),
    ] {
        let mut batch = AudioBatch::from_items([item.as_slice(), &item[..5001]]);
        // The item's last piece from frame 10 on: its window's first sample is context (the
        // sample before), and the rest still spans three pieces.
        let first_frame = 10;
        let start = (spec.frame_start(first_frame) - 1) as usize;
        let span = Span {
            sample_start: start,
            signal_len: item.len(),
            first_frame,
            frames: spec.n_raw_frames(item.len()) - first_frame,
            last: true,
        };
        batch.push_piece(&item[start..], Some(span));
        let options = GpuOptions {
            precision,
            ..Default::default()
        };
        let Some(mut g) = gpu_with(&spec, &options) else {
            return;
        };
        if g.precision() != precision {
            // An adapter without f64 in shaders computes in f32, where NeMo's and Kaldi's
            // rows need not hold 1e-3 against the CPU (parity.rs says which do).
            skip::skip(&format!(
                "{}: no f64 in this adapter's shaders",
                spec.spec_id()
            ));
            continue;
        }
        let on_gpu = rows(&mut g, &batch);
        let on_cpu = cpu_rows(&spec, precision, &batch);
        assert_close(&on_gpu, &on_cpu, 0..batch.len());
    }
}

#[test]
fn an_item_with_a_non_finite_sample_fails_alone_naming_the_cpus_sample() {
    // The fill scans each piece of an item for NaN and infinity as it copies it: the error
    // must name the item's first non-finite sample, as the CPU's check does, wherever it
    // lies — in a later piece with another bad sample in a piece after it; in the context
    // sample before a later piece's window, with NaN also inside the window.
    let spec = FeatureSpec::whisper(80);
    let Some(mut g) = gpu(&spec) else { return };
    let piece = 1usize << 18;
    let clean: Vec<f32> = (0..2 * piece + 777)
        .map(|i| (i as f32 * 0.013).sin() * 0.2)
        .collect();
    let mut late = clean.clone();
    late[piece + 5] = f32::NAN;
    late[2 * piece + 3] = f32::INFINITY;
    let mut batch = AudioBatch::new();
    batch.push(&clean);
    batch.push(&late);
    batch.push(&clean[..9000]);
    // A later piece of a long signal whose context sample (its window's first) is NaN.
    let first_frame = 40;
    let start = (spec.frame_start(first_frame) - 1) as usize;
    let frames = 20;
    let end = (spec.frame_start(first_frame + frames - 1) + spec.n_fft as isize) as usize;
    let mut window = clean[start..end].to_vec();
    window[0] = f32::NAN;
    window[7] = f32::NEG_INFINITY;
    batch.push_piece(
        &window,
        Some(Span {
            sample_start: start,
            signal_len: clean.len(),
            first_frame,
            frames,
            last: false,
        }),
    );
    let on_gpu = rows(&mut g, &batch);
    let on_cpu = cpu_rows(&spec, Precision::F32, &batch);
    for i in [1, 3] {
        let (eg, ec) = (on_gpu.item(i).unwrap_err(), on_cpu.item(i).unwrap_err());
        assert_eq!(eg.to_string(), ec.to_string(), "item {i}");
    }
    assert!(
        on_cpu
            .item(1)
            .unwrap_err()
            .to_string()
            .contains(&(piece + 5).to_string()),
        "the CPU names the first bad sample: {:?}",
        on_cpu.item(1)
    );
    assert!(
        on_cpu
            .item(3)
            .unwrap_err()
            .to_string()
            .contains(&start.to_string()),
        "the context sample: {:?}",
        on_cpu.item(3)
    );
    assert_close(&on_gpu, &on_cpu, [0, 2]);
}

/// A fixed-length spec (`whisper-hf`) pads or cuts each item on the GPU as the CPU does: a
/// short item, a long one, and a voice segment (an item given with its whole span) all give
/// 3,000 frames of the CPU's rows; a piece of an item and an empty item are refused alike.
#[test]
fn fixed_length_items_are_padded_or_cut_as_on_the_cpu() {
    let spec = FeatureSpec::preset("whisper-hf").unwrap();
    let Some(mut g) = gpu(&spec) else { return };
    let tone = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|i| (0.4 * (i as f64 * 0.05).sin()) as f32)
            .collect()
    };
    let (short, long, segment) = (tone(16_000), tone(500_000), tone(40_000));
    let mut batch = AudioBatch::from_items([short.as_slice(), long.as_slice()]);
    batch.push_piece(&segment, Some(Span::whole(&spec, segment.len())));
    let piece = Span {
        sample_start: 0,
        signal_len: 80_000,
        first_frame: 0,
        frames: 100,
        last: false,
    };
    batch.push_piece(&segment, Some(piece));
    batch.push(&[]);
    let (on_gpu, on_cpu) = (
        rows(&mut g, &batch),
        cpu_rows(&spec, Precision::F32, &batch),
    );
    for i in 0..3 {
        assert_eq!(on_gpu.item(i).unwrap().0, 3000, "item {i}");
    }
    assert_close(&on_gpu, &on_cpu, 0..3);
    for i in 3..5 {
        let (g, c) = (on_gpu.item(i).unwrap_err(), on_cpu.item(i).unwrap_err());
        assert_eq!(g.to_string(), c.to_string(), "item {i}");
    }
}

/// librosa's mel at n_fft 512 (hop 128): a 512-point spec beside Whisper's 400.
fn librosa_512() -> FeatureSpec {
    let mut spec = FeatureSpec::librosa_mel();
    (spec.n_fft, spec.win_length, spec.hop_length) = (512, 512, 128);
    spec
}

/// `x` rounded onto the 16-bit grid, as a 16-bit WAV decodes.
fn on_grid(x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&v| sonograph_dsp::pcm16::from_pcm16((v * 32_768.0).round() as i16))
        .collect()
}

#[test]
fn sixteen_bit_items_go_as_half_the_bytes_and_give_the_same_rows() {
    // Items on the 16-bit grid (odd lengths; one over 2^18 samples, filled in two pieces of
    // which the last is odd; a later piece of a long item) go to the device as their 16-bit
    // integers. The kernels turn each back into the same f32, so the rows are the f32 upload's,
    // bit for bit, and the CPU's; the samples' bytes are half. Whisper (fixed 30 s items:
    // padded with zeros, still on the grid) and a 512-point librosa mel send samples as they
    // are; Kaldi scales them by 32768 (the kernels do, exactly); the kernels pre-emphasise
    // NeMo's signal as they read it (a later piece's context sample is sent too). A spec that
    // scales its input and pre-emphasises the signal has both done on the host, and its chunks
    // go as f32 whatever the items are.
    let long = on_grid(
        &(0..(1usize << 18) + 4001)
            .map(|i| (i as f32 * 0.013).sin() * 0.4)
            .collect::<Vec<_>>(),
    );
    let librosa_512 = librosa_512();
    let mut scaled_nemo = FeatureSpec::nemo(80);
    scaled_nemo.input_scale = 2.0;
    for spec in [
        FeatureSpec::whisper(80),
        librosa_512,
        FeatureSpec::kaldi(80),
        FeatureSpec::nemo(80),
        scaled_nemo.clone(),
    ] {
        let (plain, _) = batch(&spec);
        let mut f32_batch = AudioBatch::new();
        for i in 0..plain.len() {
            let item = on_grid(plain.item(i));
            if item.iter().all(|v| v.is_finite()) {
                f32_batch.push_piece(&item, plain.span(i).copied());
            }
        }
        if !spec.is_fixed_length() {
            f32_batch.push(&long);
        }
        let mut pcm16_batch = f32_batch.clone();
        pcm16_batch.find_pcm16();
        assert!((0..pcm16_batch.len()).all(|i| pcm16_batch.is_pcm16(i)));
        for chunk_bytes in [32 << 20, 64 << 10] {
            let Some(mut as_f32) = gpu(&spec) else { return };
            let mut as_pcm16 = gpu(&spec).expect("opened above");
            as_f32.set_chunk_bytes(chunk_bytes);
            as_pcm16.set_chunk_bytes(chunk_bytes);
            let want = rows(&mut as_f32, &f32_batch);
            let got = rows(&mut as_pcm16, &pcm16_batch);
            let (a, b) = (
                as_f32.transfer_stats().unwrap(),
                as_pcm16.transfer_stats().unwrap(),
            );
            assert_eq!(a.pcm16_chunks, 0, "{a:?}");
            assert_eq!(a.chunks, b.chunks);
            if spec == scaled_nemo {
                assert_eq!(b.pcm16_chunks, 0, "pre-emphasised on the host: {b:?}");
                assert_eq!(b.sample_bytes_sent, a.sample_bytes_sent);
            } else {
                assert_eq!(b.pcm16_chunks, b.chunks, "{b:?}");
                // Half, but for each item's alignment (4 samples at most).
                let slack = 8 * pcm16_batch.len() as u64;
                assert!(
                    2 * b.sample_bytes_sent <= a.sample_bytes_sent + 2 * slack
                        && 2 * b.sample_bytes_sent + 2 * slack >= a.sample_bytes_sent,
                    "{} bytes as 16-bit, {} as f32",
                    b.sample_bytes_sent,
                    a.sample_bytes_sent
                );
            }
            same(
                &want,
                &got,
                &format!("{}: 16-bit against f32", spec.spec_id()),
            );
            // Against the CPU where f32 holds 1e-3 (Whisper's scaled log10); the f32 upload
            // of the others is held to the CPU's rows in parity.rs.
            if spec.spec_id() == FeatureSpec::whisper(80).spec_id() {
                let cpu = cpu_rows(&spec, Precision::F32, &pcm16_batch);
                assert_close(&got, &cpu, 0..got.len());
            }
        }
    }
}

#[test]
fn a_chunk_goes_as_16_bit_only_when_all_its_items_are_and_a_false_mark_fails_its_item() {
    let spec = FeatureSpec::whisper(80);
    let Some(mut g) = gpu(&spec) else { return };
    let tone = |n: usize, f: f32| {
        on_grid(
            &(0..n)
                .map(|i| (i as f32 * f).sin() * 0.3)
                .collect::<Vec<_>>(),
        )
    };
    let (a, b) = (tone(16_001, 0.02), tone(9_999, 0.05));
    let off_grid: Vec<f32> = b.iter().map(|v| v + 1e-6).collect();
    // One chunk: an f32 item in it sends the whole chunk as f32.
    let mut mixed = AudioBatch::new();
    mixed.push_known_piece(&a, None, true);
    mixed.push_known_piece(&off_grid, None, false);
    let one = rows(&mut g, &mixed);
    let stats = g.transfer_stats().unwrap();
    assert_eq!((stats.chunks, stats.pcm16_chunks), (1, 0), "{stats:?}");
    assert_close(&one, &cpu_rows(&spec, Precision::F32, &mixed), 0..2);
    // A chunk an item: the 16-bit one goes as 16-bit, the other as f32.
    g.set_chunk_bytes(4);
    rows(&mut g, &mixed);
    let after = g.transfer_stats().unwrap();
    assert_eq!(
        (after.chunks - stats.chunks, after.pcm16_chunks),
        (2, 1),
        "{after:?}"
    );
    // An item marked 16-bit that is not fails alone, naming its first sample off the grid;
    // its neighbours in the chunk are computed.
    g.set_chunk_bytes(32 << 20);
    let mut lying = AudioBatch::new();
    lying.push_known_piece(&a, None, true);
    lying.push_known_piece(&off_grid, None, true);
    lying.push_known_piece(&b, None, true);
    let out = rows(&mut g, &lying);
    let first_off = off_grid
        .iter()
        .position(|v| (v * 32_768.0).fract() != 0.0)
        .unwrap();
    assert_eq!(
        out.item(1).unwrap_err().to_string(),
        format!("sample {first_off} is not 16-bit PCM, though its batch said the item was")
    );
    let cpu = cpu_rows(&spec, Precision::F32, &lying);
    assert_close(&out, &cpu, [0, 2]);
}

/// A batch of whole items and pieces of one long item, the last piece included (Whisper drops
/// its last frame there, and only there), on the 16-bit grid where `pcm16`.
fn whole_items_and_every_piece(spec: &FeatureSpec, pcm16: bool) -> AudioBatch {
    let (plain, _) = batch(spec);
    let round = |x: &[f32]| if pcm16 { on_grid(x) } else { x.to_vec() };
    let mut out = AudioBatch::new();
    for i in 0..plain.len() {
        out.push_piece(&round(plain.item(i)), plain.span(i).copied());
    }
    if !spec.is_fixed_length() {
        let long = round(
            &(0..50_000)
                .map(|i| ((i as f32 * 0.0021).sin() * 0.3) * (1.0 + (i as f32 * 1e-4).cos()))
                .collect::<Vec<_>>(),
        );
        assert!(pieces::push_every_piece(&mut out, spec, &long, 61) > 2);
    }
    if pcm16 {
        out.find_pcm16();
    }
    out
}

/// `a` and `b` hold the same items with the same rows, bit for bit (`same` compares values,
/// for which -0 equals 0).
fn same_bits(a: &FeatureBatch, b: &FeatureBatch, what: &str) {
    same(a, b, what);
    for i in 0..a.len() {
        if let (Ok((_, ra)), Ok((_, rb))) = (a.item(i), b.item(i)) {
            let differ = ra
                .iter()
                .zip(rb)
                .position(|(x, y)| x.to_bits() != y.to_bits());
            assert_eq!(differ, None, "{what}: item {i}'s rows differ in their bits");
        }
    }
}

/// `a` and `b` hold the same items, and their rows differ by at most `ulps` units in the last
/// place of f32 (`b`'s), or by 1e-6 near zero (a last-bit difference in a mean is absolute).
fn within_ulps(a: &FeatureBatch, b: &FeatureBatch, ulps: f32, what: &str) {
    assert_eq!(a.len(), b.len());
    for i in 0..a.len() {
        match (a.item(i), b.item(i)) {
            (Ok((fa, ra)), Ok((fb, rb))) => {
                assert_eq!(fa, fb, "{what}: item {i}'s frames");
                for (k, (x, y)) in ra.iter().zip(rb).enumerate() {
                    let ulp = f32::EPSILON * y.abs();
                    assert!(
                        (x - y).abs() <= (ulps * ulp).max(1e-6),
                        "{what}: item {i}, value {k}: {x} against {y}"
                    );
                }
            }
            (Err(ea), Err(eb)) => assert_eq!(ea.to_string(), eb.to_string()),
            (x, y) => panic!("{what}: item {i}: {x:?} vs {y:?}"),
        }
    }
}

#[test]
fn whole_row_steps_on_the_device_give_the_hosts_rows() {
    // Whisper's max - 8 clamp and (x + 4) / 4, librosa's top_db (max - 80 dB) and NeMo's
    // per-feature normalisation run on the device after the mel kernel
    // (kernels/item_steps.wgsl): each item's rows, and each piece of a long item's as rows of
    // their own, with the last frame that Whisper drops left out of the maximum. They must be
    // the rows the host's finishing makes of the same device rows (`item_steps_on_host`), bit
    // for bit for the clamp and the affine, and for NeMo to the device's f64 sqrt and division
    // (the sums are the host's, in its lane order): in one chunk and an item a chunk, from f32 and
    // from 16-bit samples, through the fused kernel and the three passes; and the CPU's rows.
    use sonograph_gpu::plan::device_item_steps;
    let librosa_512 = librosa_512();
    // Whisper's affine, but with a divisor that is not a power of two: the host keeps it.
    let mut odd_affine = FeatureSpec::whisper(80);
    odd_affine.affine = Some(sonograph_dsp::spec::Affine { add: 4.0, div: 3.0 });
    let (f32, f64) = (Precision::F32, Precision::F64);
    assert_eq!(device_item_steps(&odd_affine, f32), None);
    assert_eq!(device_item_steps(&FeatureSpec::kaldi(80), f64), None);
    // NeMo's sums need f64; speech2text's deviation may be zero.
    assert_eq!(device_item_steps(&FeatureSpec::nemo(80), f32), None);
    let speech2text = FeatureSpec::preset("speech2text").unwrap();
    assert_eq!(device_item_steps(&speech2text, f64), None);
    // A guard that lets ln 0 through: an item of only -inf, whose floor the host takes as -inf.
    let mut unguarded = FeatureSpec::whisper(80);
    unguarded.log_guard = sonograph_dsp::spec::LogGuard::Clamp(0.0);
    assert_eq!(device_item_steps(&unguarded, f32), None);
    for (spec, precision, on_device) in [
        (FeatureSpec::whisper(80), f32, true),
        (FeatureSpec::whisper(128), f32, true),
        (FeatureSpec::whisper_hf(80), f32, true),
        (librosa_512, f32, true),
        (FeatureSpec::nemo(80), f64, true),
        (odd_affine, f32, false),
    ] {
        assert_eq!(device_item_steps(&spec, precision).is_some(), on_device);
        let configs = [
            (false, false, 32 << 20),
            (false, false, 4),
            (true, false, 64 << 10),
            (false, true, 32 << 20),
        ];
        // The three passes end in the same mel rows as the fused kernel: one spec takes them
        // (lavapipe's direct DFT is slow, in f64 above all).
        let takes = if spec == FeatureSpec::whisper(80) {
            4
        } else {
            3
        };
        for (pcm16, force_dft, chunk_bytes) in configs.into_iter().take(takes) {
            let batch = whole_items_and_every_piece(&spec, pcm16);
            let options = |item_steps_on_host| GpuOptions {
                precision,
                force_dft,
                item_steps_on_host,
                ..Default::default()
            };
            let Some(mut device) = gpu_with(&spec, &options(false)) else {
                return;
            };
            if device.precision() != precision {
                // No f64 in this adapter's shaders: NeMo's steps stay on the host.
                continue;
            }
            // (Not by SONOGRAPH_GPU_ITEM_STEPS=host, which would compare the host with itself.)
            assert_eq!(
                device.item_steps_on_device(),
                on_device,
                "{}",
                spec.spec_id()
            );
            let mut host = gpu_with(&spec, &options(true)).expect("opened above");
            assert!(!host.item_steps_on_device());
            device.set_chunk_bytes(chunk_bytes);
            host.set_chunk_bytes(chunk_bytes);
            let (got, want) = (rows(&mut device, &batch), rows(&mut host, &batch));
            if pcm16 {
                let sent = device.transfer_stats().unwrap();
                assert!(sent.pcm16_chunks > 0, "{}: {sent:?}", spec.spec_id());
            }
            let what = format!(
                "{} (steps on the device: {on_device}; 16-bit {pcm16}, dft {force_dft}, \
                 chunks of {chunk_bytes} bytes)",
                spec.spec_id()
            );
            if spec.normalize == sonograph_dsp::spec::Normalize::None {
                same_bits(&got, &want, &what);
            } else {
                within_ulps(&got, &want, 2.0, &what);
            }
            // (`same` holds the failures to the host's: the NaN item, a piece of a fixed-length
            // spec's item.)
            let ok = (0..got.len()).filter(|&i| got.item(i).is_ok()).count();
            assert!(
                ok + 2 >= got.len() && ok >= 9,
                "{what}: {ok} of {} items",
                got.len()
            );
            // Against the CPU where f32 holds 1e-3 (Whisper's scaled log10; librosa's dB are
            // held to the CPU's in parity.rs, in f64).
            if spec.log == sonograph_dsp::spec::LogKind::Log10 {
                let cpu = cpu_rows(&spec, Precision::F32, &batch);
                let ok = (0..got.len()).filter(|&i| got.item(i).is_ok());
                assert_close(&got, &cpu, ok);
            }
        }
    }
}

/// `rows` as a writer storing f16 stores them (the `half` crate's rounding), widened back.
fn as_stored_in_f16(rows: &FeatureBatch) -> FeatureBatch {
    let mut out = FeatureBatch::new(rows.bins());
    for i in 0..rows.len() {
        match rows.item(i) {
            Ok((frames, r)) => out.push_owned(
                frames,
                r.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect(),
            ),
            Err(e) => out.push_error(e.clone()),
        }
    }
    out
}

/// Items of a tone from near-silence to far over full scale (1e-7 to 100, exponentially).
fn silence_to_overload(spec: &FeatureSpec) -> AudioBatch {
    let mut batch = AudioBatch::new();
    for k in 0..3 {
        let n = 12_001 + 3_331 * k;
        let item: Vec<f32> = (0..n)
            .map(|i| {
                let level = 1e-7f32 * 1e9f32.powf(i as f32 / n as f32);
                (i as f32 * (0.05 + 0.02 * k as f32)).sin() * level
            })
            .collect();
        batch.push(&item);
    }
    let others = whole_items_and_every_piece(spec, false);
    for i in 0..others.len() {
        batch.push_piece(others.item(i), others.span(i).copied());
    }
    batch
}

#[test]
fn f16_rows_are_the_f32_rows_rounded_as_the_writer_rounds_them() {
    // A job that stores f16 (`--dtype f16`) with nothing reading its rows before the writer
    // has the device send them as f16 (kernels/f16_rows.wgsl), in half the bytes. Each value
    // must be what the writer would store of the device's f32 row (`half`'s rounding: to
    // nearest, ties to even), bit for bit: Whisper (its clamp and affine on the device),
    // librosa's mel at 512 points, Kaldi's 23 bands (odd: rows start inside a word), NeMo in
    // f64 (normalised on the device) and mel power without a log (from 1e-7 to 100 times full
    // scale, so that every case of the rounding is met: infinity past 65504, f16 subnormals,
    // underflow to zero, ties); in one chunk and an item a chunk (words across two items), with
    // pieces of a long item and an item refused in the middle. Specs whose rows the host still
    // works on (MFCC's DCT, NeMo normalised on the host in f32) refuse, and give f32 rows.
    use sonograph_dsp::spec::{LogKind, OutputKind};
    let mut power = FeatureSpec::whisper(80);
    (power.log, power.dynamic_range, power.affine) = (LogKind::None, None, None);
    power.output = OutputKind::Mel;
    let mut mfcc = librosa_512();
    mfcc.output = OutputKind::Mfcc;
    let (f32, f64) = (Precision::F32, Precision::F64);
    let mut cases = [0usize; 4];
    for (spec, precision, takes_f16) in [
        (FeatureSpec::whisper(80), f32, true),
        (librosa_512(), f32, true),
        (FeatureSpec::kaldi(23), f32, true),
        (FeatureSpec::nemo(80), f64, true),
        (power.clone(), f32, true),
        (FeatureSpec::nemo(80), f32, false),
        (mfcc, f32, false),
    ] {
        let options = GpuOptions {
            precision,
            ..Default::default()
        };
        let batch = if spec == power {
            silence_to_overload(&spec)
        } else {
            whole_items_and_every_piece(&spec, false)
        };
        for chunk_bytes in [32 << 20, 4] {
            let Some(mut as_f32) = gpu_with(&spec, &options) else {
                return;
            };
            if as_f32.precision() != precision {
                // No f64 in this adapter's shaders: NeMo is normalised on the host.
                continue;
            }
            let mut as_f16 = gpu_with(&spec, &options).expect("opened above");
            let what = format!(
                "{} ({precision:?}, chunks of {chunk_bytes} bytes)",
                spec.spec_id()
            );
            assert_eq!(as_f16.set_rows_stored_as_f16(true), takes_f16, "{what}");
            as_f32.set_chunk_bytes(chunk_bytes);
            as_f16.set_chunk_bytes(chunk_bytes);
            let want = rows(&mut as_f32, &batch);
            let got = rows(&mut as_f16, &batch);
            let (a, b) = (
                as_f32.transfer_stats().unwrap(),
                as_f16.transfer_stats().unwrap(),
            );
            assert_eq!((a.f16_chunks, a.chunks), (0, b.chunks), "{what}: {a:?}");
            if !takes_f16 {
                assert_eq!(b.f16_chunks, 0, "{what}: {b:?}");
                same_bits(&want, &got, &what);
                continue;
            }
            assert_eq!(b.f16_chunks, b.chunks, "{what}: {b:?}");
            // Half, but for each chunk's last word.
            assert!(
                2 * b.row_bytes_read >= a.row_bytes_read
                    && 2 * b.row_bytes_read <= a.row_bytes_read + 4 * b.chunks,
                "{what}: {} bytes of rows as f16, {} as f32",
                b.row_bytes_read,
                a.row_bytes_read
            );
            same_bits(&as_stored_in_f16(&want), &got, &what);
            if chunk_bytes == 4 && spec == FeatureSpec::whisper(80) {
                // Turned off again, the same backend gives f32 rows.
                assert!(!as_f16.set_rows_stored_as_f16(false));
                same_bits(
                    &want,
                    &rows(&mut as_f16, &batch),
                    &format!("{what}, f16 off"),
                );
            }
            for i in 0..want.len() {
                let Ok((_, r)) = want.item(i) else { continue };
                for &v in r {
                    let h = half::f16::from_f32(v);
                    let low_bits = v.to_bits() & 0x1fff;
                    if h.is_infinite() && v.is_finite() {
                        cases[0] += 1;
                    } else if h.classify() == std::num::FpCategory::Subnormal {
                        cases[1] += 1;
                    } else if v != 0.0 && h.to_f32() == 0.0 {
                        cases[2] += 1;
                    } else if h.is_normal() && low_bits == 0x1000 {
                        cases[3] += 1;
                    }
                }
            }
        }
    }
    let [overflow, subnormal, underflow, ties] = cases;
    assert!(
        overflow > 0 && subnormal > 0 && underflow > 0 && ties > 0,
        "values that overflow f16: {overflow}, f16 subnormals: {subnormal}, underflow to \
         zero: {underflow}, ties: {ties}"
    );
}
