use std::time::Duration;

use corral_domain::{CommandId, CommandState, OperationId, OutputStream, Provider, SandboxId};
use corral_registry::Backend;
use corral_registry::testing::TestDb;
use corral_registry::{Append, CommandJournal, JournalEvent, NewCommand, ProjectId, RegistryError};
use futures::StreamExt as _;

use crate::{on_both_backends, registry};

on_both_backends!(commands:
    a_command_is_recorded_started_and_scoped_to_its_project_and_sandbox,
    appends_get_consecutive_sequence_numbers_and_count_bytes_and_gaps,
    only_the_lease_holder_appends_or_ends_and_a_lapsed_lease_is_taken_over,
    retention_drops_the_oldest_bytes_as_one_gap_per_stream,
    events_are_bounded_in_number_as_well_as_bytes,
    every_move_of_a_journal_is_announced_to_listeners_on_postgres,
    a_page_of_events_is_bounded_in_bytes_but_never_empty,
    stdin_counts_move_only_from_the_expected_value,
    a_kill_reason_decides_the_final_state_and_an_ended_command_stays_ended,
    listing_is_newest_first_with_a_state_filter_and_cursor,
    project_retention_drops_the_oldest_commands_output_first,
);

const LEASE: Duration = Duration::from_secs(30);

async fn setup(db: &TestDb) -> (CommandJournal, ProjectId, SandboxId) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    (
        CommandJournal::new(reg.database().clone()),
        project,
        SandboxId::new(Provider::Local),
    )
}

fn new_command(project: ProjectId, sandbox: SandboxId, owner: &str) -> NewCommand {
    NewCommand {
        id: CommandId::new(),
        project_id: project,
        sandbox_id: sandbox,
        operation_id: OperationId::new(),
        command: "echo hi".into(),
        tag: Some("build".into()),
        stdin: true,
        timeout_seconds: 60,
        owner: owner.into(),
        lease: LEASE,
    }
}

fn out(stream: OutputStream, offset: u64, data: &[u8]) -> Append {
    Append::Output {
        stream,
        offset,
        data: data.to_vec(),
    }
}

pub(crate) async fn a_command_is_recorded_started_and_scoped_to_its_project_and_sandbox(
    db: &TestDb,
) {
    let (j, project, sandbox) = setup(db).await;
    let new = new_command(project, sandbox, "a");
    let rec = j.insert(new.clone()).await.unwrap();
    assert_eq!(rec.state, CommandState::Starting);
    assert_eq!(rec.next_seq, 1);
    assert_eq!(rec.owner.as_deref(), Some("a"));
    let rec = j.started(new.id, "pid-7").await.unwrap();
    assert_eq!(rec.state, CommandState::Running);
    assert_eq!(rec.handle.as_deref(), Some("pid-7"));
    assert!(matches!(
        j.started(new.id, "again").await,
        Err(RegistryError::Conflict { .. })
    ));
    assert_eq!(
        j.get(project, sandbox, new.id).await.unwrap(),
        Some(rec.clone())
    );
    let other_sandbox = SandboxId::new(Provider::Local);
    assert_eq!(j.get(project, other_sandbox, new.id).await.unwrap(), None);
    let other_project = registry(db).await.create_project("q").await.unwrap().id;
    assert_eq!(j.get(other_project, sandbox, new.id).await.unwrap(), None);
    assert_eq!(
        j.by_operation(new.operation_id)
            .await
            .unwrap()
            .map(|r| r.id),
        Some(new.id)
    );
    j.remove(new.id).await.unwrap();
    assert_eq!(j.get(project, sandbox, new.id).await.unwrap(), None);
}

pub(crate) async fn appends_get_consecutive_sequence_numbers_and_count_bytes_and_gaps(db: &TestDb) {
    let (j, project, sandbox) = setup(db).await;
    let new = new_command(project, sandbox, "a");
    j.insert(new.clone()).await.unwrap();
    let rec = j
        .append(
            new.id,
            "a",
            vec![
                out(OutputStream::Stdout, 0, b"hello "),
                out(OutputStream::Stderr, 0, b"warn\n"),
            ],
            1 << 20,
        )
        .await
        .unwrap();
    assert_eq!(
        (rec.next_seq, rec.stdout_bytes, rec.stderr_bytes),
        (3, 6, 5)
    );
    let rec = j
        .append(
            new.id,
            "a",
            vec![
                Append::Gap {
                    stream: OutputStream::Stdout,
                    offset: 6,
                    length: Some(4),
                },
                out(OutputStream::Stdout, 10, b"world\n"),
            ],
            1 << 20,
        )
        .await
        .unwrap();
    assert_eq!(
        (rec.next_seq, rec.stdout_bytes, rec.kept_bytes),
        (5, 16, 17)
    );
    let events = j.events(new.id, 0, 100, 1 << 20).await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
    assert_eq!(events[2].data, None);
    assert_eq!(events[2].length, Some(4));
    assert_eq!(events[3].data.as_deref(), Some(&b"world\n"[..]));
    assert_eq!(events[3].offset, 10);
    // Resuming after an event continues exactly there.
    let rest = j.events(new.id, 2, 100, 1 << 20).await.unwrap();
    assert_eq!(rest, events[2..]);
}

