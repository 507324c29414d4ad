// Framing: one invocation per frame. Pads (centre: reflect or zeros; snip_edges: none),
// applies Kaldi's per-frame steps in Kaldi's order (dither, remove DC, pre-emphasis), then the
// window, and writes the n_fft frame with the window at `window_offset` and zeros elsewhere.
// One invocation a frame on purpose: the DC mean and the pre-emphasis recurrence are summed in
// the same order as the CPU path, so the two agree to the last bit on the frame.

@group(0) @binding(0) var<uniform> p: Params;
@SAMPLES@
@group(0) @binding(2) var<storage, read> items: array<Item>;
@group(0) @binding(3) var<storage, read> frame_item: array<u32>;
@group(0) @binding(4) var<storage, read> win: array<real>;
@group(0) @binding(5) var<storage, read_write> frames: array<real>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x + gid.y * p.frame_row;
    if (t >= p.total_frames) {
        return;
    }
    let it = items[frame_item[t]];
    let local = t - it.frame_offset;
    let j = local + it.first_frame;
    let base = t * p.n_fft;
    for (var k = 0u; k < p.n_fft; k++) {
        frames[base + k] = 0.0;
    }
    let start = window_start(it, local);
    let dst = base + p.window_offset;
    for (var m = 0u; m < p.win_length; m++) {
        frames[dst + m] = frame_sample(it, start, j, m);
    }
    if (p.remove_dc != 0u) {
        // In the CPU path's order (extractor.rs, frame_sum): four lanes, then the remainder.
        var lanes = vec4<real>(0.0);
        let quads = p.win_length / 4u;
        for (var q = 0u; q < quads; q++) {
            let i = dst + 4u * q;
            lanes += vec4<real>(frames[i], frames[i + 1u], frames[i + 2u], frames[i + 3u]);
        }
        var sum = (lanes.x + lanes.y) + (lanes.z + lanes.w);
        for (var m = 4u * quads; m < p.win_length; m++) {
            sum += frames[dst + m];
        }
        let mean = sum / real(p.win_length);
        for (var m = 0u; m < p.win_length; m++) {
            frames[dst + m] -= mean;
        }
    }
    if (p.preemph > 0.0) {
        for (var m = p.win_length - 1u; m >= 1u; m--) {
            frames[dst + m] -= real(p.preemph) * frames[dst + m - 1u];
        }
        frames[dst] -= real(p.preemph) * frames[dst];
    }
    for (var m = 0u; m < p.win_length; m++) {
        frames[dst + m] *= win[m];
    }
}
