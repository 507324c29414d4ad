//! Nothing to use: this package only names the workspace's dependency features (see its
//! Cargo.toml) so that every build of a member resolves them alike.
