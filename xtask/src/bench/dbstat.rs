//! What the databases themselves report during a run: commits (PostgreSQL's statistics, or the
//! commit records in a SQLite WAL file) and PostgreSQL's `pg_stat_activity` sampled while load
//! runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Runs one `psql` query on `url`; its unaligned, tuples-only output.
async fn psql(url: &str, sql: &str) -> Result<String, String> {
    let out = tokio::process::Command::new("psql")
        .args([
            url,
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "psql failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// PostgreSQL's cumulative counters at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PgCounters {
    /// `pg_stat_database.xact_commit` of the database: every committed transaction, read-only
    /// ones included.
    pub(crate) xact_commit: u64,
    /// `pg_stat_wal.wal_sync` (the whole server): WAL flushes to disk.
    pub(crate) wal_sync: u64,
}

/// Reads the counters of database `database` over the server's `postgres` database (so the
/// reading's own transaction is not counted in `database`).
pub(crate) async fn pg_counters(admin_url: &str, database: &str) -> Result<PgCounters, String> {
    let out = psql(
        admin_url,
        &format!(
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = '{database}'), \
             (SELECT wal_sync FROM pg_stat_wal)"
        ),
    )
    .await?;
    let mut fields = out.trim().split('|').map(|f| f.parse::<u64>().ok());
    match (fields.next().flatten(), fields.next().flatten()) {
        (Some(xact_commit), Some(wal_sync)) => Ok(PgCounters {
            xact_commit,
            wal_sync,
        }),
        _ => Err(format!("unexpected counters from psql: {}", out.trim())),
    }
}

/// The commit records in a SQLite WAL file since the WAL last restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WalCommits {
    /// The header's salts: they change when the WAL restarts after a checkpoint, which
    /// makes counts before and after incomparable.
    pub(crate) salts: (u32, u32),
    /// Frames whose header carries a database size, i.e. the last frame of a transaction.
    pub(crate) commits: u64,
    /// All valid frames (pages written).
    pub(crate) frames: u64,
}

/// The WAL file next to the SQLite database at `db`.
pub(crate) fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// Counts the commit records in the WAL file at `path` (format: sqlite.org/fileformat.html,
/// "The Write-Ahead Log"): a 32-byte header (page size at 8, salts at 16 and 20), then
/// frames of a 24-byte header (non-zero "database size after commit" at 4 marks a commit;
/// salts at 8 and 12 equal the header's while the frame is current) and one page.
pub(crate) fn wal_commits(path: &Path) -> Result<WalCommits, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_wal(&bytes).ok_or_else(|| format!("{} is not a SQLite WAL file", path.display()))
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn parse_wal(bytes: &[u8]) -> Option<WalCommits> {
    let magic = be32(bytes, 0)?;
    if magic & !1 != 0x377f_0682 {
        return None;
    }
    let page = usize::try_from(be32(bytes, 8)?).ok()?;
    if page < 512 {
        return None;
    }
    let salts = (be32(bytes, 16)?, be32(bytes, 20)?);
    let (mut commits, mut frames) = (0, 0);
    let mut at = 32;
    // A frame counts only when whole and stamped with the current salts; the first that is
    // not ends the log (older frames past it belong to a WAL generation already checkpointed).
    while at + 24 + page <= bytes.len() {
        if (be32(bytes, at + 8)?, be32(bytes, at + 12)?) != salts {
            break;
        }
        frames += 1;
        if be32(bytes, at + 4)? != 0 {
            commits += 1;
        }
        at += 24 + page;
    }
    Some(WalCommits {
        salts,
        commits,
        frames,
    })
}

/// `pg_stat_activity` of the other connections to a database, sampled every `every` for
/// `rounds` rounds: how many connection-samples were seen in each (state, wait event type,
/// wait event), most first.
pub(crate) struct Activity {
    pub(crate) rounds: u32,
    pub(crate) every: Duration,
    pub(crate) counts: Vec<(String, String, String, u64)>,
}

