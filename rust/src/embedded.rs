//! data/ and queries/ compiled into the extension by build.rs, so an
//! installed wheel carries its sources of truth.
include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// The embedded file at `path` (relative to the repository root), if any.
pub fn file(path: &str) -> Option<&'static [u8]> {
    FILES.iter().find(|(p, _)| *p == path).map(|(_, b)| *b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_and_queries_are_embedded() {
        assert!(FILES.iter().any(|(p, _)| p.starts_with("data/hardware/")));
        assert!(FILES
            .iter()
            .any(|(p, _)| p.starts_with("queries/") && p.ends_with(".sql")));
        assert!(file("data/constants.csv").is_some());
        assert_eq!(DATA_HASH.len(), 16);
    }
}
