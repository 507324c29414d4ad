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
    // 0: no log; otherwise out = log(guarded) * log_scale.
    log_kind: u32,
    guard_add: u32,
    guard: f32,
    log_scale: f32,
    // Frames per z-slice of the (bin, frame, slice) grid of the dft and mel kernels, and
    // invocations per row of the frame kernel's grid: dispatch sizes stop at 65535 per
    // dimension, so long batches wrap into a second dimension.
    grid_y: u32,
    frame_row: u32,
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

// The spec's guard (clamp or add) and log of one mel energy (`p` is each kernel's uniform);
// the log in f32: SPIR-V has no f64 log, and f32 holds a log to 1e-7 relative.
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
    return log(f32(e)) * p.log_scale;
}