/// Samples `pg_stat_activity` from inside one `psql` session on `url` (the database the
/// servers use), so sampling costs one loop in one backend rather than a process per sample.
/// Each round clears the statistics snapshot first: inside a transaction PostgreSQL would
/// otherwise show the same snapshot every time.
pub(crate) async fn sample_activity(
    url: &str,
    every: Duration,
    rounds: u32,
) -> Result<Activity, String> {
    let sql = format!(
        "CREATE TEMP TABLE bench_samples (state text, wait_event_type text, wait_event text); \
         DO $$ BEGIN FOR i IN 1..{rounds} LOOP \
           PERFORM pg_stat_clear_snapshot(); \
           INSERT INTO bench_samples \
             SELECT coalesce(state, '?'), coalesce(wait_event_type, 'none'), \
                    coalesce(wait_event, '') \
             FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND backend_type = 'client backend'; \
           PERFORM pg_sleep({}); \
         END LOOP; END $$; \
         SELECT state, wait_event_type, wait_event, count(*) FROM bench_samples \
         GROUP BY 1, 2, 3 ORDER BY 4 DESC, 1, 2, 3;",
        every.as_secs_f64()
    );
    let out = psql(url, &sql).await?;
    let mut counts = Vec::new();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('|').collect();
        if let [state, kind, event, n] = f.as_slice()
            && let Ok(n) = n.trim().parse()
        {
            counts.push(((*state).into(), (*kind).into(), (*event).into(), n));
        } else {
            return Err(format!("unexpected pg_stat_activity sample line: {line}"));
        }
    }
    Ok(Activity {
        rounds,
        every,
        counts,
    })
}

impl Activity {
    /// Connection-samples in all.
    pub(crate) fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.3).sum()
    }

    /// Connection-samples by wait event type, most first.
    pub(crate) fn by_type(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for (_, kind, _, n) in &self.counts {
            match out.iter_mut().find(|(k, _)| k == kind) {
                Some((_, m)) => *m += n,
                None => out.push((kind.clone(), *n)),
            }
        }
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "rounds": self.rounds,
            "every_ms": self.every.as_millis() as u64,
            "samples": self.counts.iter().map(|(s, k, e, n)| serde_json::json!(
                {"state": s, "wait_event_type": k, "wait_event": e, "count": n})).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(page: usize, commit: u32, salts: (u32, u32)) -> Vec<u8> {
        let mut f = vec![0u8; 24 + page];
        f[0..4].copy_from_slice(&1u32.to_be_bytes());
        f[4..8].copy_from_slice(&commit.to_be_bytes());
        f[8..12].copy_from_slice(&salts.0.to_be_bytes());
        f[12..16].copy_from_slice(&salts.1.to_be_bytes());
        f
    }

    fn header(page: u32, salts: (u32, u32)) -> Vec<u8> {
        let mut h = vec![0u8; 32];
        h[0..4].copy_from_slice(&0x377f_0682u32.to_be_bytes());
        h[8..12].copy_from_slice(&page.to_be_bytes());
        h[16..20].copy_from_slice(&salts.0.to_be_bytes());
        h[20..24].copy_from_slice(&salts.1.to_be_bytes());
        h
    }

    #[test]
    fn wal_commits_count_current_commit_frames_and_stop_at_stale_or_torn_ones() {
        let salts = (7, 9);
        let mut wal = header(512, salts);
        wal.extend(frame(512, 0, salts));
        wal.extend(frame(512, 3, salts));
        wal.extend(frame(512, 4, salts));
        wal.extend(frame(512, 5, (6, 1))); // left over from the previous generation
        wal.extend(frame(512, 6, salts));
        let counted = parse_wal(&wal).unwrap();
        assert_eq!(
            (counted.commits, counted.frames, counted.salts),
            (2, 3, salts)
        );

        let mut torn = header(512, salts);
        torn.extend(frame(512, 3, salts));
        torn.extend(&frame(512, 4, salts)[..100]);
        assert_eq!(parse_wal(&torn).unwrap().commits, 1);

        assert!(parse_wal(b"not a wal file at all, not at all......").is_none());
    }

    #[test]
    fn activity_sums_by_wait_event_type() {
        let a = Activity {
            rounds: 2,
            every: Duration::from_millis(50),
            counts: vec![
                ("idle".into(), "Client".into(), "ClientRead".into(), 5),
                ("active".into(), "none".into(), String::new(), 3),
                ("active".into(), "Client".into(), "ClientWrite".into(), 1),
            ],
        };
        assert_eq!(a.total(), 9);
        assert_eq!(
            a.by_type(),
            [("Client".to_owned(), 6), ("none".to_owned(), 3)]
        );
    }
}
