//! `SynthSpec`: every parameter of a synthetic IQ dataset, explicit and serialisable (JSON or
//! TOML), as `FeatureSpec` is for audio features. Parameters that vary per sample are ranges
//! `[min, max]` drawn uniformly; an impairment whose range is absent is off.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{invalid, RfError};

/// A closed range drawn uniformly per sample (`min == max` is a fixed value).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

impl Range {
    pub fn fixed(v: f64) -> Self {
        Range { min: v, max: v }
    }

    /// `A:B` or a single value.
    pub fn parse(text: &str) -> Result<Self, String> {
        let num = |t: &str| {
            t.trim()
                .parse::<f64>()
                .map_err(|_| format!("{t:?} is not a number"))
        };
        let r = match text.split_once(':') {
            Some((a, b)) => Range {
                min: num(a)?,
                max: num(b)?,
            },
            None => Range::fixed(num(text)?),
        };
        if !(r.min.is_finite() && r.max.is_finite()) || r.min > r.max {
            return Err(format!("{text:?} is not a range A:B with A <= B"));
        }
        Ok(r)
    }

    /// The value at uniform `u` in (0, 1).
    pub fn at(&self, u: f64) -> f64 {
        self.min + (self.max - self.min) * u
    }

    fn check(&self, field: &str, lo: f64, hi: f64) -> Result<(), RfError> {
        if !(self.min.is_finite() && self.max.is_finite()) || self.min > self.max {
            return Err(invalid(field, "min must not exceed max"));
        }
        if self.min < lo || self.max > hi {
            return Err(invalid(field, format!("must lie within [{lo}, {hi}]")));
        }
        Ok(())
    }
}

/// The modulations, by their dataset label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ModKind {
    #[serde(rename = "tone")]
    Tone,
    #[serde(rename = "am-dsb")]
    AmDsb,
    #[serde(rename = "am-dsb-sc")]
    AmDsbSc,
    #[serde(rename = "ssb-usb")]
    SsbUsb,
    #[serde(rename = "ssb-lsb")]
    SsbLsb,
    #[serde(rename = "fm")]
    Fm,
    #[serde(rename = "ook")]
    Ook,
    #[serde(rename = "4ask")]
    Ask4,
    #[serde(rename = "8ask")]
    Ask8,
    #[serde(rename = "bpsk")]
    Bpsk,
    #[serde(rename = "qpsk")]
    Qpsk,
    #[serde(rename = "8psk")]
    Psk8,
    #[serde(rename = "16psk")]
    Psk16,
    #[serde(rename = "oqpsk")]
    Oqpsk,
    #[serde(rename = "16qam")]
    Qam16,
    #[serde(rename = "32qam")]
    Qam32,
    #[serde(rename = "64qam")]
    Qam64,
    #[serde(rename = "256qam")]
    Qam256,
    #[serde(rename = "16apsk")]
    Apsk16,
    #[serde(rename = "32apsk")]
    Apsk32,
    #[serde(rename = "2fsk")]
    Fsk2,
    #[serde(rename = "4fsk")]
    Fsk4,
    #[serde(rename = "gfsk")]
    Gfsk,
    #[serde(rename = "gmsk")]
    Gmsk,
    #[serde(rename = "msk")]
    Msk,
    #[serde(rename = "ofdm")]
    Ofdm,
    #[serde(rename = "lfm")]
    Lfm,
}

impl ModKind {
    pub const ALL: [ModKind; 27] = [
        ModKind::Tone,
        ModKind::AmDsb,
        ModKind::AmDsbSc,
        ModKind::SsbUsb,
        ModKind::SsbLsb,
        ModKind::Fm,
        ModKind::Ook,
        ModKind::Ask4,
        ModKind::Ask8,
        ModKind::Bpsk,
        ModKind::Qpsk,
        ModKind::Psk8,
        ModKind::Psk16,
        ModKind::Oqpsk,
        ModKind::Qam16,
        ModKind::Qam32,
        ModKind::Qam64,
        ModKind::Qam256,
        ModKind::Apsk16,
        ModKind::Apsk32,
        ModKind::Fsk2,
        ModKind::Fsk4,
        ModKind::Gfsk,
        ModKind::Gmsk,
        ModKind::Msk,
        ModKind::Ofdm,
        ModKind::Lfm,
    ];

