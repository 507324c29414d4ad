// Shared by every kernel: the spectral scalar type, the batch parameters (one uniform) and the
// per-item table.

// f32, or f64 on adapters with SHADER_F64: f32 cannot hold bands 80-100 dB under their frame's
// peak to 1e-4 in dB or nats (its rounding noise sits about 140 dB under the peak), f64 can.
// Samples in and outputs out stay f32; the log is computed in `real` (`ln_real`).
alias real = @REAL@;
// Mirrors `Params` and `Item` in src/extractor.rs field for field.

struct Params {
    n_fft: u32,
    win_length: u32,
    hop: u32,
    // Where the window sits inside the n_fft frame (torch centres it; Kaldi puts it first).
    window_offset: u32,
    // Beyond the item's edges: 0 zeros, 1 numpy's reflection, 2 Kaldi's mirror (the edge
    // sample repeated: snip_edges = false).
    edge: u32,
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
    // The chunk's items, and items per row of the item_steps kernel's grid (which wraps as
    // grid_y does).
    n_items: u32,
    item_row: u32,
    // The whole-row steps the device applies (item_steps.wgsl): bit 0 the dynamic-range clamp
    // (values at least the row's maximum minus `dynamic_range`), bit 1 the affine
    // `(x + affine_add) * affine_scale`, bit 2 NeMo's per-feature normalisation.
    item_steps: u32,
    dynamic_range: f32,
    affine_add: f32,
    affine_scale: f32,
    // The signal's pre-emphasis where the kernels apply it as they read each sample (NeMo's
    // y[n] = x[n] - a x[n-1], y[0] = x[0]); 0 where the host applied it, or none is.
    signal_preemph: f32,
    // Workgroups per row of the f16_rows kernel's grid (which wraps as grid_y does).
    pack_row: u32,
    // 28 words: a whole number of 16-byte rows, as a uniform must be.
}

// One sparse mel filter: `len` weights from `weight_offset`, over bins from `start`.
struct Filter {
    start: u32,
    len: u32,
    weight_offset: u32,
    _pad: u32,
}

// An item, or a piece of one (a window of its samples). Sample indices are relative to the
// first prepared sample, at sample_offset (a context sample sent before it is at -1): the
// first frame starts at first_start (negative in the left padding),
// and the signal has signal_len samples from there on. Frames are the item's frames
// first_frame.. (a whole item: first_start = window_offset - pad_left, its length, 0).
struct Item {
    sample_offset: u32,
    n_samples: u32,
    frame_offset: u32,
    n_frames: u32,
    first_start: i32,
    signal_len: u32,
    first_frame: u32,
    // The frames the whole-row steps read: all of them, or all but the last where the host
    // drops an item's last frame and this is its last piece.
    step_frames: u32,
    // 1 where the sample before the first (at sample_offset - 1) is uploaded too: a later
    // piece's context, which the signal's pre-emphasis reads.
    context: u32,
    _pad: u32,
}

// ln(x) to about one ulp of `real` with +, *, / and ldexp only: SPIR-V has no f64 log, and its
// f32 log promises 3 ulp, which NeMo's per-feature normalisation magnifies past 1e-4 on quiet
// clips. x = m 2^k with m within a factor sqrt(2) of 1, and
// ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m - 1) / (m + 1), |s| < 0.18.
// k comes from an f32 log2, so x is first scaled by powers of two into f32's normal range
// (naga's f64 frexp needs 64-bit integers). ln(0) is -inf, as on the CPU.
fn ln_real(x: real) -> real {
    if (x == 0.0) {
        return real(-bitcast<f32>(0x7f800000u));
    }
    var y = x;
    var k = 0;
    for (var i = 0; i < 12 && y < 1e-30; i++) {
        y = ldexp(y, 100);
        k -= 100;
    }
    for (var i = 0; i < 12 && y > 1e30; i++) {
        y = ldexp(y, -100);
        k += 100;
    }
    let e = i32(round(log2(f32(y))));
    let m = ldexp(y, -e);
    k += e;
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    // Up to s^23/23: the next term is under 1e-17 of the sum. The coefficients are constant
    // expressions, rounded once when the shader is made: a run-time 1/n is a division per
    // term and, in f32, WGSL allows it 2.5 ulp.
    var poly: real = 1.0 / 23.0;
    poly = poly * s2 + 1.0 / 21.0;
    poly = poly * s2 + 1.0 / 19.0;
    poly = poly * s2 + 1.0 / 17.0;
    poly = poly * s2 + 1.0 / 15.0;
    poly = poly * s2 + 1.0 / 13.0;
    poly = poly * s2 + 1.0 / 11.0;
    poly = poly * s2 + 1.0 / 9.0;
    poly = poly * s2 + 1.0 / 7.0;
    poly = poly * s2 + 1.0 / 5.0;
    poly = poly * s2 + 1.0 / 3.0;
    poly = poly * s2 + 1.0;
    return 2.0 * s * poly + real(k) * real(0.69314718055994530942);
}

// The spec's guard (clamp or add) and log of one mel energy (`p` is each kernel's uniform),
// scaled as the CPU's `log_row` scales it. The host encodes the guard so that one under f32's
// normal range (Clamp(1e-40), Add(1e-40)) survives GPUs that flush f32 subnormals to zero
// (NVIDIA's do; see `log_params` in plan.rs): a clamp arrives as the CPU's clamped output and
// is applied after the log; an addend arrives times 2^(guard_add - 1).
fn guarded_log(energy: real) -> f32 {
    if (p.log_kind == 0u) {
        return f32(energy);
    }
    var scale: real = 1.0;
    if (p.log_kind == 2u) {
        scale = 0.43429448190325182765;
    } else if (p.log_kind == 3u) {
        scale = 10.0 * 0.43429448190325182765;
    }
    if (p.guard_add != 0u) {
        let addend = ldexp(real(p.guard), 1 - i32(p.guard_add));
        return f32(ln_real(energy + addend) * scale);
    }
    // Not `max(ln(e), floor)` alone: WGSL leaves max with a NaN operand to the implementation,
    // and the CPU's f64::max takes the floor over a NaN energy. Near the floor the comparison
    // is to within the log's last bits.
    if (!(energy > 0.0)) {
        return p.guard;
    }
    let scaled = ln_real(energy) * scale;
    if (scaled > real(p.guard)) {
        return f32(scaled);
    }
    return p.guard;
}
