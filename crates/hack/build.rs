// Empty: a build script makes cargo resolve the [build-dependencies] named in Cargo.toml.
fn main() {}