    /// The label written into datasets (`core:label`).
    pub fn label(self) -> &'static str {
        // Declaration order = ALL = LABELS (a test checks the serde names agree).
        LABELS[self as usize]
    }

    pub fn parse(name: &str) -> Result<Self, String> {
        let key = name.trim().to_ascii_lowercase();
        ModKind::ALL
            .iter()
            .copied()
            .find(|k| k.label() == key)
            .ok_or_else(|| format!("unknown modulation {name:?} (known: {})", LABELS.join(", ")))
    }

    /// Digital modulations with a symbol rate (Es/N0 is defined for them).
    pub fn has_symbols(self) -> bool {
        !matches!(
            self,
            ModKind::Tone
                | ModKind::AmDsb
                | ModKind::AmDsbSc
                | ModKind::SsbUsb
                | ModKind::SsbLsb
                | ModKind::Fm
                | ModKind::Lfm
        )
    }

    /// Linear modulations: a constellation through a pulse-shaping filter.
    pub fn is_linear(self) -> bool {
        matches!(
            self,
            ModKind::Ook
                | ModKind::Ask4
                | ModKind::Ask8
                | ModKind::Bpsk
                | ModKind::Qpsk
                | ModKind::Psk8
                | ModKind::Psk16
                | ModKind::Qam16
                | ModKind::Qam32
                | ModKind::Qam64
                | ModKind::Qam256
                | ModKind::Apsk16
                | ModKind::Apsk32
        )
    }
}

const LABELS: [&str; 27] = [
    "tone",
    "am-dsb",
    "am-dsb-sc",
    "ssb-usb",
    "ssb-lsb",
    "fm",
    "ook",
    "4ask",
    "8ask",
    "bpsk",
    "qpsk",
    "8psk",
    "16psk",
    "oqpsk",
    "16qam",
    "32qam",
    "64qam",
    "256qam",
    "16apsk",
    "32apsk",
    "2fsk",
    "4fsk",
    "gfsk",
    "gmsk",
    "msk",
    "ofdm",
    "lfm",
];

/// Pulse shape of the linear modulations (and OQPSK).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pulse {
    /// Root-raised cosine with `rolloff`.
    Rrc,
    /// Gaussian with bandwidth-time product `bt`.
    Gaussian,
    /// Rectangular, one symbol long.
    Rect,
}

/// One modulation and its parameters. Absent parameters take the kind's defaults
/// ([`ModulationSpec::resolved`] fills them, and the dataset's metadata stores the result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ModParams {
    /// Samples per symbol (digital modulations; the symbol rate is sample_rate / this).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples_per_symbol: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pulse: Option<Pulse>,
    /// RRC roll-off β.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolloff: Option<f64>,
    /// Gaussian bandwidth-time product (Gaussian pulses, GFSK, GMSK).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bt: Option<f64>,
    /// Pulse length in symbols (RRC and Gaussian).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_symbols: Option<u32>,
    /// FSK modulation index h (frequency spacing / symbol rate); AM modulation depth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modulation_index: Option<f64>,
    /// FM peak deviation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deviation_hz: Option<f64>,
    /// Highest message frequency of the analogue modulations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_bandwidth_hz: Option<f64>,
    /// Tone frequency (before any carrier offset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_hz: Option<f64>,
    /// OFDM: subcarriers (FFT size), used subcarriers (centred, DC left empty), cyclic prefix
    /// (in subcarrier samples), oversampling of the IFFT, and the subcarrier modulation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subcarriers: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_subcarriers: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cyclic_prefix: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oversample: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subcarrier_modulation: Option<ModKind>,
    /// LFM chirp: swept bandwidth, sweep period, direction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth_hz: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModulationSpec {
    pub kind: ModKind,
    #[serde(flatten)]
    pub params: ModParams,
}

