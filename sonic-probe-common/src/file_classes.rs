//! File classes (model, audio, image, video): the extension table the
//! daemon loads into the kernel's file_classes map, the class the BPF side
//! gives a path (bpf/files.h), and the `file_class` label of each class.

use crate::{constants::*, layout::ExtKey};

/// The `device_class` label of a FILE_CLASS_* value (ioctl's variant):
/// `gpu` or `other`.
pub fn device_class_name(class: u16) -> &'static str {
    if class == FILE_CLASS_GPU {
        "gpu"
    } else {
        "other"
    }
}

/// Whether a character device with this driver name (a line of the
/// "Character devices" section of /proc/devices) is a GPU: the NVIDIA
/// drivers (/dev/nvidia*: nvidia-frontend, nvidiactl, nvidia-uvm, ...), DRM
/// (/dev/dri/*) and compute accelerators (/dev/accel/*).
pub fn is_gpu_driver(name: &str) -> bool {
    name.starts_with("nvidia") || name == "drm" || name == "accel"
}

/// The majors of the GPU drivers in /proc/devices' text, at most
/// MAX_GPU_MAJORS, as probe_config.gpu_majors wants them.
pub fn gpu_majors(proc_devices: &str) -> [u32; MAX_GPU_MAJORS] {
    let mut out = [0; MAX_GPU_MAJORS];
    let chars = proc_devices.split("Block devices:").next().unwrap_or("");
    let majors = chars.lines().filter_map(|l| {
        let (major, name) = l.trim().split_once(' ')?;
        is_gpu_driver(name.trim()).then(|| major.parse::<u32>().ok()).flatten()
    });
    let mut n = 0;
    for m in majors {
        if n < MAX_GPU_MAJORS && m != 0 && !out[..n].contains(&m) {
            out[n] = m;
            n += 1;
        }
    }
    out
}

/// The name of a FILE_CLASS_* value (the `file_class` label).
pub fn file_class_name(class: u16) -> &'static str {
    match class {
        FILE_CLASS_NOT_FILE => "not_file",
        FILE_CLASS_MODEL => "model",
        FILE_CLASS_AUDIO => "audio",
        FILE_CLASS_IMAGE => "image",
        FILE_CLASS_VIDEO => "video",
        FILE_CLASS_GPU => "gpu",
        _ => "other",
    }
}

/// Default extension -> class table (lower case, without the dot).
pub const DEFAULT_FILE_CLASSES: &[(&str, u16)] = &[
    ("pth", FILE_CLASS_MODEL),
    ("pt", FILE_CLASS_MODEL),
    ("safetensors", FILE_CLASS_MODEL),
    ("bin", FILE_CLASS_MODEL),
    ("onnx", FILE_CLASS_MODEL),
    ("gguf", FILE_CLASS_MODEL),
    ("ckpt", FILE_CLASS_MODEL),
    ("pkl", FILE_CLASS_MODEL),
    ("engine", FILE_CLASS_MODEL),
    ("mp3", FILE_CLASS_AUDIO),
    ("wav", FILE_CLASS_AUDIO),
    ("flac", FILE_CLASS_AUDIO),
    ("ogg", FILE_CLASS_AUDIO),
    ("m4a", FILE_CLASS_AUDIO),
    ("aac", FILE_CLASS_AUDIO),
    ("opus", FILE_CLASS_AUDIO),
    ("png", FILE_CLASS_IMAGE),
    ("jpg", FILE_CLASS_IMAGE),
    ("jpeg", FILE_CLASS_IMAGE),
    ("webp", FILE_CLASS_IMAGE),
    ("bmp", FILE_CLASS_IMAGE),
    ("gif", FILE_CLASS_IMAGE),
    ("tif", FILE_CLASS_IMAGE),
    ("tiff", FILE_CLASS_IMAGE),
    ("mp4", FILE_CLASS_VIDEO),
    ("mkv", FILE_CLASS_VIDEO),
    ("mov", FILE_CLASS_VIDEO),
    ("avi", FILE_CLASS_VIDEO),
    ("webm", FILE_CLASS_VIDEO),
    ("flv", FILE_CLASS_VIDEO),
];

/// The class of a path by its extension, as the BPF side computes it
/// (`class_of_path` in bpf/files.h; sonic-probe-ebpf/tests/c_and_rust_agree.rs
/// runs both on the same paths).
pub fn class_of_path(path: &[u8]) -> u16 {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    let Some(dot) = name.iter().rposition(|&b| b == b'.') else {
        return FILE_CLASS_OTHER;
    };
    let ext = &name[dot + 1..];
    // The BPF side looks for the dot among the last EXT_LEN-1 bytes.
    if ext.is_empty() || ext.len() > EXT_LEN - 2 {
        return FILE_CLASS_OTHER;
    }
    let ext = String::from_utf8_lossy(ext).to_ascii_lowercase();
    DEFAULT_FILE_CLASSES.iter().find(|(e, _)| *e == ext).map_or(FILE_CLASS_OTHER, |&(_, c)| c)
}

/// An extension as a file_classes key.
pub fn ext_key(ext: &str) -> ExtKey {
    let mut k = ExtKey { ext: [0; EXT_LEN] };
    let b = ext.as_bytes();
    let n = b.len().min(EXT_LEN - 1);
    k.ext[..n].copy_from_slice(&b[..n]);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_classes_by_extension() {
        assert_eq!(class_of_path(b"/models/sonic/lip_decoder.pth"), FILE_CLASS_MODEL);
        assert_eq!(class_of_path(b"/data/SPEECH.MP3"), FILE_CLASS_AUDIO);
        assert_eq!(class_of_path(b"face.png"), FILE_CLASS_IMAGE);
        assert_eq!(class_of_path(b"/x/out.mp4"), FILE_CLASS_VIDEO);
        assert_eq!(class_of_path(b"/etc/hostname"), FILE_CLASS_OTHER);
        assert_eq!(class_of_path(b"/a.pth/readme"), FILE_CLASS_OTHER);
        assert_eq!(class_of_path(b"/x/file."), FILE_CLASS_OTHER);
        assert_eq!(class_of_path(b"/x/a.verylongextension"), FILE_CLASS_OTHER);
        assert_eq!(file_class_name(FILE_CLASS_NOT_FILE), "not_file");
        assert_eq!(file_class_name(FILE_CLASS_MODEL), "model");
        assert_eq!(file_class_name(FILE_CLASS_GPU), "gpu");
        assert_eq!(device_class_name(FILE_CLASS_GPU), "gpu");
        assert_eq!(device_class_name(FILE_CLASS_NOT_FILE), "other");
    }

    #[test]
    fn gpu_majors_from_proc_devices() {
        let text = "Character devices:\n  1 mem\n195 nvidia-frontend\n226 drm\n261 accel\n\
                    509 nvidia-uvm\n510 nvidia-caps\n  4 tty\n\nBlock devices:\n226 drm\n  7 loop\n";
        assert_eq!(gpu_majors(text), [195, 226, 261, 509, 510, 0, 0, 0]);
        assert_eq!(gpu_majors("Character devices:\n  1 mem\n"), [0; MAX_GPU_MAJORS]);
    }
}
