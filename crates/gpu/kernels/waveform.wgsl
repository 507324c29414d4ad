// A waveform's rows: each frame (one sample, read, scaled and dithered by the frame kernel as
// the CPU reads it) rounded once to f32, the CPU's `as f32`; one invocation per frame, on the
// frame kernel's grid. Its normalisation, where the device applies it, follows in
// item_steps.wgsl.

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> frames: array<real>;
@group(0) @binding(2) var<storage, read_write> rows: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.x + gid.y * p.frame_row;
    if (t >= p.total_frames) {
        return;
    }
    rows[t] = f32(frames[t * p.n_fft + p.window_offset]);
}
