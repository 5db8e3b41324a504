//! Every scenario of the shared conformance suite (`Conformance::run_all` runs the same
//! ones), each a test of its own: sandboxes, exec, files, commands as durable jobs, and the
//! lifecycle (stop and resume, snapshot and restore, forks).

use corral_provider_testkit::Conformance;

use crate::World;

/// One test per scenario, each over a provider of its own; the suite's sandboxes are deleted
/// afterwards (a command left running would keep its sandbox's init, and its filesystem,
/// past the test).
macro_rules! scenarios {
    ($($scenario:ident,)+) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let world = World::new();
                let suite = Conformance::new(&world.provider);
                suite.$scenario().await;
                suite.delete_created().await;
            }
        )+
    };
}

scenarios!(
    capabilities_are_valid,
    create_get_find_delete,
    exec_reports_streams_and_exit_code,
    exec_honours_advertised_cwd_and_env,
    exec_caps_output_and_deadline,
    files_round_trip_utf8_and_binary,
    files_report_missing_parent_and_missing_file,
    command_streams_output_then_exits,
    quiet_command_is_followed_to_its_end,
    resume_after_a_dropped_stream_loses_and_repeats_nothing,
    stdin_round_trip,
    signal_ends_a_running_command,
    command_outlives_its_start_call,
    command_output_that_is_not_utf8_survives,
    a_started_command_is_found_by_its_id,
    stop_then_resume_keeps_a_file,
    snapshot_then_restore_sees_the_old_content,
    forks_are_independent,
);

/// The whole suite in one run, as an embedder would call it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_passes_the_conformance_suite() {
    let world = World::new();
    let suite = Conformance::new(&world.provider);
    suite.run_all().await;
    suite.delete_created().await;
}
