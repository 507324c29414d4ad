#!/usr/bin/env python3
"""The numpy/scipy peer of bench/rf.sh: the same recordings and features as sonograph, written
the way a careful Python user would (vectorised numpy, scipy.signal.upfirdn and welch), one
thread per process (BLAS/OpenMP pinned to 1).

    rf_peer.py per-sample [--repeat N]      # ms per recording: generation, features (medians)
    rf_peer.py batch --count N --workers W  # wall time of N recordings generated + featurised
    rf_peer.py torchsig [--repeat N]        # TorchSig's QPSK generation, when it is installed

One recording: one second of QPSK at 200 kHz, RRC roll-off 0.35 over 8 symbols, 8 samples
per symbol, 10 dB in-band SNR (the issue's configuration).
"""

import json
import os
import statistics
import sys
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np
import scipy.signal

FS = 200_000.0
N = 200_000
SPS = 8
BETA = 0.35
SPAN = 8


def rrc(beta, sps, span):
    t = (np.arange(span * sps + 1) - span * sps / 2) / sps
    h = np.empty_like(t)
    for i, x in enumerate(t):
        if abs(x) < 1e-12:
            h[i] = 1 - beta + 4 * beta / np.pi
        elif abs(abs(x) - 1 / (4 * beta)) < 1e-9:
            h[i] = beta / np.sqrt(2) * ((1 + 2 / np.pi) * np.sin(np.pi / (4 * beta))
                                        + (1 - 2 / np.pi) * np.cos(np.pi / (4 * beta)))
        else:
            h[i] = (np.sin(np.pi * x * (1 - beta)) + 4 * beta * x * np.cos(np.pi * x * (1 + beta))) / (
                np.pi * x * (1 - (4 * beta * x) ** 2))
    return h * np.sqrt(sps / np.sum(h**2))


TAPS = rrc(BETA, SPS, SPAN)
QPSK = np.exp(1j * (np.pi / 4 + np.pi / 2 * np.arange(4)))


