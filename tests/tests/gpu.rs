//! The GPU side seen from the CPU, with NVIDIA's real CUDA runtime library
//! (sonic_probe_tests::cuda_runtime; no GPU or driver here).

use sonic_probe::gpu::symbols::waiting_calls;
use sonic_probe_common::gpu_apis::{Library, GPU_APIS};

/// The probe points found in libcudart.so.12 are where the dynamic loader
/// puts its waiting calls: every table symbol the loader resolves is found
/// (one probe per address), and the bytes at each probe's file offset are
/// the function's own bytes in memory after dlopen.
#[test]
fn the_runtime_librarys_waiting_calls_are_where_the_loader_puts_them() {
    let lib = sonic_probe_tests::cuda_runtime();
    let calls = waiting_calls(&lib, Library::Runtime).unwrap();
    let file = std::fs::read(&lib).unwrap();
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: loading a library; its constructors need no driver.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {}", lib.display());
    let address = |symbol: &str| {
        let name = std::ffi::CString::new(symbol).unwrap();
        // SAFETY: a symbol lookup in the handle just opened.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        (!p.is_null()).then_some(p as usize)
    };
    let mut resolved: Vec<usize> = GPU_APIS
        .iter()
        .filter(|a| a.library == Library::Runtime)
        .flat_map(|a| a.symbols.iter())
        .filter_map(|s| address(s))
        .collect();
    resolved.sort_unstable();
    resolved.dedup();
    assert_eq!(calls.len(), resolved.len(), "probe points {calls:#?}");
    assert!(calls.len() >= 20, "libcudart 12.9 exports 25 of the table's names: {}", calls.len());
    for c in &calls {
        let at = address(&c.symbol).unwrap_or_else(|| panic!("{} not resolved by the loader", c.symbol));
        // SAFETY: 32 bytes of a function's code, mapped by dlopen.
        let in_memory = unsafe { std::slice::from_raw_parts(at as *const u8, 32) };
        let off = c.file_offset as usize;
        assert_eq!(&file[off..off + 32], in_memory, "{} at file offset {:#x}", c.symbol, c.file_offset);
    }
    // SAFETY: the handle opened above.
    unsafe { libc::dlclose(handle) };
}
