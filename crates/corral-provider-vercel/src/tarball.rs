//! The gzipped tarball Vercel's `fs/write` takes.

use std::io::Write as _;

/// A path made relative to `/` with `.` and `..` resolved (as the SDK's `normalizePath` with
/// `extractDir` `/`); relative paths are first resolved against `cwd`.
pub(crate) fn entry_name(path: &str, cwd: &str) -> String {
    let full = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{cwd}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in full.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// A gzipped tar holding one regular file `name` (mode 0644).
pub(crate) fn single_file(name: &str, content: &[u8]) -> std::io::Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    let mut header = tar::Header::new_gnu();
    header.set_size(content.len() as u64);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    // GNU long-name entries carry paths beyond ustar's 100 bytes.
    tar.append_data(&mut header, name, content)?;
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn names_are_relative_to_the_root_and_normalized() {
        assert_eq!(
            entry_name("/tmp/a/../b.txt", "/vercel/sandbox"),
            "tmp/b.txt"
        );
        assert_eq!(
            entry_name("x/y.txt", "/vercel/sandbox"),
            "vercel/sandbox/x/y.txt"
        );
    }

    #[test]
    fn the_archive_is_a_gzipped_tar_of_the_exact_bytes_even_with_a_long_name() {
        let name = format!("tmp/{}/f.bin", "d".repeat(150));
        let content: Vec<u8> = (0..=255u8).collect();
        let gz = single_file(&name, &content).unwrap();
        assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip magic");
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&gz[..]));
        let mut entries = archive.entries().unwrap();
        let mut entry = entries.next().unwrap().unwrap();
        assert_eq!(entry.path().unwrap().to_str().unwrap(), name);
        let mut got = Vec::new();
        entry.read_to_end(&mut got).unwrap();
        assert_eq!(got, content);
        assert!(entries.next().is_none());
    }
}
