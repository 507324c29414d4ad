// Real DFT of each frame: one invocation per (bin, frame), X[k] = sum_n x[n] e^{-2 pi i k n / N}
// with the twiddle index k*n mod N kept exact in integers and cos/sin taken from a table
// computed in f64 on the host. Any n_fft works (400 is not a power of two). O(N) per bin,
// used where the FFT cannot run: a prime factor over 7, or a frame too big for workgroup
// memory (n_fft 2048 in f64). Writes |X|^2, or |X| when `magnitude` is set.

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> frames: array<real>;
@group(0) @binding(2) var<storage, read> twiddle: array<vec2<real>>;
@group(0) @binding(3) var<storage, read_write> spectrum: array<real>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let k = wid.x * 64u + lid.x;
    let t = wid.y + wid.z * p.grid_y;
    if (k >= p.n_freq || t >= p.total_frames) {
        return;
    }
    let base = t * p.n_fft;
    var re: real = 0.0;
    var im: real = 0.0;
    var idx = 0u;
    for (var n = 0u; n < p.n_fft; n++) {
        let x = frames[base + n];
        let w = twiddle[idx];
        re += x * w.x;
        im -= x * w.y;
        idx += k;
        if (idx >= p.n_fft) {
            idx -= p.n_fft;
        }
    }
    var v = re * re + im * im;
    if (p.magnitude != 0u) {
        v = sqrt(v);
    }
    spectrum[t * p.n_freq + k] = v;
}
