// Shared by every kernel: the batch parameters (one uniform) and the per-item table.
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

struct Item {
    sample_offset: u32,
    n_samples: u32,
    frame_offset: u32,
    n_frames: u32,
}
