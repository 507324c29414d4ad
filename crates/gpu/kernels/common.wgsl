// Shared by every kernel: the spectral scalar type, the batch parameters (one uniform) and the
// per-item table.

// f32, or f64 on adapters with SHADER_F64: f32 cannot hold bands 80-100 dB under their frame's
// peak to 1e-4 in dB or nats (its rounding noise sits about 140 dB under the peak), f64 can.
// Samples in, log outputs out and the log itself stay f32 (SPIR-V has no f64 log).
alias real = @REAL@;
// Mirrors `Params` and `Item` in src/extractor.rs field for field.

struct Params {
    n_fft: u32,
    win_length: u32,
    hop: u32,
    // Where the window sits inside the n_fft frame (torch centres it; Kaldi puts it first).
    window_offset: u32,
    pad_left: u32,
    reflect: u32,
    center: u32,
    remove_dc: u32,
    // Per-frame (Kaldi) pre-emphasis; 0 when the spec pre-emphasises the signal on the host.
    preemph: f32,
    total_frames: u32,
    n_freq: u32,
    out_bins: u32,
    n_mels: u32,
    magnitude: u32,
    // 0: no log, 1: ln, 2: log10, 3: dB (10 log10).
    log_kind: u32,
    guard_add: u32,
    guard: f32,
    // Frames per z-slice of the (bin, frame, slice) grid of the dft and mel kernels, and
    // invocations per row of the frame kernel's grid: dispatch sizes stop at 65535 per
    // dimension, so long batches wrap into a second dimension.
    grid_y: u32,
    frame_row: u32,
    // Standard deviation of the dither (0: none) and its seed's low and high words.
    dither: f32,
    dither_seed_lo: u32,
    dither_seed_hi: u32,
    // The struct is a whole number of 16-byte rows.
    _pad0: u32,
    _pad1: u32,
}

// One sparse mel filter: `len` weights from `weight_offset`, over bins from `start`.
struct Filter {
    start: u32,
    len: u32,
    weight_offset: u32,
    _pad: u32,
}

struct Item {
    sample_offset: u32,
    n_samples: u32,
    frame_offset: u32,
    n_frames: u32,
}

// numpy's "reflect" index for any i, periodic beyond one reflection (as the CPU path).
fn reflect_index(i: i32, n: i32) -> i32 {
    if (n == 1) {
        return 0;
    }
    let period = 2 * (n - 1);
    var m = i % period;
    if (m < 0) {
        m += period;
    }
    if (m < n) {
        return m;
    }
    return period - m;
}

// ln(x) for x > 0 to about one ulp of `real` with +, *, / and ldexp only: SPIR-V has no f64
// log, and its f32 log promises 3 ulp, which NeMo's per-feature normalisation magnifies past
// 1e-4 on quiet clips. x = m 2^k with m within a factor sqrt(2) of 1, and
// ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1) / (m + 1), |s| < 0.18.
fn ln_real(x: real) -> real {
    let k = round(log2(f32(x)));
    let m = ldexp(x, -i32(k));
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    // Up to s^23/23: the next term is under 1e-17 of the sum.
    var poly: real = 1.0 / 23.0;
    for (var n = 21; n >= 1; n -= 2) {
        poly = poly * s2 + 1.0 / real(n);
    }
    return 2.0 * s * poly + real(k) * real(0.69314718055994530942);
}

// The spec's guard (clamp or add) and log of one mel energy (`p` is each kernel's uniform),
// scaled as the CPU's `log_row` scales it.
fn guarded_log(energy: real) -> f32 {
    if (p.log_kind == 0u) {
        return f32(energy);
    }
    var e = energy;
    if (p.guard_add != 0u) {
        e = e + real(p.guard);
    } else {
        e = max(e, real(p.guard));
    }
    var scale: real = 1.0;
    if (p.log_kind == 2u) {
        scale = 0.43429448190325182765;
    } else if (p.log_kind == 3u) {
        scale = 10.0 * 0.43429448190325182765;
    }
    return f32(ln_real(e) * scale);
}

// sonograph_dsp::dither, transcribed: Chris Wellons' lowbias32 hash.
fn lowbias32(v: u32) -> u32 {
    var x = v;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}

// Unit-variance dither for sample m of frame `frame` of an item: twelve 16-bit uniforms
// summed exactly in integers (Irwin-Hall), the same bits as the CPU's `unit_noise`.
fn unit_noise(frame: u32, m: u32) -> f32 {
    let golden = 0x9e3779b9u;
    var h = lowbias32(golden ^ p.dither_seed_lo);
    h = lowbias32(h ^ p.dither_seed_hi);
    h = lowbias32(h ^ frame);
    h = lowbias32(h ^ m);
    var sum = 0u;
    for (var k = 0u; k < 6u; k++) {
        let r = lowbias32(h + k * golden);
        sum += (r & 0xffffu) + (r >> 16u);
    }
    return (f32(sum) + 6.0) / 65536.0 - 6.0;
}

// A frame sample with the spec's dither added, in the CPU's order and rounding.
fn dithered(v: real, frame: u32, m: u32) -> real {
    if (p.dither == 0.0) {
        return v;
    }
    return v + real(unit_noise(frame, m)) * real(p.dither);
}
