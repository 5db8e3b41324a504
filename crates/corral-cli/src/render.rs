//! Output: tables for people, JSON for scripts, and a progress indicator on stderr.

use std::io::{IsTerminal as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use corral_domain::{Sandbox, Snapshot, Timestamp};
use serde::Serialize;

use crate::Failure;

/// A table with aligned columns.
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (as many cells as columns).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, columns two spaces apart, no trailing blanks.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let width = widths.get(i).copied().unwrap_or(0);
                line.push_str(&format!("{cell:<width$}  "));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// Prints the table on stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }
}

/// Prints a value as pretty JSON on stdout.
pub fn json<T: Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Failure {
        message: format!("cannot print JSON: {e}"),
        code: crate::EXIT_API,
    })?;
    println!("{text}");
    Ok(())
}

/// A time as `2026-11-27T01:02:03Z`.
pub fn time(t: &Timestamp) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Sandboxes as a table.
pub fn sandboxes_table(items: &[Sandbox]) -> Table {
    let mut table = Table::new(&["ID", "PROVIDER", "STATUS", "NATIVE ID"]);
    for s in items {
        table.row(vec![
            s.id.to_string(),
            s.provider.to_string(),
            s.status.to_string(),
            s.metadata.native_provider_id.clone().unwrap_or_default(),
        ]);
    }
    table
}

/// Snapshots as a table.
pub fn snapshots_table(items: &[Snapshot]) -> Table {
    let mut table = Table::new(&["ID", "SANDBOX", "NAME", "STATUS", "SIZE", "CREATED"]);
    for s in items {
        table.row(vec![
            s.id.to_string(),
            s.sandbox_id.to_string(),
            s.name.clone().unwrap_or_default(),
            s.status.to_string(),
            s.size_bytes.map_or_else(String::new, |b| b.to_string()),
            time(&s.created_at),
        ]);
    }
    table
}

/// A spinner on stderr while something long runs, only when stderr is a terminal (a script's
/// captured stderr gets nothing). It erases itself when finished.
#[derive(Debug)]
pub struct Progress {
    done: Option<Arc<AtomicBool>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// Starts the spinner with `label`, if stderr is a terminal.
    pub fn start(label: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self {
                done: None,
                thread: None,
            };
        }
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let label = label.to_owned();
        let thread = std::thread::spawn(move || {
            let frames = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
            let started = std::time::Instant::now();
            let mut i = 0usize;
            while !flag.load(Ordering::Relaxed) {
                let frame = frames[i % frames.len()];
                let secs = started.elapsed().as_secs_f32();
                eprint!("\r{frame} {label} ({secs:.1}s)");
                let _ = std::io::stderr().flush();
                i += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            // Erase the line: clear to its end.
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        });
        Self {
            done: Some(done),
            thread: Some(thread),
        }
    }

    /// Stops and erases the spinner.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(done) = self.done.take() {
            done.store(true, Ordering::Relaxed);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_table_aligns_its_columns_and_trims_line_ends() {
        let mut t = Table::new(&["ID", "STATUS"]);
        t.row(vec!["sbx_long_id".into(), "ready".into()]);
        t.row(vec!["s".into(), String::new()]);
        assert_eq!(t.render(), "ID           STATUS\nsbx_long_id  ready\ns\n");
    }

    #[test]
    fn snapshots_render_with_their_sandbox_name_status_size_and_time() {
        let snapshot: Snapshot = serde_json::from_value(serde_json::json!({
            "id": "snp_local_01j9zzzzzzzzzzzzzzzzzzzzzz",
            "sandboxId": "sbx_local_01j9zzzzzzzzzzzzzzzzzzzzzz",
            "provider": "local",
            "name": "before",
            "status": "ready",
            "sizeBytes": 4096,
            "createdAt": "2026-12-01T15:00:00Z",
            "deletedAt": null
        }))
        .unwrap();
        let unnamed = Snapshot {
            name: None,
            size_bytes: None,
            ..snapshot.clone()
        };
        assert_eq!(
            snapshots_table(&[snapshot, unnamed]).render(),
            "ID                                    SANDBOX                               NAME    STATUS  SIZE  CREATED\n\
             snp_local_01j9zzzzzzzzzzzzzzzzzzzzzz  sbx_local_01j9zzzzzzzzzzzzzzzzzzzzzz  before  ready   4096  2026-12-01T15:00:00Z\n\
             snp_local_01j9zzzzzzzzzzzzzzzzzzzzzz  sbx_local_01j9zzzzzzzzzzzzzzzzzzzzzz          ready         2026-12-01T15:00:00Z\n"
        );
    }
}
