//! The AWS tools' shared files, read as the AWS CLI and boto3 read them, for what object_store
//! takes from the environment only: a profile's keys from the credentials file
//! (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`, section `[name]`) and its region
//! and endpoint from the config file (`AWS_CONFIG_FILE`, else `~/.aws/config`, section
//! `[profile name]`, or `[default]`). The profile is `AWS_PROFILE`, else `default`. The
//! environment's own values win over the files', as in the AWS tools.

use std::collections::HashMap;
use std::path::PathBuf;

/// What a profile gives.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Profile {
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
}

/// The profile the environment names, from the shared files (`env` reads a variable). `None`
/// where neither file has it and none was named; an error where `AWS_PROFILE` names a profile
/// that neither file has, or a file cannot be read.
pub fn from_files(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Profile>, String> {
    let home = env("HOME").map(PathBuf::from);
    let file = |var: &str, default: &str| {
        env(var)
            .map(PathBuf::from)
            .or_else(|| home.as_ref().map(|h| h.join(".aws").join(default)))
    };
    let named = env("AWS_PROFILE").filter(|p| !p.is_empty());
    let name = named.clone().unwrap_or_else(|| "default".into());
    let credentials_path = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    let config_path = file("AWS_CONFIG_FILE", "config");
    let read =
        |path: &Option<PathBuf>| -> Result<HashMap<String, HashMap<String, String>>, String> {
            match path {
                Some(p) => match std::fs::read_to_string(p) {
                    Ok(text) => Ok(sections(&text)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HashMap::new()),
                    Err(e) => Err(format!("{}: {e}", p.display())),
                },
                None => Ok(HashMap::new()),
            }
        };
    let credentials = read(&credentials_path)?;
    let config = read(&config_path)?;
    let keys = credentials.get(&name);
    // The config file names a profile `[profile NAME]`, but the default one `[default]`.
    let settings = config
        .get(&format!("profile {name}"))
        .or_else(|| (name == "default").then(|| config.get("default")).flatten());
    if keys.is_none() && settings.is_none() {
        return match named {
            Some(p) => Err(format!(
                "AWS_PROFILE={p}: no such profile in {} or {}",
                shown(&credentials_path),
                shown(&config_path)
            )),
            None => Ok(None),
        };
    }
    // Keys may sit in either file (the AWS CLI reads both), the credentials file's first.
    let get = |key: &str| {
        keys.and_then(|s| s.get(key))
            .or_else(|| settings.and_then(|s| s.get(key)))
            .cloned()
    };
    Ok(Some(Profile {
        access_key_id: get("aws_access_key_id"),
        secret_access_key: get("aws_secret_access_key"),
        session_token: get("aws_session_token"),
        region: get("region"),
        endpoint_url: get("endpoint_url"),
    }))
}

fn shown(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map_or_else(|| "(no HOME)".into(), |p| p.display().to_string())
}

/// An INI file's sections: `[name]` headers, `key = value` lines, `#` and `;` comments. Keys
/// before any header and lines of neither kind are passed over (the AWS tools' nested
/// `s3 =` blocks among them: their indented lines belong to no key read here).
fn sections(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue; // a nested setting's continuation
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            out.entry(name.clone()).or_default();
            current = Some(name);
        } else if let (Some(section), Some((key, value))) = (&current, line.split_once('=')) {
            out.entry(section.clone())
                .or_default()
                .insert(key.trim().to_lowercase(), value.trim().to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(pairs: &'a [(&'a str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    }

    /// A fresh folder of this test's own under the system's temporary folder.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sonograph-aws-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_named_profile_takes_keys_from_credentials_and_settings_from_config() {
        let dir = scratch("profiles");
        let credentials = dir.join("credentials");
        let config = dir.join("config");
        std::fs::write(
            &credentials,
            "# keys\n[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n\
             [ci]\naws_access_key_id=K\naws_secret_access_key = S  \naws_session_token = T\n",
        )
        .unwrap();
        std::fs::write(
            &config,
            "[default]\nregion = eu-west-1\n[profile   ci]\nregion = us-east-2\n\
             endpoint_url = http://127.0.0.1:9000\ns3 =\n  addressing_style = path\n",
        )
        .unwrap();
        let vars = [
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                credentials.display().to_string(),
            ),
            ("AWS_CONFIG_FILE", config.display().to_string()),
            ("AWS_PROFILE", "ci".to_string()),
        ];
        let p = from_files(&env_of(&vars)).unwrap().unwrap();
        assert_eq!(
            p,
            Profile {
                access_key_id: Some("K".into()),
                secret_access_key: Some("S".into()),
                session_token: Some("T".into()),
                region: Some("us-east-2".into()),
                endpoint_url: Some("http://127.0.0.1:9000".into()),
            }
        );
        // Without AWS_PROFILE: `default`, whose config section is `[default]`.
        let p = from_files(&env_of(&vars[..2])).unwrap().unwrap();
        assert_eq!(
            (p.access_key_id.as_deref(), p.region.as_deref()),
            (Some("D"), Some("eu-west-1"))
        );
        // A profile named but nowhere: one line naming both files.
        let missing = [
            vars[0].clone(),
            vars[1].clone(),
            ("AWS_PROFILE", "nope".into()),
        ];
        let e = from_files(&env_of(&missing)).unwrap_err();
        assert!(
            e.starts_with("AWS_PROFILE=nope: no such profile in "),
            "{e}"
        );
        assert!(e.contains("credentials") && e.contains("config"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_files_and_no_profile_named_is_nothing() {
        let dir = scratch("none");
        let vars = [("HOME", dir.display().to_string())];
        assert_eq!(from_files(&env_of(&vars)), Ok(None));
        assert_eq!(from_files(&env_of(&[])), Ok(None));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