impl ModulationSpec {
    pub fn new(kind: ModKind) -> Self {
        ModulationSpec {
            kind,
            params: ModParams::default(),
        }
    }

    /// Every parameter the kind uses, with its default where absent; the others cleared.
    pub fn resolved(&self) -> ModulationSpec {
        let p = &self.params;
        let k = self.kind;
        let mut r = ModParams::default();
        if k.has_symbols() && k != ModKind::Ofdm {
            r.samples_per_symbol = Some(p.samples_per_symbol.unwrap_or(8));
        }
        if k.is_linear() || k == ModKind::Oqpsk {
            let pulse = p.pulse.unwrap_or(Pulse::Rrc);
            r.pulse = Some(pulse);
            match pulse {
                Pulse::Rrc => r.rolloff = Some(p.rolloff.unwrap_or(0.35)),
                Pulse::Gaussian => r.bt = Some(p.bt.unwrap_or(0.5)),
                Pulse::Rect => {}
            }
            if pulse != Pulse::Rect {
                r.span_symbols = Some(p.span_symbols.unwrap_or(8));
            }
        }
        match k {
            ModKind::Fsk2 | ModKind::Fsk4 => {
                r.modulation_index = Some(p.modulation_index.unwrap_or(1.0));
            }
            ModKind::Gfsk => {
                // Bluetooth BR: h 0.32, BT 0.5.
                r.modulation_index = Some(p.modulation_index.unwrap_or(0.32));
                r.bt = Some(p.bt.unwrap_or(0.5));
                r.span_symbols = Some(p.span_symbols.unwrap_or(4));
            }
            ModKind::Gmsk => {
                // GSM: BT 0.3.
                r.bt = Some(p.bt.unwrap_or(0.3));
                r.span_symbols = Some(p.span_symbols.unwrap_or(4));
            }
            ModKind::AmDsb => {
                r.modulation_index = Some(p.modulation_index.unwrap_or(0.5));
                r.message_bandwidth_hz = Some(p.message_bandwidth_hz.unwrap_or(5_000.0));
            }
            ModKind::AmDsbSc | ModKind::SsbUsb | ModKind::SsbLsb => {
                r.message_bandwidth_hz = Some(p.message_bandwidth_hz.unwrap_or(5_000.0));
            }
            ModKind::Fm => {
                r.deviation_hz = Some(p.deviation_hz.unwrap_or(5_000.0));
                r.message_bandwidth_hz = Some(p.message_bandwidth_hz.unwrap_or(5_000.0));
            }
            ModKind::Tone => r.frequency_hz = Some(p.frequency_hz.unwrap_or(0.0)),
            ModKind::Ofdm => {
                r.subcarriers = Some(p.subcarriers.unwrap_or(64));
                r.used_subcarriers = Some(p.used_subcarriers.unwrap_or(52));
                r.cyclic_prefix = Some(p.cyclic_prefix.unwrap_or(16));
                r.oversample = Some(p.oversample.unwrap_or(4));
                r.subcarrier_modulation = Some(p.subcarrier_modulation.unwrap_or(ModKind::Qpsk));
            }
            ModKind::Lfm => {
                r.bandwidth_hz = Some(p.bandwidth_hz.unwrap_or(50_000.0));
                r.period_s = Some(p.period_s.unwrap_or(0.001));
                r.up = Some(p.up.unwrap_or(true));
            }
            _ => {}
        }
        ModulationSpec { kind: k, params: r }
    }