pub(crate) async fn only_the_lease_holder_appends_or_ends_and_a_lapsed_lease_is_taken_over(
    db: &TestDb,
) {
    let (j, project, sandbox) = setup(db).await;
    let mut new = new_command(project, sandbox, "a");
    new.lease = Duration::from_millis(1);
    j.insert(new.clone()).await.unwrap();
    assert!(matches!(
        j.append(new.id, "b", vec![out(OutputStream::Stdout, 0, b"x")], 100)
            .await,
        Err(RegistryError::LeaseLost { .. })
    ));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let unowned = j.unowned(10).await.unwrap();
    assert!(unowned.iter().any(|r| r.id == new.id));
    let claimed = j.claim(new.id, "b", LEASE).await.unwrap().expect("claimed");
    assert_eq!(claimed.owner.as_deref(), Some("b"));
    // The old owner can neither renew, append nor end it now.
    assert!(!j.renew(new.id, "a", LEASE).await.unwrap());
    assert!(j.claim(new.id, "a", LEASE).await.unwrap().is_none());
    assert!(matches!(
        j.append(new.id, "a", vec![out(OutputStream::Stdout, 0, b"x")], 100)
            .await,
        Err(RegistryError::LeaseLost { .. })
    ));
    assert!(matches!(
        j.finish(new.id, Some("a"), CommandState::Exited, Some(0))
            .await,
        Err(RegistryError::LeaseLost { .. })
    ));
    assert!(!j.unowned(10).await.unwrap().iter().any(|r| r.id == new.id));
    let done = j
        .finish(new.id, Some("b"), CommandState::Exited, Some(0))
        .await
        .unwrap();
    assert_eq!(done.state, CommandState::Exited);
    assert!(done.ended_at.is_some() && !done.stdin_open);
    // An ended command is nobody's to capture.
    assert!(j.claim(new.id, "b", LEASE).await.unwrap().is_none());
}

pub(crate) async fn retention_drops_the_oldest_bytes_as_one_gap_per_stream(db: &TestDb) {
    let (j, project, sandbox) = setup(db).await;
    let new = new_command(project, sandbox, "a");
    j.insert(new.clone()).await.unwrap();
    for i in 0..10u64 {
        j.append(
            new.id,
            "a",
            vec![out(OutputStream::Stdout, i * 100, &[b'a' + i as u8; 100])],
            350,
        )
        .await
        .unwrap();
    }
    let rec = j.get(project, sandbox, new.id).await.unwrap().unwrap();
    assert_eq!((rec.stdout_bytes, rec.next_seq), (1000, 11));
    assert!(rec.kept_bytes <= 350, "kept {}", rec.kept_bytes);
    let events = j.events(new.id, 0, 100, 1 << 20).await.unwrap();
    // The seven dropped chunks read as one gap at the last of their numbers, the bytes it
    // covers exactly theirs; the newest bytes are kept as they were.
    assert_eq!(
        events[0],
        JournalEvent {
            seq: 7,
            stream: OutputStream::Stdout,
            offset: 0,
            data: None,
            length: Some(700)
        }
    );
    let held: Vec<(u64, u64, u8)> = events[1..]
        .iter()
        .map(|e| (e.seq, e.offset, e.data.as_ref().map_or(0, |d| d[0])))
        .collect();
    assert_eq!(held, [(8, 700, b'h'), (9, 800, b'i'), (10, 900, b'j')]);
    // A reader resuming inside the dropped run is told of the loss; after it, nothing moved.
    let resumed = j.events(new.id, 3, 100, 1 << 20).await.unwrap();
    assert_eq!(resumed.first().map(|e| e.seq), Some(7));
    assert_eq!(j.events(new.id, 7, 100, 1 << 20).await.unwrap().len(), 3);
}

