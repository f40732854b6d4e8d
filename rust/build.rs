//! Embeds the text sources of truth (data/ and queries/) into the extension so
//! that an installed wheel carries them, and fingerprints them so that the
//! DuckDB cache is rebuilt whenever one of them changes. The runtimes' measured
//! kernel tables (data/benchmarks/aic/, and data/benchmarks/measured/ for the kernels
//! timed on a device here) are calibration and validation inputs, not shipped: the
//! wheel carries what was fitted to them (data/hardware/link_collectives.csv ...).
use std::fs;
use std::path::{Path, PathBuf};

/// The folders of calibration-only kernel tables, relative to the repository root.
const KERNEL_TABLES: [&str; 2] = ["data/benchmarks/aic", "data/benchmarks/measured"];

fn collect(dir: &Path, root: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.')
            || p.strip_prefix(root)
                .is_ok_and(|r| KERNEL_TABLES.iter().any(|k| r == Path::new(k)))
        {
            continue;
        }
        if p.is_dir() {
            collect(&p, root, out);
        } else {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            out.push((rel, p));
        }
    }
}

/// FNV-1a 64-bit: a content fingerprint, not a security hash.
fn fnv1a(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_path_buf();
    let mut files = Vec::new();
    for sub in ["data", "queries"] {
        let d = root.join(sub);
        println!("cargo:rerun-if-changed={}", d.display());
        collect(&d, &root, &mut files);
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut src = String::from("pub static FILES: &[(&str, &[u8])] = &[\n");
    for (rel, path) in &files {
        let bytes = fs::read(path).unwrap();
        fnv1a(&mut hash, rel.as_bytes());
        fnv1a(&mut hash, &bytes);
        src.push_str(&format!(
            "    ({:?}, include_bytes!({:?})),\n",
            rel,
            path.canonicalize().unwrap().to_string_lossy()
        ));
    }
    src.push_str("];\n");
    src.push_str(&format!("pub const DATA_HASH: &str = \"{hash:016x}\";\n"));
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("embedded.rs");
    fs::write(out, src).unwrap();
}
