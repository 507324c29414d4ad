//! Tests' check that a Rust struct mirrors a WGSL struct: field by field, name, byte offset and
//! scalar type, as naga (wgpu's own WGSL front end) lays the WGSL one out. A mirror that drifts
//! from its shader would hand the kernels garbage without any error.

/// A field of a Rust mirror: its name, byte offset and WGSL scalar type.
pub type Field = (&'static str, usize, &'static str);

/// The fields of a `#[repr(C)]` struct for [`check_mirror`]: `fields!(T { a: "u32", ... })`.
macro_rules! fields {
    ($ty:ty { $($name:ident: $wgsl:literal),* $(,)? }) => {
        &[$((stringify!($name), std::mem::offset_of!($ty, $name), $wgsl)),*]
    };
}
pub(crate) use fields;

/// Checks `rust` (of `rust_size` bytes) against the struct `name` of the WGSL `source`.
pub fn check_mirror(source: &str, name: &str, rust: &[Field], rust_size: usize) {
    let module = naga::front::wgsl::parse_str(source).expect("the kernel parses");
    let (members, span) = module
        .types
        .iter()
        .find_map(|(_, ty)| match &ty.inner {
            naga::TypeInner::Struct { members, span } if ty.name.as_deref() == Some(name) => {
                Some((members.clone(), *span))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no struct {name} in the kernel"));
    let wgsl: Vec<(String, usize, String)> = members
        .iter()
        .map(|m| {
            let scalar = match &module.types[m.ty].inner {
                naga::TypeInner::Scalar(s) => match (s.kind, s.width) {
                    (naga::ScalarKind::Uint, 4) => "u32",
                    (naga::ScalarKind::Sint, 4) => "i32",
                    (naga::ScalarKind::Float, 4) => "f32",
                    other => panic!("{name}: unexpected scalar {other:?}"),
                },
                other => panic!("{name}: unexpected member type {other:?}"),
            };
            (
                m.name.clone().unwrap_or_default(),
                m.offset as usize,
                scalar.to_string(),
            )
        })
        .collect();
    let rust: Vec<(String, usize, String)> = rust
        .iter()
        .map(|(n, o, t)| (n.to_string(), *o, t.to_string()))
        .collect();
    assert_eq!(
        rust, wgsl,
        "{name}: the Rust mirror and the WGSL struct differ"
    );
    assert_eq!(rust_size, span as usize, "{name}: size");
}
