// Sparse mel projection and log: one invocation per (band, frame). Each filter is the run of
// FFT bins where its triangle is non-zero (MelBank's sparse form), so a band costs its width,
// not n_fft/2+1. The guard (clamp or add) and the log follow the spec.

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> spectrum: array<real>;
@group(0) @binding(2) var<storage, read> filters: array<Filter>;
@group(0) @binding(3) var<storage, read> weights: array<real>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let b = wid.x * 64u + lid.x;
    let t = wid.y + wid.z * p.grid_y;
    if (b >= p.n_mels || t >= p.total_frames) {
        return;
    }
    let f = filters[b];
    let row = t * p.n_freq + f.start;
    var e: real = 0.0;
    for (var i = 0u; i < f.len; i++) {
        e += weights[f.weight_offset + i] * spectrum[row + i];
    }
    out[t * p.n_mels + b] = guarded_log(e);
}
