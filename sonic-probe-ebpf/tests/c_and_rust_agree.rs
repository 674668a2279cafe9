//! The Rust functions that claim to compute what the BPF programs compute
//! (latency and size buckets, a path's file class) are checked against the
//! C itself: the functions are cut out of `bpf/stats.h` and `bpf/files.h`
//! as they are, compiled for the host with clang-16 around the generated
//! layout header, and run on the same inputs as the Rust ones.
//!
//! Rust's side is what labels the metrics (bucket bounds) and what the
//! findings assume of a file's class, so a drift would mislabel them
//! without failing any other test.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use sonic_probe_common::{
    class_of_path, latency_bucket, size_bucket, DEFAULT_FILE_CLASSES, EXT_LEN, PATH_CAP,
};

fn bpf_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf")
}

/// The text of the C function `name` in `file`, from its signature line to
/// its closing brace.
fn c_function(file: &str, signature: &str) -> String {
    let text = std::fs::read_to_string(bpf_dir().join(file)).unwrap();
    let start = text.find(signature).unwrap_or_else(|| panic!("{signature} not in {file}"));
    let end = start + text[start..].find("\n}\n").expect("a closing brace") + 3;
    text[start..end].to_string()
}

/// The host program: reads `L n`, `S n` or `P path` lines and prints the
/// bucket or class the C computes.
fn harness_source() -> String {
    let classes: String =
        DEFAULT_FILE_CLASSES.iter().map(|(ext, class)| format!("\t{{\"{ext}\", {class}}},\n")).collect();
    format!(
        r#"#include <linux/types.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#ifndef __always_inline
#define __always_inline inline
#endif
{header}
{log2}
/* The file_classes map, filled as the daemon fills it. */
static const struct {{ const char *ext; __u32 class; }} classes[] = {{
{classes}}};
static int file_classes;
static __u32 *lookup_class(const struct ext_key *key)
{{
	static __u32 found;
	for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
		if (strncmp(classes[i].ext, (const char *)key->ext, sizeof(key->ext)) == 0) {{
			found = classes[i].class;
			return &found;
		}}
	return NULL;
}}
#define bpf_map_lookup_elem(map, key) ((void)(map), lookup_class(key))
{latency}
{size}
{class}
int main(void)
{{
	char line[8192];
	while (fgets(line, sizeof(line), stdin)) {{
		line[strcspn(line, "\n")] = 0;
		if (line[0] == 'L')
			printf("%u\n", latency_bucket(strtoull(line + 2, NULL, 10)));
		else if (line[0] == 'S')
			printf("%u\n", size_bucket(strtoull(line + 2, NULL, 10)));
		else if (line[0] == 'P') {{
			static struct thread_state st;
			memset(&st, 0, sizeof(st));
			size_t len = strlen(line + 2);
			if (len >= sizeof(st.path))
				len = sizeof(st.path) - 1;
			memcpy(st.path, line + 2, len);
			st.path_len = len;
			printf("%u\n", class_of_path(&st));
		}}
	}}
	return 0;
}}
"#,
        header = sonic_probe_common::header::generate().replace("#pragma once", ""),
        log2 = std::fs::read_to_string(bpf_dir().join("log2.h")).unwrap().replace("#pragma once", ""),
        latency = c_function("stats.h", "static __always_inline __u32 latency_bucket("),
        size = c_function("stats.h", "static __always_inline __u32 size_bucket("),
        class = c_function("files.h", "static __always_inline __u16 class_of_path("),
    )
}

/// The harness, compiled once for all tests.
fn harness() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-and-rust-agree");
        std::fs::create_dir_all(&dir).unwrap();
        let (src, bin) = (dir.join("harness.c"), dir.join("harness"));
        std::fs::write(&src, harness_source()).unwrap();
        let out = Command::new("clang-16")
            .args(["-O1", "-Wall", "-Werror", "-Wno-unused-variable", "-Wno-unused-function", "-o"])
            .arg(&bin)
            .arg(&src)
            .output()
            .expect("clang-16 (cargo xtask setup installs it)");
        let errors = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the C harness does not compile:\n{errors}");
        bin
    })
}

/// Runs the compiled C on `input` lines; one number per line back.
fn run_c(input: &[String]) -> Vec<u64> {
    let mut child = Command::new(harness()).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input.join("\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect()
}

/// Values around every power of two, and some in between.
fn numbers() -> Vec<u64> {
    let mut v = vec![0, 1, 2, 3, 1000, 123_456_789, u64::MAX];
    for shift in 0..64 {
        let p = 1u64 << shift;
        v.extend([p - 1, p, p + 1, p + p / 3]);
    }
    v
}

#[test]
fn buckets_are_the_same_in_c_and_rust() {
    let numbers = numbers();
    let mut input: Vec<String> = numbers.iter().map(|n| format!("L {n}")).collect();
    input.extend(numbers.iter().map(|n| format!("S {n}")));
    let c = run_c(&input);
    let (lat, size) = c.split_at(numbers.len());
    for (i, n) in numbers.iter().enumerate() {
        assert_eq!(lat[i], latency_bucket(*n) as u64, "latency bucket of {n} ns");
        assert_eq!(size[i], size_bucket(*n) as u64, "size bucket of {n} bytes");
    }
}

#[test]
fn file_classes_are_the_same_in_c_and_rust() {
    let mut paths: Vec<String> = [
        "/models/lip_decoder.pth",
        "/models/LIP.PTH",
        "model.safetensors",
        "/data/speech.mp3",
        "/data/frame.JPeG",
        "/data/clip.webm",
        "/etc/hostname",
        "/tmp/dir.pth/file",
        "/tmp/.pth",
        "/tmp/x.",
        "noext",
        ".bashrc",
        "/a/b.c",
        "/a/b.tar.gz",
        "/a/b.verylongextension",
        "/a/b.safetensorz",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // Extensions around the longest the BPF side looks at.
    for n in 1..=EXT_LEN + 1 {
        paths.push(format!("/m/x.{}", "p".repeat(n)));
        paths.push(format!("/m/x.pth{}", "h".repeat(n)));
    }
    // A path at the capture limit.
    paths.push(format!("/{}.pth", "a".repeat(PATH_CAP - 6)));
    let input: Vec<String> = paths.iter().map(|p| format!("P {p}")).collect();
    let c = run_c(&input);
    for (p, class) in paths.iter().zip(c) {
        assert_eq!(class, u64::from(class_of_path(p.as_bytes())), "class of {p}");
    }
}
