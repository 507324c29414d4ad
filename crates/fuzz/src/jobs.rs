//! `job_request`: the body of `POST /api/v1/jobs` as the service reads it (JSON, the
//! server's default device where it names none, then `JobOptions`), its plan on a CPU
//! server, and its paths resolved under a data root that holds symlinks pointing out of it.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use sonograph_dsp::CpuExtractor;
use sonograph_pipeline::options::SpecSource;
use sonograph_pipeline::JobOptions;
use sonograph_server::jobs::{plan_extract as plan, resolve_under};

use crate::harness::{assert_json_equal, run, Scratch};
use crate::spec::check_spec;

/// The bytes as a request body.
pub fn job_request(data: &[u8]) {
    run("job_request", || {
        let Ok(mut value) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if let Some(o) = value.as_object_mut() {
            o.entry("device").or_insert("cpu".into());
        }
        let Ok(options) = serde_json::from_value::<JobOptions>(value) else {
            return;
        };
        check_paths(&options);
        // A request names no file of the server's for its spec: planning refuses a path.
        if matches!(options.spec, Some(SpecSource::File(_))) {
            assert!(plan(&options).is_err(), "a spec path was planned");
            return;
        }
        let planned = plan(&options);
        match (&planned, &plan(&options)) {
            (Ok(_), Ok(_)) => {}
            (Err(a), Err(b)) => assert_eq!(a, b, "planning the same request twice"),
            _ => panic!("planning the same request twice gave different answers"),
        }
        let planned = match planned {
            Ok(planned) => planned,
            Err(e) => {
                assert!(
                    !e.contains('\n'),
                    "a refusal spans lines (the API answers it as one message): {e:?}"
                );
                return;
            }
        };
        let config = &planned.plan.config;
        config
            .check()
            .unwrap_or_else(|e| panic!("a planned job fails its own check: {e}"));
        assert!(config.shard_index < config.shard_count);
        assert!(config.chunk_seconds <= config.max_seconds);
        CpuExtractor::with_precision(&config.spec, config.precision)
            .unwrap_or_else(|e| panic!("a planned job's spec does not open: {e}"));
        check_spec(&config.spec, false);
        // The service keeps an accepted request in its job record and plans it again from
        // there after a restart: it must read back the same, and plan the same.
        let json = serde_json::to_value(&options).expect("options serialise");
        let back: JobOptions = serde_json::from_value(json.clone()).unwrap_or_else(|e| {
            panic!("an accepted request's JSON does not read back: {e}\n{json}")
        });
        assert_json_equal(
            "an accepted request through its JSON",
            &serde_json::to_value(&back).expect("options serialise"),
            &json,
        );
        if let Err(e) = plan(&back) {
            panic!("an accepted request, read back from its JSON, is refused: {e}");
        }
    })
}

/// A data root holding a file, a folder, and symlinks that lead out of it (to the filesystem
/// root and to the root's parent) and within it.
fn data_root(scratch: &Scratch) -> PathBuf {
    let root = scratch.path().join("root");
    std::fs::create_dir_all(root.join("sub/deeper")).expect("scratch folders");
    std::fs::create_dir_all(scratch.path().join("outside")).expect("scratch folders");
    std::fs::write(root.join("a.wav"), b"RIFF").expect("a scratch file");
    std::fs::write(scratch.path().join("outside/secret.csv"), b"id,path\n")
        .expect("a scratch file");
    #[cfg(unix)]
    {
        use std::os::unix::fs::symlink;
        symlink("/", root.join("to-slash")).expect("a symlink");
        symlink("..", root.join("up")).expect("a symlink");
        symlink("../outside", root.join("outside")).expect("a symlink");
        symlink("sub", root.join("inside")).expect("a symlink");
        // Leads out of the root to a folder that does not exist (yet).
        symlink("../outside/new", root.join("dangling")).expect("a symlink");
    }
    root.canonicalize().expect("the root resolves")
}

/// What the service would read or write for the request's paths lies under the data root.
fn check_paths(request: &JobOptions) {
    let mut paths = vec![&request.source, &request.out];
    paths.extend(request.model.as_ref());
    let scratch = Scratch::new("jobs");
    let root = data_root(&scratch);
    let roots = [root.clone()];
    for asked in paths {
        let Some(resolved) = resolve_under(asked, &roots) else {
            continue;
        };
        assert!(
            resolved.starts_with(&root),
            "{} resolved to {}, outside the root {}",
            asked.display(),
            resolved.display(),
            root.display()
        );
        assert!(
            resolved
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
            "{} resolved to {}, which is not a plain path",
            asked.display(),
            resolved.display()
        );
        // What exists of it is already resolved (no symlink left to follow out of the root).
        let existing = nearest_existing(&resolved);
        let real = existing
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", existing.display()));
        assert!(
            real.starts_with(&root),
            "{} resolved to {}, whose {} is really {}",
            asked.display(),
            resolved.display(),
            existing.display(),
            real.display()
        );
    }
}

/// The longest prefix of `path` that exists, symlinks followed (a dangling symlink is a name
/// that does not exist yet: creating a folder there fails).
fn nearest_existing(path: &Path) -> &Path {
    let mut p = path;
    while !p.exists() {
        p = p.parent().expect("the filesystem root exists");
    }
    p
}