pub(crate) async fn events_are_bounded_in_number_as_well_as_bytes(db: &TestDb) {
    let reg = registry(db).await;
    let project = reg.create_project("p").await.unwrap().id;
    let sandbox = SandboxId::new(Provider::Local);
    let j = CommandJournal::new(reg.database().clone()).with_max_events(16);
    let new = new_command(project, sandbox, "a");
    j.insert(new.clone()).await.unwrap();
    // A byte at a time on both streams, far under the byte budget.
    for i in 0..100u64 {
        j.append(
            new.id,
            "a",
            vec![
                out(OutputStream::Stdout, i, b"o"),
                out(OutputStream::Stderr, i, b"e"),
            ],
            1 << 20,
        )
        .await
        .unwrap();
        let stored = j.events(new.id, 0, 1000, 1 << 20).await.unwrap();
        assert!(
            stored.len() <= 16 + 2,
            "{} events after {} appends",
            stored.len(),
            i + 1
        );
    }
    let rec = j.get(project, sandbox, new.id).await.unwrap().unwrap();
    assert_eq!(
        (rec.next_seq, rec.stdout_bytes, rec.stderr_bytes),
        (201, 100, 100)
    );
    let stored = j.events(new.id, 0, 1000, 1 << 20).await.unwrap();
    // Each stream reads as a gap from 0, then its kept bytes up to 100: nothing is missing
    // and nothing is told twice.
    for stream in [OutputStream::Stdout, OutputStream::Stderr] {
        let mut at = 0;
        for e in stored.iter().filter(|e| e.stream == stream) {
            assert_eq!(e.offset, at, "{stream:?} continues where it was");
            at += e.length.unwrap();
        }
        assert_eq!(at, 100, "{stream:?}");
        assert!(
            stored
                .iter()
                .any(|e| e.stream == stream && e.data.is_none())
        );
    }
    assert!(stored.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(stored.last().map(|e| e.seq), Some(200));
}

pub(crate) async fn a_page_of_events_is_bounded_in_bytes_but_never_empty(db: &TestDb) {
    let (j, project, sandbox) = setup(db).await;
    let new = new_command(project, sandbox, "a");
    j.insert(new.clone()).await.unwrap();
    for i in 0..5u64 {
        j.append(
            new.id,
            "a",
            vec![out(OutputStream::Stdout, i * 1000, &[b'x'; 1000])],
            1 << 20,
        )
        .await
        .unwrap();
    }
    let page = j.events(new.id, 0, 100, 2500).await.unwrap();
    assert_eq!(page.len(), 2);
    let one = j.events(new.id, 0, 100, 10).await.unwrap();
    assert_eq!(
        one.len(),
        1,
        "one event even when it alone exceeds the budget"
    );
    let capped = j.events(new.id, 0, 3, 1 << 20).await.unwrap();
    assert_eq!(capped.len(), 3);
    assert!(j.events(new.id, 5, 100, 1 << 20).await.unwrap().is_empty());
}

pub(crate) async fn stdin_counts_move_only_from_the_expected_value(db: &TestDb) {
    let (j, project, sandbox) = setup(db).await;
    let new = new_command(project, sandbox, "a");
    j.insert(new.clone()).await.unwrap();
    assert!(j.record_stdin(new.id, 0, 6, false).await.unwrap());
    assert!(
        !j.record_stdin(new.id, 0, 6, false).await.unwrap(),
        "moved already"
    );
    assert!(j.record_stdin(new.id, 6, 12, true).await.unwrap());
    let rec = j.get(project, sandbox, new.id).await.unwrap().unwrap();
    assert_eq!((rec.stdin_bytes, rec.stdin_open), (12, false));
    assert!(
        !j.record_stdin(new.id, 12, 13, false).await.unwrap(),
        "closed"
    );

    // A command that ends between its provider taking a write and the write's record (its
    // end closes stdin): the write still counts, once.
    let quick = new_command(project, sandbox, "a");
    j.insert(quick.clone()).await.unwrap();
    j.finish(quick.id, Some("a"), CommandState::Exited, Some(0))
        .await
        .unwrap();
    assert!(j.record_stdin(quick.id, 0, 5, true).await.unwrap());
    assert!(
        !j.record_stdin(quick.id, 0, 5, true).await.unwrap(),
        "moved already"
    );
    let rec = j.get(project, sandbox, quick.id).await.unwrap().unwrap();
    assert_eq!(
        (rec.stdin_bytes, rec.stdin_open, rec.state),
        (5, false, CommandState::Exited)
    );
}

pub(crate) async fn a_kill_reason_decides_the_final_state_and_an_ended_command_stays_ended(
    db: &TestDb,
) {
    let (j, project, sandbox) = setup(db).await;
    let new = new_command(project, sandbox, "a");
    j.insert(new.clone()).await.unwrap();
    j.set_kill_reason(new.id, CommandState::TimedOut)
        .await
        .unwrap();
    j.set_kill_reason(new.id, CommandState::Killed)
        .await
        .unwrap();
    let done = j
        .finish(new.id, Some("a"), CommandState::Exited, Some(137))
        .await
        .unwrap();
    assert_eq!(done.state, CommandState::TimedOut, "the first reason stays");
    assert_eq!(done.exit_code, Some(137));
    let again = j
        .finish(new.id, None, CommandState::Lost, None)
        .await
        .unwrap();
    assert_eq!(again, done);
}

pub(crate) async fn listing_is_newest_first_with_a_state_filter_and_cursor(db: &TestDb) {
    let (j, project, sandbox) = setup(db).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let new = new_command(project, sandbox, "a");
        j.insert(new.clone()).await.unwrap();
        if i % 2 == 0 {
            j.finish(new.id, None, CommandState::Exited, Some(0))
                .await
                .unwrap();
        }
        ids.push(new.id);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let first = j.list(project, sandbox, None, 2, None).await.unwrap();
    assert_eq!(
        first.items.iter().map(|r| r.id).collect::<Vec<_>>(),
        [ids[4], ids[3]]
    );
    let cursor = first.next_cursor.expect("more");
    let rest = j
        .list(project, sandbox, None, 10, Some(&cursor))
        .await
        .unwrap();
    assert_eq!(
        rest.items.iter().map(|r| r.id).collect::<Vec<_>>(),
        [ids[2], ids[1], ids[0]]
    );
    assert_eq!(rest.next_cursor, None);
    let exited = j
        .list(project, sandbox, Some(CommandState::Exited), 10, None)
        .await
        .unwrap();
    assert_eq!(exited.items.len(), 3);
    assert!(matches!(
        j.list(project, sandbox, None, 10, Some("nope")).await,
        Err(RegistryError::InvalidCursor)
    ));
}

pub(crate) async fn project_retention_drops_the_oldest_commands_output_first(db: &TestDb) {
    let (j, project, sandbox) = setup(db).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let new = new_command(project, sandbox, "a");
        j.insert(new.clone()).await.unwrap();
        j.append(
            new.id,
            "a",
            vec![out(OutputStream::Stdout, 0, &[b'z'; 400])],
            1 << 20,
        )
        .await
        .unwrap();
        ids.push(new.id);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(j.projects_holding_output().await.unwrap(), [project]);
    assert_eq!(j.trim_project(project, 900).await.unwrap(), 400);
    let kept: Vec<u64> = {
        let mut v = Vec::new();
        for id in &ids {
            v.push(
                j.get(project, sandbox, *id)
                    .await
                    .unwrap()
                    .unwrap()
                    .kept_bytes,
            );
        }
        v
    };
    assert_eq!(kept, [0, 400, 400]);
    let oldest = j.events(ids[0], 0, 10, 1 << 20).await.unwrap();
    assert_eq!(
        (oldest[0].data.as_ref(), oldest[0].length),
        (None, Some(400))
    );
    assert_eq!(j.trim_project(project, 900).await.unwrap(), 0);
}

pub(crate) async fn every_move_of_a_journal_is_announced_to_listeners_on_postgres(db: &TestDb) {
    let (j, project, sandbox) = setup(db).await;
    let Some(mut ids) = j.progress().await.unwrap() else {
        assert_eq!(db.backend(), Backend::Sqlite, "only SQLite has no listener");
        return;
    };
    // Other tests share the database (and the channel): wait for this command's id.
    let mut heard = async |id: CommandId, what: &str| {
        let found = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(got) = ids.next().await {
                if got == id {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(found, Ok(true), "no notification for {what}");
    };
    let new = new_command(project, sandbox, "a");
    j.insert(new.clone()).await.unwrap();
    j.started(new.id, "h").await.unwrap();
    heard(new.id, "the start").await;
    j.append(new.id, "a", vec![out(OutputStream::Stdout, 0, b"x")], 100)
        .await
        .unwrap();
    heard(new.id, "an append").await;
    j.finish(new.id, Some("a"), CommandState::Exited, Some(0))
        .await
        .unwrap();
    heard(new.id, "the end").await;
}
