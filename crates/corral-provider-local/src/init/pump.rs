//! Copying a durable command's output from its pipe into its file, in the init.
//!
//! The command writes to a pipe, never to the file: it cannot truncate the file, seek in it
//! or write past what it produced, so the file's offsets are the stream's, always (a reader
//! resumes at a byte offset). The file lives in the sandbox's host directory, on the
//! volume of the sandboxes root (not on the sandbox's own filesystem, whose quota does not
//! bound it), so the pump keeps at most [`KEPT`] bytes of each stream on disk: past that,
//! the oldest are dropped by punching a hole (`FALLOC_FL_PUNCH_HOLE`, the file's length
//! and offsets unchanged). A reader finds holes with `SEEK_DATA` and reports them as a gap
//! of known length, as the service does for output its own retention dropped.

use std::os::fd::OwnedFd;

/// Bytes of each stream kept on disk, the newest (32 MiB: twice what the service keeps of a
/// command by default, so a reader that was away still finds everything the service would
/// have kept).
pub(crate) const KEPT: u64 = 32 << 20;
/// Holes are punched in steps at least this long (fewer calls).
const PUNCH_STEP: u64 = 1 << 20;
/// Holes start and end on this boundary (a multiple of any block size in use), so no block
/// is left half zeroed and `SEEK_DATA` sees exactly the holes punched.
const ALIGN: u64 = 64 << 10;
/// Bytes copied per stream per turn of the init's loop, so one chatty command does not keep
/// the init from its requests and its other commands.
const BUDGET: usize = 1 << 20;

/// One stream of a durable command.
#[derive(Debug)]
pub(crate) struct Pump {
    /// The pipe's read end (non-blocking), until its end.
    pipe: Option<OwnedFd>,
    /// The file, written at explicit offsets.
    file: OwnedFd,
    /// Bytes of the stream so far: the file's length.
    written: u64,
    /// The start of the stream up to here is a hole.
    punched: u64,
    /// Whether the file's filesystem punches holes (it stops trying at the first refusal).
    can_punch: bool,
}

impl Pump {
    /// Copies `pipe` into `file` (empty, written from offset 0).
    pub(crate) fn new(pipe: OwnedFd, file: OwnedFd) -> Self {
        let _ = rustix::fs::fcntl_setfl(&pipe, rustix::fs::OFlags::NONBLOCK);
        Self {
            pipe: Some(pipe),
            file,
            written: 0,
            punched: 0,
            can_punch: true,
        }
    }

    /// The pipe, while it has not ended.
    pub(crate) fn pipe(&self) -> Option<&OwnedFd> {
        self.pipe.as_ref()
    }

    /// Whether the stream has ended (every writer of the pipe is gone).
    pub(crate) fn done(&self) -> bool {
        self.pipe.is_none()
    }

    /// Stops copying (what the pipe still holds is not read).
    pub(crate) fn close(&mut self) {
        self.pipe = None;
    }

    /// Copies what the pipe holds now, at most [`BUDGET`] bytes; notes its end.
    pub(crate) fn drain(&mut self, buf: &mut [u8]) {
        let mut moved = 0;
        while moved < BUDGET {
            let Some(pipe) = &self.pipe else {
                break;
            };
            match rustix::io::read(pipe, &mut *buf) {
                Ok(0) => self.pipe = None,
                Ok(n) => {
                    self.write(&buf[..n]);
                    moved += n;
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => break,
                Err(_) => self.pipe = None,
            }
        }
        self.trim();
    }

    /// Appends `data` at the stream's offset. Bytes that cannot be written (a full volume)
    /// still count: the stream's offsets stay true, and the missing bytes read as a hole.
    fn write(&mut self, data: &[u8]) {
        let mut at = 0;
        while at < data.len() {
            let offset = self.written + at as u64;
            match rustix::io::pwrite(&self.file, &data[at..], offset) {
                Ok(0) => break,
                Ok(n) => at += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
        self.written += data.len() as u64;
    }

    /// Drops the oldest bytes beyond [`KEPT`].
    fn trim(&mut self) {
        if !self.can_punch {
            return;
        }
        let keep_from = self.written.saturating_sub(KEPT) / ALIGN * ALIGN;
        if keep_from < self.punched + PUNCH_STEP {
            return;
        }
        let flags = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
        match rustix::fs::fallocate(&self.file, flags, self.punched, keep_from - self.punched) {
            Ok(()) => self.punched = keep_from,
            Err(_) => self.can_punch = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    #[test]
    fn output_past_the_kept_bytes_is_dropped_from_the_start_and_offsets_stay_true() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout");
        let file: OwnedFd = std::fs::File::create(&path).unwrap().into();
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut pump = Pump::new(r, file);
        let chunk = vec![7u8; 1 << 20];
        let mut buf = vec![0u8; 64 << 10];
        let total = KEPT + (8 << 20);
        let mut sent = 0;
        while sent < total {
            // Writes of at most the pipe's capacity, each drained before the next.
            for piece in chunk.chunks(32 << 10) {
                rustix::io::write(&w, piece).unwrap();
                pump.drain(&mut buf);
            }
            sent += chunk.len() as u64;
        }
        drop(w);
        pump.drain(&mut buf);
        assert!(pump.done());
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), total, "the file's length is the stream's");
        let on_disk = meta.blocks() * 512;
        if pump.can_punch {
            assert!(
                on_disk <= KEPT + PUNCH_STEP + ALIGN,
                "{on_disk} bytes on disk"
            );
            let f = std::fs::File::open(&path).unwrap();
            let data = rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(0)).unwrap();
            assert!(
                data >= total - KEPT - PUNCH_STEP - ALIGN && data.is_multiple_of(ALIGN),
                "{data}"
            );
        }
    }
}