    fn validate(&self, fs: f64) -> Result<(), RfError> {
        let r = self.resolved();
        let p = &r.params;
        let name = self.kind.label();
        let field = |f: &str| format!("modulations.{name}.{f}");
        if let Some(sps) = p.samples_per_symbol {
            if !(1..=4096).contains(&sps) {
                return Err(invalid(&field("samples_per_symbol"), "must be 1..=4096"));
            }
            if self.kind == ModKind::Oqpsk && sps % 2 != 0 {
                return Err(invalid(
                    &field("samples_per_symbol"),
                    "OQPSK needs an even number (Q is delayed half a symbol)",
                ));
            }
        }
        if let Some(b) = p.rolloff {
            if !(0.0..=1.0).contains(&b) || b == 0.0 {
                return Err(invalid(&field("rolloff"), "must be in (0, 1]"));
            }
        }
        if let Some(bt) = p.bt {
            if !(0.05..=10.0).contains(&bt) {
                return Err(invalid(&field("bt"), "must be in [0.05, 10]"));
            }
        }
        if let Some(s) = p.span_symbols {
            if !(1..=64).contains(&s) {
                return Err(invalid(&field("span_symbols"), "must be 1..=64"));
            }
        }
        if let Some(h) = p.modulation_index {
            if !(h > 0.0 && h <= 10.0) {
                return Err(invalid(&field("modulation_index"), "must be in (0, 10]"));
            }
        }
        for (f, v) in [
            ("deviation_hz", p.deviation_hz),
            ("message_bandwidth_hz", p.message_bandwidth_hz),
            ("bandwidth_hz", p.bandwidth_hz),
        ] {
            if let Some(v) = v {
                if !(v > 0.0 && v < fs / 2.0) {
                    return Err(invalid(&field(f), "must be in (0, sample_rate / 2)"));
                }
            }
        }
        if let Some(f) = p.frequency_hz {
            if f.abs() >= fs / 2.0 {
                return Err(invalid(
                    &field("frequency_hz"),
                    "must be within ±sample_rate/2",
                ));
            }
        }
        if let Some(t) = p.period_s {
            if !(t > 0.0 && t * fs >= 2.0) {
                return Err(invalid(
                    &field("period_s"),
                    "must hold at least two samples",
                ));
            }
        }
        if let (Some(n), Some(u), Some(cp), Some(os)) = (
            p.subcarriers,
            p.used_subcarriers,
            p.cyclic_prefix,
            p.oversample,
        ) {
            if !(2..=65_536).contains(&n) || u == 0 || u >= n || cp > n || !(1..=64).contains(&os) {
                return Err(invalid(
                    &field("subcarriers"),
                    "need 2 <= subcarriers <= 65536, 0 < used < subcarriers, cyclic_prefix <= subcarriers, oversample 1..=64",
                ));
            }
        }
        if let Some(m) = p.subcarrier_modulation {
            if !m.is_linear() {
                return Err(invalid(
                    &field("subcarrier_modulation"),
                    "must be a linear modulation (ook, ask, psk, qam, apsk)",
                ));
            }
        }
        Ok(())
    }
}

/// How `snr_db` relates signal and noise power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnrDefinition {
    /// Signal power over the noise power inside the signal's 99 % occupied bandwidth.
    InBand,
    /// Energy per symbol over the noise density (digital modulations only).
    EsN0,
    /// Signal power over the noise power in the whole sampled band.
    FullBand,
}

/// Channel and receiver impairments. Each is off when its range is absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Impairments {
    /// Carrier frequency offset (Hz).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cfo_hz: Option<Range>,
    /// Linear drift of the carrier frequency (Hz per second).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cfo_drift_hz_per_s: Option<Range>,
    /// Phase noise as a Wiener process of this 3 dB linewidth (Hz).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase_noise_linewidth_hz: Option<Range>,
    /// IQ gain imbalance (dB, Q relative to I) and phase skew (degrees).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iq_amplitude_db: Option<Range>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iq_phase_deg: Option<Range>,
    /// DC offset power relative to the signal (dBc), at a uniform random angle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dc_offset_dbc: Option<Range>,
    /// Receiver sample-rate offset (parts per million).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_rate_offset_ppm: Option<Range>,
    /// Multipath: number of paths (rounded down), the largest delay, and the RMS delay spread
    /// of the exponential power-delay profile. The first path has delay 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multipath_paths: Option<Range>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multipath_max_delay_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multipath_rms_delay_s: Option<f64>,
    /// Fading of every path: Rayleigh, or Rician with the first path's K factor (dB), each
    /// path a sum of sinusoids with this maximum Doppler frequency (Hz).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fading: Option<Fading>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doppler_hz: Option<Range>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rician_k_db: Option<Range>,
    /// ADC quantisation to this many bits over a full scale of ±1 (after the noise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantize_bits: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fading {
    Rayleigh,
    Rician,
}

