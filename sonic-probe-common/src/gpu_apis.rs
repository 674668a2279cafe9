//! The CUDA calls in which a thread waits for the GPU: one table, for the
//! uprobes (which exported functions of which library), the `api` label
//! and the BPF programs' api ids (the uprobe's cookie).
//!
//! Only calls that wait: the synchronizes and the synchronous copies
//! (a copy to or from pageable host memory waits for the stream before it
//! and for itself). Never the launches, the *Async copies or the queries:
//! they return at once, and are called far too often for a uprobe's cost.
//! Each row's symbols are every exported name that implements it: the
//! per-thread-default-stream entry points (`_ptsz`, `_ptds`, what
//! `--default-stream per-thread` builds call) and the driver API's
//! versioned `_v2` names. A row's `id` is fixed and never reused.
//!
//! Only the outermost waiting call of a thread is timed and counted: the
//! runtime's cudaStreamSynchronize calls the driver's cuStreamSynchronize
//! inside it, and that wait is the runtime call's, not a second one.

/// Which library a call is exported by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    /// The CUDA runtime, libcudart.so.* (a virtualenv's
    /// site-packages/nvidia/cuda_runtime/lib, a conda env, /usr/local/cuda).
    Runtime,
    /// The driver API, libcuda.so.1 (the NVIDIA driver's).
    Driver,
}

impl Library {
    /// Whether a file name (its last component) is this library's.
    pub fn matches(&self, file_name: &str) -> bool {
        match self {
            Library::Runtime => file_name.starts_with("libcudart.so"),
            Library::Driver => file_name.starts_with("libcuda.so"),
        }
    }
}

/// Which CUDA library a path (a mapped or opened file) names, from its
/// file name.
pub fn library_of(path: &str) -> Option<Library> {
    let name = path.rsplit('/').next()?;
    [Library::Runtime, Library::Driver].into_iter().find(|l| l.matches(name))
}

/// One waiting call.
#[derive(Clone, Copy, Debug)]
pub struct GpuApi {
    /// The api id (fixed, never reused; 0 is none).
    pub id: u32,
    /// The `api` label: the call's documented name.
    pub name: &'static str,
    pub library: Library,
    /// The exported functions that implement it.
    pub symbols: &'static [&'static str],
}

