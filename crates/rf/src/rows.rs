//! What an `rf-features` row is: the settings that decide it ([`RowSpec`], whose id names a
//! dataset's rows), the windows a recording is cut into, and the device that may compute the
//! windows' PSDs in one go ([`PsdDevice`]).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{invalid, RfError};
use crate::features::{FeatureConfig, Psd, WelchConfig};
use crate::Complex32;

/// The settings that decide the rows of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RowSpec {
    pub features: FeatureConfig,
    /// A row per window of this many milliseconds (the rest of a recording that fills no
    /// window is left out); `None`: one row per recording.
    pub window_ms: Option<f64>,
    /// Each row carries its Welch PSD (fftshift order, float32).
    pub psd: bool,
}

impl RowSpec {
    pub fn validate(&self) -> Result<(), RfError> {
        self.features.welch.validate()?;
        let fraction = self.features.obw_fraction;
        if !(fraction > 0.0 && fraction < 1.0) {
            return Err(invalid("obw_fraction", "must be between 0 and 1"));
        }
        if let Some(db) = self.features.calibration_db {
            if !db.is_finite() {
                return Err(invalid("calibration_db", "must be finite"));
            }
        }
        if let Some(ms) = self.window_ms {
            if !(ms.is_finite() && ms > 0.0) {
                return Err(invalid("window_ms", "must be positive"));
            }
        }
        Ok(())
    }

    /// A stable id of the settings (16 hex digits): rows of other settings never mix in one
    /// output.
    pub fn spec_id(&self) -> String {
        let json = serde_json::to_string(self).expect("a row spec serialises");
        let digest = Sha256::digest(json.as_bytes());
        digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    /// The windows (start, length) of a recording of `len` samples at `sample_rate`, in
    /// order; an error where the recording (or a window at its rate) is shorter than one
    /// Welch segment.
    pub fn windows(&self, len: usize, sample_rate: f64) -> Result<Vec<(usize, usize)>, RfError> {
        let nperseg = self.features.welch.nperseg;
        if !(sample_rate.is_finite() && sample_rate > 0.0) {
            return Err(invalid("sample_rate", "must be positive and finite"));
        }
        if len < nperseg {
            return Err(RfError::TooShort(format!(
                "{len} samples, fewer than one Welch segment ({nperseg})"
            )));
        }
        let width = match self.window_ms {
            None => len,
            Some(ms) => {
                let width = (ms * sample_rate / 1000.0).round();
                if width < nperseg as f64 {
                    return Err(RfError::TooShort(format!(
                        "a window of {width} samples, fewer than one Welch segment ({nperseg})"
                    )));
                }
                // A window longer than the recording gives no row: its width never matters.
                (width.min(len as f64 + 1.0)) as usize
            }
        };
        Ok((0..len / width).map(|k| (k * width, width)).collect())
    }
}

/// Where the Welch PSDs of many windows are computed at once (a GPU, through the gpu crate);
/// without one, a job computes each window's on the CPU.
pub trait PsdDevice: Send {
    /// The device as messages name it (`gpu:0`).
    fn name(&self) -> String;

    /// The PSD of each window at its sample rate, as [`crate::features::Welch::compute`]
    /// gives it; an error means the device cannot go on (the job moves to the CPU).
    fn welch(
        &mut self,
        windows: &[&[Complex32]],
        rates: &[f64],
        cfg: &WelchConfig,
    ) -> Result<Vec<Psd>, String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_tile_the_recording_and_drop_the_rest() {
        let spec = RowSpec {
            window_ms: Some(10.0),
            ..RowSpec::default()
        };
        assert_eq!(
            spec.windows(8192, 200e3).unwrap(),
            [(0, 2000), (2000, 2000), (4000, 2000), (6000, 2000)]
        );
        assert_eq!(RowSpec::default().windows(8192, 1.0).unwrap(), [(0, 8192)]);
        // Longer than the recording: no row (and no overflow of a huge width).
        let long = RowSpec {
            window_ms: Some(1e300),
            ..RowSpec::default()
        };
        assert_eq!(long.windows(8192, 200e3).unwrap(), []);
    }

    #[test]
    fn too_short_recordings_and_windows_say_so() {
        let e = RowSpec::default().windows(1000, 200e3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "too short: 1000 samples, fewer than one Welch segment (1024)"
        );
        let spec = RowSpec {
            window_ms: Some(1.0),
            ..RowSpec::default()
        };
        let e = spec.windows(8192, 200e3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "too short: a window of 200 samples, fewer than one Welch segment (1024)"
        );
    }

    #[test]
    fn bad_settings_are_refused_and_the_id_follows_every_setting() {
        for bad in [
            RowSpec {
                window_ms: Some(f64::NAN),
                ..RowSpec::default()
            },
            RowSpec {
                window_ms: Some(0.0),
                ..RowSpec::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let base = RowSpec::default();
        assert!(base.validate().is_ok());
        let psd = RowSpec {
            psd: true,
            ..RowSpec::default()
        };
        let windowed = RowSpec {
            window_ms: Some(5.0),
            ..RowSpec::default()
        };
        assert_eq!(base.spec_id(), RowSpec::default().spec_id());
        assert_ne!(base.spec_id(), psd.spec_id());
        assert_ne!(base.spec_id(), windowed.spec_id());
        assert_eq!(base.spec_id().len(), 16);
    }
}