/// A synthetic IQ dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SynthSpec {
    pub sample_rate: f64,
    /// Complex samples per recording.
    pub n_samples: usize,
    /// Each recording draws one of these uniformly.
    pub modulations: Vec<ModulationSpec>,
    pub snr_db: Range,
    pub snr_definition: SnrDefinition,
    /// Power of the signal before noise, in dB relative to full scale (|x| = 1). The default,
    /// −30 dBFS, leaves room for the noise of narrow signals at −5 dB in-band SNR (about 18 dB
    /// above the signal) without clipping ci16 output.
    pub level_dbfs: f64,
    #[serde(default)]
    pub impairments: Impairments,
}

/// Most samples a recording may have (2^31: its noise words must fit a 32-bit block counter).
pub const MAX_SAMPLES: usize = 1 << 31;

impl Default for SynthSpec {
    fn default() -> Self {
        SynthSpec {
            sample_rate: 200_000.0,
            n_samples: 200_000,
            modulations: vec![ModulationSpec::new(ModKind::Qpsk)],
            snr_db: Range {
                min: 0.0,
                max: 20.0,
            },
            snr_definition: SnrDefinition::InBand,
            level_dbfs: -30.0,
            impairments: Impairments::default(),
        }
    }
}

impl SynthSpec {
    pub fn from_json(text: &str) -> Result<Self, RfError> {
        serde_json::from_str(text).map_err(|e| RfError::Parse(e.to_string()))
    }

    pub fn from_toml(text: &str) -> Result<Self, RfError> {
        toml::from_str(text).map_err(|e| RfError::Parse(e.to_string()))
    }