const fn api(id: u32, name: &'static str, library: Library, symbols: &'static [&'static str]) -> GpuApi {
    GpuApi { id, name, library, symbols }
}

use Library::{Driver, Runtime};

#[rustfmt::skip]
pub const GPU_APIS: &[GpuApi] = &[
    api(1, "cudaDeviceSynchronize", Runtime, &["cudaDeviceSynchronize"]),
    api(2, "cudaStreamSynchronize", Runtime, &["cudaStreamSynchronize", "cudaStreamSynchronize_ptsz"]),
    api(3, "cudaEventSynchronize", Runtime, &["cudaEventSynchronize"]),
    api(4, "cudaThreadSynchronize", Runtime, &["cudaThreadSynchronize"]),
    api(5, "cudaMemcpy", Runtime, &["cudaMemcpy", "cudaMemcpy_ptds"]),
    api(6, "cudaMemcpy2D", Runtime, &["cudaMemcpy2D", "cudaMemcpy2D_ptds"]),
    api(7, "cudaMemcpy3D", Runtime, &["cudaMemcpy3D", "cudaMemcpy3D_ptds"]),
    api(8, "cudaMemcpyPeer", Runtime, &["cudaMemcpyPeer"]),
    api(9, "cudaMemcpy3DPeer", Runtime, &["cudaMemcpy3DPeer", "cudaMemcpy3DPeer_ptds"]),
    api(10, "cudaMemcpyFromSymbol", Runtime, &["cudaMemcpyFromSymbol", "cudaMemcpyFromSymbol_ptds"]),
    api(11, "cudaMemcpyToSymbol", Runtime, &["cudaMemcpyToSymbol", "cudaMemcpyToSymbol_ptds"]),
    api(12, "cudaMemcpyFromArray", Runtime, &["cudaMemcpyFromArray", "cudaMemcpyFromArray_ptds"]),
    api(13, "cudaMemcpyToArray", Runtime, &["cudaMemcpyToArray", "cudaMemcpyToArray_ptds"]),
    api(14, "cudaMemcpy2DFromArray", Runtime, &["cudaMemcpy2DFromArray", "cudaMemcpy2DFromArray_ptds"]),
    api(15, "cudaMemcpy2DToArray", Runtime, &["cudaMemcpy2DToArray", "cudaMemcpy2DToArray_ptds"]),
    api(32, "cuCtxSynchronize", Driver, &["cuCtxSynchronize"]),
    api(33, "cuStreamSynchronize", Driver, &["cuStreamSynchronize", "cuStreamSynchronize_ptsz"]),
    api(34, "cuEventSynchronize", Driver, &["cuEventSynchronize"]),
    api(35, "cuMemcpy", Driver, &["cuMemcpy", "cuMemcpy_ptds"]),
    api(36, "cuMemcpyDtoH", Driver, &["cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"]),
    api(37, "cuMemcpyHtoD", Driver, &["cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"]),
    api(38, "cuMemcpyDtoD", Driver, &["cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds"]),
    api(39, "cuMemcpy2D", Driver, &["cuMemcpy2D_v2", "cuMemcpy2D_v2_ptds"]),
    api(40, "cuMemcpy3D", Driver, &["cuMemcpy3D_v2", "cuMemcpy3D_v2_ptds"]),
    api(41, "cuMemcpyPeer", Driver, &["cuMemcpyPeer", "cuMemcpyPeer_ptds"]),
];

/// The BPF program entered at the start of api `id`'s functions (one per
/// api: the uprobe's cookie needs 5.15, and GPU nodes run 5.10).
pub fn gpu_enter_program(id: u32) -> String {
    format!("gpu_enter_{id}")
}

/// The BPF program entered at the return of every waiting call (the api is
/// the one its entry noted in the thread's clock).
pub const GPU_EXIT_PROGRAM: &str = "gpu_exit";

/// Appends `#define SP_GPU_APIS(X)`, an X-macro of `X(id)` per row, from
/// which the C side defines one entry program per api.
pub(crate) fn write_c_list(out: &mut String) {
    out.push_str("/* The waiting GPU calls' api ids (gpu_apis.rs): X(id) per row. */\n");
    out.push_str("#define SP_GPU_APIS(X)");
    for a in GPU_APIS {
        out.push_str(&format!(" X({})", a.id));
    }
    out.push_str("\n\n");
}

/// The row of api id `id`.
pub fn gpu_api(id: u32) -> Option<&'static GpuApi> {
    GPU_APIS.iter().find(|a| a.id == id)
}

/// The row whose symbols include `symbol` among `library`'s.
pub fn gpu_api_of_symbol(library: Library, symbol: &str) -> Option<&'static GpuApi> {
    GPU_APIS.iter().find(|a| a.library == library && a.symbols.contains(&symbol))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_symbols_are_unique() {
        let mut ids: Vec<u32> = GPU_APIS.iter().map(|a| a.id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "an id used twice");
        assert!(!ids.contains(&0), "0 is no api");
        let mut syms: Vec<(bool, &str)> =
            GPU_APIS.iter().flat_map(|a| a.symbols.iter().map(move |s| (a.library == Runtime, *s))).collect();
        syms.sort_unstable();
        let n = syms.len();
        syms.dedup();
        assert_eq!(syms.len(), n, "a symbol in two rows");
    }

    #[test]
    fn no_call_that_returns_at_once_is_probed() {
        for a in GPU_APIS {
            for s in a.symbols {
                assert!(!s.contains("Async") && !s.contains("Launch") && !s.contains("Query"), "{s}");
                let prefix = if a.library == Runtime { "cuda" } else { "cu" };
                assert!(s.starts_with(prefix), "{s} in {:?}", a.library);
            }
        }
        assert!(Runtime.matches("libcudart.so.12") && !Runtime.matches("libcuda.so.1"));
        assert!(Driver.matches("libcuda.so.1") && !Driver.matches("libcudart.so.12"));
        assert_eq!(gpu_api_of_symbol(Runtime, "cudaStreamSynchronize_ptsz").map(|a| a.id), Some(2));
        assert_eq!(gpu_api(33).map(|a| a.name), Some("cuStreamSynchronize"));
    }

    #[test]
    fn the_c_list_names_every_row_once() {
        let mut out = String::new();
        write_c_list(&mut out);
        for a in GPU_APIS {
            assert_eq!(
                out.matches(&format!(" X({}) ", a.id)).count()
                    + out.matches(&format!(" X({})\n", a.id)).count(),
                1,
                "{out}"
            );
        }
        assert_eq!(gpu_enter_program(33), "gpu_enter_33");
    }
}
