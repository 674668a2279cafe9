//! How a Rust definition is written in C: the pieces the C header the BPF
//! programs are compiled against is made of (`header.rs` puts them together).
//!
//! The Rust definitions in this crate are the single source of truth for every
//! structure that crosses the kernel/user boundary; `constants.rs`, `layout.rs`
//! and `syscalls.rs` describe themselves in C with what this module provides, and
//! it knows nothing of them. The header carries a
//! `_Static_assert` on the size and on every field offset, computed here with
//! `offset_of!`, so that if clang ever lays a structure out differently from
//! Rust's `repr(C)` the BPF build fails instead of the two sides drifting.

use std::fmt::Write;

/// A Rust type with a C spelling.
pub trait CType {
    /// The C declaration of a field `name` of this type, e.g. `__u64 name[6]`.
    fn c_decl(name: &str) -> String;
}

macro_rules! c_scalar {
    ($($t:ty => $c:literal),* $(,)?) => {
        $(impl CType for $t {
            fn c_decl(name: &str) -> String {
                format!(concat!($c, " {}"), name)
            }
        })*
    };
}

c_scalar!(u8 => "__u8", u16 => "__u16", u32 => "__u32", u64 => "__u64",
          i8 => "__s8", i16 => "__s16", i32 => "__s32", i64 => "__s64");

impl<T: CType, const N: usize> CType for [T; N] {
    fn c_decl(name: &str) -> String {
        format!("{}[{N}]", T::c_decl(name))
    }
}

/// One field of a shared structure, as the generator sees it.
pub struct CField {
    pub name: &'static str,
    pub decl: String,
    pub offset: usize,
    pub doc: &'static str,
}

/// A structure shared with the BPF programs (implemented by [`shared_struct!`]).
///
/// # Safety
///
/// The type must be plain old data: `#[repr(C)]`, made only of integers and
/// arrays of integers with no implicit padding, so that every bit pattern is
/// a valid value and every byte of a value is initialized. Decoding copies
/// ring-buffer records straight into such types, and [`as_bytes`] reads
/// values back as bytes; both rely on it. [`shared_struct!`] only accepts
/// fields of [`CType`] types and asserts the layout in the generated C.
///
/// [`as_bytes`]: SharedStruct::as_bytes
pub unsafe trait SharedStruct: Sized + Copy {
    const C_NAME: &'static str;
    const DOC: &'static str;
    fn c_fields() -> Vec<CField>;

    /// An all-zero value: every shared structure is plain old data.
    fn zeroed() -> Self {
        // SAFETY: the trait's contract: all-zero is a valid value.
        unsafe { core::mem::zeroed() }
    }

    /// The value's bytes as the kernel sees them (what a ring-buffer record
    /// or a map value holds).
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: the trait's contract: no padding, so every byte of the
        // value is initialized; the slice borrows `self`.
        unsafe {
            core::slice::from_raw_parts((self as *const Self).cast::<u8>(), core::mem::size_of::<Self>())
        }
    }
}

/// Declares a `#[repr(C)]` structure shared with the BPF programs.
///
/// Fields may only have doc comments as attributes (they are copied into the C
/// header) and only types implementing [`CType`]. Padding must be explicit:
/// the generated static asserts catch any implicit padding mismatch.
#[macro_export]
macro_rules! shared_struct {
    (
        $(#[doc = $doc:literal])*
        pub struct $name:ident as $cname:literal {
            $( $(#[doc = $fdoc:literal])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[doc = $doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            $( $(#[doc = $fdoc])* pub $field: $ty, )*
        }

        // SAFETY: repr(C), fields of CType types only (integers and arrays
        // of them), padding explicit: the layout asserts of the generated C
        // header check it.
        unsafe impl $crate::cgen::SharedStruct for $name {
            const C_NAME: &'static str = $cname;
            const DOC: &'static str = concat!($($doc, "\n",)*);
            fn c_fields() -> Vec<$crate::cgen::CField> {
                vec![$(
                    $crate::cgen::CField {
                        name: stringify!($field),
                        decl: <$ty as $crate::cgen::CType>::c_decl(stringify!($field)),
                        offset: core::mem::offset_of!($name, $field),
                        doc: concat!($($fdoc, " ",)*),
                    },
                )*]
            }
        }

        impl $crate::cgen::CType for $name {
            fn c_decl(name: &str) -> String {
                format!("struct {} {}", $cname, name)
            }
        }

        #[cfg(feature = "user")]
        // SAFETY: repr(C), integers only, padding explicit (see the macro docs).
        unsafe impl aya::Pod for $name {}
    };
}

/// Appends the C definition of `T` and its layout asserts to `out`.
pub fn write_struct<T: SharedStruct>(out: &mut String) {
    let cname = T::C_NAME;
    write_comment(out, "", T::DOC);
    let _ = writeln!(out, "struct {cname} {{");
    let fields = T::c_fields();
    for f in &fields {
        if !f.doc.trim().is_empty() {
            write_comment(out, "\t", f.doc);
        }
        let _ = writeln!(out, "\t{};", f.decl);
    }
    let _ = writeln!(out, "}};");
    let size = core::mem::size_of::<T>();
    let _ = writeln!(
        out,
        "_Static_assert(sizeof(struct {cname}) == {size}, \"struct {cname}: size differs from Rust\");"
    );
    for f in &fields {
        let _ = writeln!(
            out,
            "_Static_assert(__builtin_offsetof(struct {cname}, {name}) == {off}, \"struct {cname}.{name}: offset differs from Rust\");",
            name = f.name,
            off = f.offset
        );
    }
    out.push('\n');
}

/// Appends `text` as a C comment, one `//` line per line of text.
pub fn write_comment(out: &mut String, indent: &str, text: &str) {
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{indent}// {line}");
    }
}

/// Appends `#define SP_<name> <value>` with its doc as a comment.
pub fn write_define(out: &mut String, name: &str, value: impl core::fmt::Display, doc: &str) {
    write_comment(out, "", doc);
    let _ = writeln!(out, "#define SP_{name} {value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_declarations_nest_in_c_order() {
        assert_eq!(<[u64; 6]>::c_decl("args"), "__u64 args[6]");
        assert_eq!(<i64>::c_decl("ret"), "__s64 ret");
    }
}