def generate(rng, snr_db=10.0):
    n_sym = N // SPS + SPAN + 2
    sym = QPSK[rng.integers(0, 4, n_sym)]
    x = scipy.signal.upfirdn(TAPS, sym, up=SPS)[SPAN * SPS // 2: SPAN * SPS // 2 + N]
    x = x / np.sqrt(np.mean(x.real * x.real + x.imag * x.imag))
    # In-band SNR over the 99 % bandwidth (about 1.17 symbol rates for this pulse).
    bw = 1.17 * FS / SPS
    sigma = np.sqrt(FS / bw / 10 ** (snr_db / 10) / 2)
    return (x + sigma * (rng.standard_normal(N) + 1j * rng.standard_normal(N))).astype(np.complex64)


def features(x):
    f, p = scipy.signal.welch(x, fs=FS, nperseg=1024, noverlap=512, detrend=False,
                              return_onesided=False)
    p = np.fft.fftshift(p)
    f = np.fft.fftshift(f)
    df = FS / len(p)
    power = x.real * x.real + x.imag * x.imag
    m2 = power.mean()
    out = {"rssi_dbfs": 10 * np.log10(m2), "papr_db": 10 * np.log10(power.max() / m2)}
    floor = np.median(p) / (1 - 2 / (9 * 700)) ** 3
    total = p.sum() * df
    sig = total - floor * FS
    d = p - floor
    c = np.cumsum(d) / d.sum()
    lo, hi = np.searchsorted(c, 0.005), np.searchsorted(c, 0.995)
    obw = (hi - lo + 1) * df
    out.update(snr_fullband_db=10 * np.log10(max(sig, 1e-30) / (floor * FS)),
               snr_inband_db=10 * np.log10(max(sig, 1e-30) / (floor * obw)), obw_hz=obw)
    m4 = (power**2).mean()
    s = np.sqrt(max(2 * m2 * m2 - m4, 0))
    out["snr_m2m4_db"] = 10 * np.log10(max(s, 1e-30) / (m2 - s))
    out["centroid"] = (f * p).sum() / p.sum()
    out["flatness"] = np.exp(np.mean(np.log(p))) / p.mean()
    a = np.abs(x) / np.sqrt(m2)
    ph = np.angle(x)
    fr = np.angle(x[1:] * np.conj(x[:-1]))
    for name, v in (("amp", a), ("phase", ph), ("freq", fr)):
        mu = v.mean()
        dv = v - mu
        d2 = dv * dv
        s2 = d2.mean()
        # Products, not **3 and **4: numpy sends integer powers above 2 through pow().
        out[name] = (mu, np.sqrt(s2), (d2 * dv).mean() / s2**1.5, (d2 * d2).mean() / s2**2)
    z = x.astype(np.complex128) - x.mean()
    az = z.real * z.real + z.imag * z.imag
    z2 = z * z
    m20, m21 = z2.mean(), az.mean()
    m40, m41, m42 = (z2 * z2).mean(), (z2 * az).mean(), (az * az).mean()
    m60, m63 = (z2 * z2 * z2).mean(), (az * az * az).mean()
    out["c42"] = ((m42 - abs(m20) ** 2 - 2 * m21**2) / m21**2).real
    out["c40"] = abs(m40 - 3 * m20**2) / m21**2
    out["c41"] = abs(m41 - 3 * m20 * m21) / m21**2
    out["c60"] = abs(m60 - 15 * m40 * m20 + 30 * m20**3) / m21**3
    out["c63"] = (m63 - 9 * m21 * m42 + 12 * m21**3).real / m21**3
    return out


def per_sample(repeat):
    rng = np.random.default_rng(1)
    gen, feat = [], []
    generate(rng)
    features(generate(rng))
    for _ in range(repeat):
        t = time.perf_counter()
        x = generate(rng)
        gen.append(time.perf_counter() - t)
        t = time.perf_counter()
        features(x)
        feat.append(time.perf_counter() - t)
    return {"generate_ms": 1e3 * statistics.median(gen), "features_ms": 1e3 * statistics.median(feat)}


def _work(seed_count):
    seed, count = seed_count
    rng = np.random.default_rng(seed)
    for _ in range(count):
        features(generate(rng))
    return count


def batch(count, workers):
    from multiprocessing import Pool
    shares = [(i, count // workers + (i < count % workers)) for i in range(workers)]
    t = time.perf_counter()
    with Pool(workers) as pool:
        done = sum(pool.map(_work, shares))
    return {"count": done, "workers": workers, "seconds": time.perf_counter() - t}


def torchsig(repeat):
    """TorchSig's own QPSK modulator (SRRC 0.35, 8 samples per symbol; its filter is designed
    for 120 dB of attenuation) plus the same AWGN, per recording."""
    try:
        import torchsig
        from torchsig.signals.builders.constellation import constellation_modulator_baseband
    except Exception as e:  # noqa: BLE001
        return {"error": f"torchsig not importable: {e}"}
    rng = np.random.default_rng(1)
    sigma = np.sqrt(FS / (1.17 * FS / SPS) / 10 / 2)

    def one():
        x = constellation_modulator_baseband("qpsk", "srrc", N, SPS, BETA, rng)
        return (x + sigma * (rng.standard_normal(N) + 1j * rng.standard_normal(N))).astype(np.complex64)

    one()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        one()
        times.append(time.perf_counter() - t)
    return {"version": torchsig.__version__, "generate_ms": 1e3 * statistics.median(times)}


if __name__ == "__main__":
    args = sys.argv[1:]
    opt = lambda name, default: int(args[args.index(name) + 1]) if name in args else default
    if not args or args[0] == "per-sample":
        print(json.dumps(per_sample(opt("--repeat", 20))))
    elif args[0] == "batch":
        print(json.dumps(batch(opt("--count", 100), opt("--workers", 2))))
    elif args[0] == "torchsig":
        print(json.dumps(torchsig(opt("--repeat", 5))))
    else:
        sys.exit(__doc__)
