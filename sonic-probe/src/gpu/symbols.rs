//! Where a CUDA library file's waiting calls are: the file offsets of the
//! exported functions of sonic-probe-common's gpu_apis table, read from
//! its dynamic symbol table (what the dynamic linker binds, so what a
//! caller reaches; a stripped library keeps it).
//!
//! A uprobe is attached at a file offset: the symbol's address less its
//! section's address, plus the section's offset. Two names at one address
//! (an alias) are one probe, under the first row that names it. A file
//! without any of the calls, or not an ELF object at all, is an error the
//! caller logs and skips.

use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use sonic_probe_common::gpu_apis::{gpu_api_of_symbol, Library};

/// One probe point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingCall {
    /// The gpu_apis row's id (the uprobe's cookie).
    pub api: u32,
    /// The exported name found.
    pub symbol: String,
    /// Where to attach, in the file.
    pub file_offset: u64,
}

/// Why a file has no probe points.
#[derive(Debug, thiserror::Error)]
pub enum SymbolsError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not an ELF object: {reason}")]
    NotElf { path: String, reason: String },
    #[error("{path} exports none of CUDA's waiting calls")]
    NoneExported { path: String },
}

/// The waiting calls `library`'s file at `path` exports, by file offset.
pub fn waiting_calls(path: &Path, library: Library) -> Result<Vec<WaitingCall>, SymbolsError> {
    let shown = path.display().to_string();
    let data = std::fs::read(path).map_err(|source| SymbolsError::Read { path: shown.clone(), source })?;
    let calls = waiting_calls_in(&data, library)
        .map_err(|reason| SymbolsError::NotElf { path: shown.clone(), reason })?;
    if calls.is_empty() {
        return Err(SymbolsError::NoneExported { path: shown });
    }
    Ok(calls)
}

/// The same, from the file's bytes (sorted by offset, one per offset).
pub fn waiting_calls_in(data: &[u8], library: Library) -> Result<Vec<WaitingCall>, String> {
    let elf = object::File::parse(data).map_err(|e| e.to_string())?;
    let mut out: Vec<WaitingCall> = Vec::new();
    for sym in elf.dynamic_symbols() {
        if sym.is_undefined() || sym.kind() != SymbolKind::Text {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        // A versioned name (cudaMemcpy@@libcudart.so.12) is its base name.
        let base = name.split('@').next().unwrap_or(name);
        let Some(api) = gpu_api_of_symbol(library, base) else { continue };
        let Some(section) = sym.section_index().and_then(|i| elf.section_by_index(i).ok()) else {
            continue;
        };
        let Some((section_offset, _)) = section.file_range() else { continue };
        let Some(file_offset) = sym.address().checked_sub(section.address()).map(|d| d + section_offset)
        else {
            continue;
        };
        out.push(WaitingCall { api: api.id, symbol: base.to_string(), file_offset });
    }
    // Table order first, so an alias goes to the row listed first.
    out.sort_by_key(|c| (c.file_offset, c.api));
    out.dedup_by_key(|c| c.file_offset);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_an_elf_object_says_so() {
        assert!(waiting_calls_in(b"not an ELF file", Library::Runtime).is_err());
        let err = waiting_calls(Path::new("/nonexistent/libcudart.so.12"), Library::Runtime).unwrap_err();
        assert!(err.to_string().contains("cannot read /nonexistent/libcudart.so.12"), "{err}");
    }

    /// An ELF object without CUDA (this test's own binary): no probe point.
    #[test]
    fn a_library_without_the_calls_has_none() {
        let me = std::env::current_exe().unwrap();
        let err = waiting_calls(&me, Library::Runtime).unwrap_err();
        assert!(matches!(err, SymbolsError::NoneExported { .. }), "{err}");
    }
}