    /// The spec with every modulation's parameters resolved, as stored with a dataset.
    pub fn resolved(&self) -> SynthSpec {
        let mut s = self.clone();
        s.modulations = s.modulations.iter().map(|m| m.resolved()).collect();
        s
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.resolved()).expect("a spec serialises")
    }

    /// A stable id of the resolved spec: the first 16 hex digits of its JSON's SHA-256.
    pub fn spec_id(&self) -> String {
        let json = serde_json::to_string(&self.resolved()).expect("a spec serialises");
        let digest = Sha256::digest(json.as_bytes());
        digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    pub fn validate(&self) -> Result<(), RfError> {
        let fs = self.sample_rate;
        if !(fs.is_finite() && fs > 0.0 && fs <= 1e12) {
            return Err(invalid("sample_rate", "must be positive and finite"));
        }
        if self.n_samples == 0 || self.n_samples > MAX_SAMPLES {
            return Err(invalid("n_samples", format!("must be 1..={MAX_SAMPLES}")));
        }
        if self.modulations.is_empty() {
            return Err(invalid("modulations", "name at least one"));
        }
        for m in &self.modulations {
            m.validate(fs)?;
            if self.snr_definition == SnrDefinition::EsN0 && !m.kind.has_symbols() {
                return Err(invalid(
                    "snr_definition",
                    format!("es_n0 needs symbols, and {} has none", m.kind.label()),
                ));
            }
        }
        self.snr_db.check("snr_db", -100.0, 200.0)?;
        if !(self.level_dbfs.is_finite() && self.level_dbfs <= 0.0 && self.level_dbfs >= -200.0) {
            return Err(invalid("level_dbfs", "must be in [-200, 0]"));
        }
        let i = &self.impairments;
        let nyq = fs / 2.0;
        let checks: [(&str, &Option<Range>, f64, f64); 10] = [
            ("impairments.cfo_hz", &i.cfo_hz, -nyq, nyq),
            (
                "impairments.cfo_drift_hz_per_s",
                &i.cfo_drift_hz_per_s,
                -1e12,
                1e12,
            ),
            (
                "impairments.phase_noise_linewidth_hz",
                &i.phase_noise_linewidth_hz,
                0.0,
                nyq,
            ),
            (
                "impairments.iq_amplitude_db",
                &i.iq_amplitude_db,
                -20.0,
                20.0,
            ),
            ("impairments.iq_phase_deg", &i.iq_phase_deg, -45.0, 45.0),
            ("impairments.dc_offset_dbc", &i.dc_offset_dbc, -200.0, 20.0),
            (
                "impairments.sample_rate_offset_ppm",
                &i.sample_rate_offset_ppm,
                -1e5,
                1e5,
            ),
            ("impairments.multipath_paths", &i.multipath_paths, 1.0, 64.0),
            ("impairments.doppler_hz", &i.doppler_hz, 0.0, nyq),
            ("impairments.rician_k_db", &i.rician_k_db, -100.0, 100.0),
        ];
        for (field, range, lo, hi) in checks {
            if let Some(r) = range {
                r.check(field, lo, hi)?;
            }
        }
        if i.multipath_paths.is_some() {
            let max = i.multipath_max_delay_s.unwrap_or(0.0);
            if !(max.is_finite() && max >= 0.0 && max * fs <= 4096.0) {
                return Err(invalid(
                    "impairments.multipath_max_delay_s",
                    "must be in [0, 4096 samples]",
                ));
            }
            if let Some(rms) = i.multipath_rms_delay_s {
                if !(rms.is_finite() && rms > 0.0) {
                    return Err(invalid(
                        "impairments.multipath_rms_delay_s",
                        "must be positive",
                    ));
                }
            }
        }
        if i.fading == Some(Fading::Rician) && i.rician_k_db.is_none() {
            return Err(invalid(
                "impairments.rician_k_db",
                "Rician fading needs a K factor",
            ));
        }
        if i.fading.is_some() && i.doppler_hz.is_none() {
            return Err(invalid(
                "impairments.doppler_hz",
                "fading needs a Doppler frequency",
            ));
        }
        if let Some(b) = i.quantize_bits {
            if !(2..=24).contains(&b) {
                return Err(invalid("impairments.quantize_bits", "must be 2..=24"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_through_serde_and_parse() {
        for k in ModKind::ALL {
            let json = serde_json::to_value(k).unwrap();
            assert_eq!(json.as_str().unwrap(), k.label());
            assert_eq!(ModKind::parse(k.label()).unwrap(), k);
        }
        assert!(ModKind::parse("qpsk2").unwrap_err().contains("known: tone"));
    }

    #[test]
    fn specs_round_trip_and_refuse_nonsense() {
        let mut spec = SynthSpec::default();
        spec.modulations.push(ModulationSpec::new(ModKind::Gmsk));
        spec.impairments.cfo_hz = Some(Range {
            min: -500.0,
            max: 500.0,
        });
        spec.validate().unwrap();
        let back = SynthSpec::from_json(&spec.to_json()).unwrap();
        assert_eq!(back, spec.resolved());
        assert_eq!(back.spec_id(), spec.spec_id());
        let mut bad = spec.clone();
        bad.impairments.cfo_hz = Some(Range {
            min: -2e5,
            max: 0.0,
        });
        assert!(bad.validate().unwrap_err().to_string().contains("cfo_hz"));
        let mut bad = spec.clone();
        bad.snr_definition = SnrDefinition::EsN0;
        bad.modulations.push(ModulationSpec::new(ModKind::Fm));
        assert!(bad.validate().unwrap_err().to_string().contains("es_n0"));
        assert!(SynthSpec::from_json("{\"sample_rate\": 1}").is_err());
        assert_eq!(
            Range::parse("-5:30").unwrap(),
            Range {
                min: -5.0,
                max: 30.0
            }
        );
        assert!(Range::parse("3:1").is_err());
        assert!(Range::parse("x").is_err());
    }
}
