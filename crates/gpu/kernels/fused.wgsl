// The fused kernel: framing, Kaldi's per-frame steps, the window, a mixed-radix Stockham FFT,
// power, and the sparse mel projection with its log, for one frame per workgroup, with
// everything between the samples and the output row in workgroup memory. A frame costs its
// samples read and its row written: the memory floor of bench/RESULTS-gpu.md, against about
// six times that traffic for the three-pass path (frame.wgsl, dft.wgsl, mel.wgsl) that remains
// for n_fft the FFT cannot take.
//
// The FFT is Govindaraju et al.'s (SC 2008) FftIteration/expand form over two ping-pong
// halves of `buf`, one barrier per stage; it holds for mixed radices because Ns is the product
// of the radices already applied. The host writes the stages out for N (src/fft_wgsl.rs:
// radices 2, 3, 4, 5 and 7, e.g. 400 = 4·4·5·5), so strides and radices are constants. Every twiddle comes from the f64-computed table (WGSL's sin/cos
// only promise 2^-11 absolute); indices are exact integers.
//
// Entry points: `main_mel` writes log-mel rows (f32), `main_power` writes |X|^2 (or |X| when
// `magnitude`) rows in `real` for the host's linear, PSD and spectrum outputs.

const N: u32 = @N@u;
const WG: u32 = 64u;

@group(0) @binding(0) var<uniform> p: Params;
@SAMPLES@
@group(0) @binding(2) var<storage, read> items: array<Item>;
@group(0) @binding(3) var<storage, read> frame_item: array<u32>;
@group(0) @binding(4) var<storage, read> win: array<real>;
@group(0) @binding(5) var<storage, read> twiddle: array<vec2<real>>;
@group(0) @binding(6) var<storage, read> filters: array<Filter>;
@group(0) @binding(7) var<storage, read> weights: array<real>;
@group(0) @binding(8) var<storage, read_write> out_mel: array<f32>;
@group(0) @binding(9) var<storage, read_write> out_power: array<real>;

var<workgroup> buf: array<vec2<real>, @TWO_N@>;

// exp(-2 pi i m / N) for an integer 0 <= m < N (every index the FFT's stages compute).
fn w(m: u32) -> vec2<real> {
    let c = twiddle[m];
    return vec2<real>(c.x, -c.y);
}

fn cmul(a: vec2<real>, b: vec2<real>) -> vec2<real> {
    return vec2<real>(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// Frame t into buf[0, N): padding (centre: reflect or zeros; snip_edges: none), dither, remove
// DC and pre-emphasis in Kaldi's order, the window at `window_offset`, zeros elsewhere.
fn load_frame(t: u32, lid: u32) {
    let it = items[frame_item[t]];
    let local = t - it.frame_offset;
    let j = local + it.first_frame;
    let start = window_start(it, local);
    let off = p.window_offset;
    if (p.remove_dc == 0u && p.preemph == 0.0) {
        // No per-frame step between framing and the window (every spec but Kaldi's): one
        // pass. x - 0 * prev is x, so this is the general path's result.
        for (var i = lid; i < N; i += WG) {
            var v: real = 0.0;
            if (i >= off && i < off + p.win_length) {
                v = frame_sample(it, start, j, i - off) * win[i - off];
            }
            buf[i] = vec2<real>(v, 0.0);
        }
        workgroupBarrier();
        return;
    }
    for (var i = lid; i < N; i += WG) {
        var v: real = 0.0;
        if (i >= off && i < off + p.win_length) {
            v = frame_sample(it, start, j, i - off);
        }
        buf[i] = vec2<real>(v, 0.0);
    }
    workgroupBarrier();
    if (p.remove_dc != 0u) {
        // One invocation sums in the CPU path's order, so the mean matches it to the bit; it
        // waits in the (still unused) second half.
        if (lid == 0u) {
            var lanes = vec4<real>(0.0);
            let quads = p.win_length / 4u;
            for (var q = 0u; q < quads; q++) {
                let i = off + 4u * q;
                lanes += vec4<real>(buf[i].x, buf[i + 1u].x, buf[i + 2u].x, buf[i + 3u].x);
            }
            var sum = (lanes.x + lanes.y) + (lanes.z + lanes.w);
            for (var m = 4u * quads; m < p.win_length; m++) {
                sum += buf[off + m].x;
            }
            buf[N].x = sum / real(p.win_length);
        }
        workgroupBarrier();
        let mean = buf[N].x;
        for (var m = lid; m < p.win_length; m += WG) {
            buf[off + m].x -= mean;
        }
        workgroupBarrier();
    }
    // Pre-emphasis reads each sample's predecessor before it is changed: the result goes to
    // the second half, and comes back through the window.
    let a = real(p.preemph);
    for (var m = lid; m < p.win_length; m += WG) {
        let x = buf[off + m].x;
        var prev = x;
        if (m > 0u) {
            prev = buf[off + m - 1u].x;
        }
        buf[N + off + m].x = x - a * prev;
    }
    workgroupBarrier();
    for (var m = lid; m < p.win_length; m += WG) {
        buf[off + m] = vec2<real>(buf[N + off + m].x * win[m], 0.0);
    }
    workgroupBarrier();
}

// The FFT of buf[0, N), written out for this N by the host (src/fft_wgsl.rs); returns the
// offset (0 or N) of the half that holds the spectrum.
@FFT@

// |X[k]|^2, or |X[k]| when the spec sums magnitudes.
fn power(spectrum: u32, k: u32) -> real {
    let c = buf[spectrum + k];
    var v = c.x * c.x + c.y * c.y;
    if (p.magnitude != 0u) {
        v = sqrt(v);
    }
    return v;
}

// Frame index of a workgroup; uniform across it, so returning early keeps barriers uniform.
fn frame_of(wid: vec3<u32>) -> u32 {
    return wid.x + wid.y * p.grid_y;
}

@compute @workgroup_size(64)
fn main_mel(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = frame_of(wid);
    if (t >= p.total_frames) {
        return;
    }
    load_frame(t, lid);
    let spectrum = fft(lid);
    // Powers go to the other half's real parts, where each band reads its run of bins.
    let powers = N - spectrum;
    for (var k = lid; k < p.n_freq; k += WG) {
        buf[powers + k].x = power(spectrum, k);
    }
    workgroupBarrier();
    for (var b = lid; b < p.n_mels; b += WG) {
        let f = filters[b];
        var e: real = 0.0;
        for (var i = 0u; i < f.len; i++) {
            e += weights[f.weight_offset + i] * buf[powers + f.start + i].x;
        }
        out_mel[t * p.n_mels + b] = guarded_log(e);
    }
}

@compute @workgroup_size(64)
fn main_power(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = frame_of(wid);
    if (t >= p.total_frames) {
        return;
    }
    load_frame(t, lid);
    let spectrum = fft(lid);
    for (var k = lid; k < p.n_freq; k += WG) {
        out_power[t * p.n_freq + k] = power(spectrum, k);
    }
}
