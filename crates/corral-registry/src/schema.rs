//! diesel table definitions shared by both backends (the SQL types are chosen to mean the
//! same on SQLite and PostgreSQL: `Text`, `BigInt`, `Binary`, `Integer`).
#![allow(missing_docs, unreachable_pub)]

diesel::table! {
    projects (id) {
        id -> Text,
        name -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    api_keys (key_id) {
        key_id -> Text,
        project_id -> Text,
        secret_hash -> Binary,
        created_at -> BigInt,
        revoked_at -> Nullable<BigInt>,
        last_used_at -> Nullable<BigInt>,
        name -> Nullable<Text>,
        expires_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    provider_profiles (id) {
        id -> Text,
        project_id -> Text,
        provider -> Text,
        context -> Text,
        settings -> Text,
        credential -> Nullable<Binary>,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

diesel::table! {
    profile_verifications (profile_id, operation) {
        profile_id -> Text,
        operation -> Text,
        ok -> Bool,
        reason -> Nullable<Text>,
        remediation -> Nullable<Text>,
        checked_at -> BigInt,
    }
}

diesel::table! {
    sandboxes (id) {
        id -> Text,
        project_id -> Text,
        provider -> Text,
        native_id -> Nullable<Text>,
        status -> Text,
        status_observed_at -> BigInt,
        metadata -> Text,
        operation_id -> Text,
        create_state -> Text,
        created_at -> BigInt,
        updated_at -> BigInt,
        deleted_at -> Nullable<BigInt>,
        reconcile_attempted_at -> Nullable<BigInt>,
        expires_at -> Nullable<BigInt>,
        end_reason -> Nullable<Text>,
        auto_resume -> Bool,
        idle_stop_seconds -> Nullable<BigInt>,
        snapshot_id -> Nullable<Text>,
        last_activity_at -> BigInt,
    }
}

// The idempotency store's table (owned by `corral-idempotency`, migrated here so one runner
// manages the whole database).
diesel::table! {
    idempotency_keys (project_id, idempotency_key) {
        project_id -> Text,
        idempotency_key -> Text,
        fingerprint -> Binary,
        state -> Text,
        owner -> Text,
        lease_until -> BigInt,
        operation_id -> Nullable<Text>,
        response_status -> Nullable<Integer>,
        response_body -> Nullable<Binary>,
        created_at -> BigInt,
        updated_at -> BigInt,
        expires_at -> BigInt,
    }
}

diesel::table! {
    commands (id) {
        id -> Text,
        project_id -> Text,
        sandbox_id -> Text,
        operation_id -> Text,
        command -> Text,
        tag -> Nullable<Text>,
        state -> Text,
        exit_code -> Nullable<Integer>,
        handle -> Nullable<Text>,
        stdin_open -> Bool,
        stdin_bytes -> BigInt,
        timeout_seconds -> BigInt,
        stdout_bytes -> BigInt,
        stderr_bytes -> BigInt,
        kept_bytes -> BigInt,
        next_seq -> BigInt,
        kill_reason -> Nullable<Text>,
        owner -> Nullable<Text>,
        lease_until -> Nullable<BigInt>,
        started_at -> BigInt,
        ended_at -> Nullable<BigInt>,
        updated_at -> BigInt,
    }
}

diesel::table! {
    command_events (command_id, seq) {
        command_id -> Text,
        seq -> BigInt,
        kind -> SmallInt,
        byte_offset -> BigInt,
        length -> Nullable<BigInt>,
        data -> Nullable<Binary>,
    }
}

diesel::joinable!(command_events -> commands (command_id));

diesel::allow_tables_to_appear_in_same_query!(
    commands,
    command_events,
    projects,
    api_keys,
    provider_profiles,
    profile_verifications,
    sandboxes
);

diesel::table! {
    event_counters (project_id) {
        project_id -> Text,
        last_seq -> BigInt,
    }
}

diesel::table! {
    events (project_id, seq) {
        project_id -> Text,
        seq -> BigInt,
        kind -> Text,
        sandbox_id -> Nullable<Text>,
        provider -> Nullable<Text>,
        native_id -> Nullable<Text>,
        command_id -> Nullable<Text>,
        status -> Nullable<Text>,
        previous_status -> Nullable<Text>,
        reason -> Nullable<Text>,
        command_state -> Nullable<Text>,
        exit_code -> Nullable<Integer>,
        duration_ms -> Nullable<BigInt>,
        occurred_at -> BigInt,
        snapshot_id -> Nullable<Text>,
    }
}

diesel::table! {
    webhook_endpoints (id) {
        id -> Text,
        project_id -> Text,
        url -> Text,
        types -> Text,
        secret -> Binary,
        previous_secret -> Nullable<Binary>,
        previous_until -> Nullable<BigInt>,
        created_at -> BigInt,
        deleted_at -> Nullable<BigInt>,
        consecutive_failures -> Integer,
        circuit_opens -> Integer,
        open_until -> Nullable<BigInt>,
        probe_until -> Nullable<BigInt>,
    }
}

diesel::table! {
    webhook_deliveries (id) {
        id -> Text,
        endpoint_id -> Text,
        project_id -> Text,
        event_seq -> BigInt,
        state -> Text,
        attempts -> Integer,
        next_attempt_at -> BigInt,
        last_status -> Nullable<Integer>,
        last_error -> Nullable<Text>,
        owner -> Nullable<Text>,
        lease_until -> Nullable<BigInt>,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

// The dispatcher's claim leaves out deliveries of endpoints whose circuit is open (a subquery).
diesel::allow_tables_to_appear_in_same_query!(webhook_deliveries, webhook_endpoints);

diesel::table! {
    deployment (singleton) {
        singleton -> Integer,
        id -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    leases (name) {
        name -> Text,
        owner -> Text,
        until_at -> BigInt,
    }
}

diesel::table! {
    orphans (provider, native_id) {
        provider -> Text,
        native_id -> Text,
        project_id -> Nullable<Text>,
        operation_id -> Nullable<Text>,
        first_seen_at -> BigInt,
        last_seen_at -> BigInt,
        deleted_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    e2b_sandboxes (project_id, sandbox_id) {
        project_id -> Text,
        sandbox_id -> Text,
        template_id -> Text,
        alias -> Nullable<Text>,
        metadata -> Text,
        env_sealed -> Nullable<Binary>,
        end_at -> BigInt,
        created_at -> BigInt,
    }
}

diesel::table! {
    e2b_templates (project_id, name) {
        project_id -> Text,
        name -> Text,
        provider -> Text,
        image -> Nullable<Text>,
        updated_at -> BigInt,
    }
}

diesel::table! {
    create_failures (project_id, sandbox_id) {
        project_id -> Text,
        sandbox_id -> Text,
        code -> Text,
        reason -> Text,
        at -> BigInt,
    }
}

diesel::allow_tables_to_appear_in_same_query!(e2b_sandboxes, sandboxes);

diesel::table! {
    snapshots (id) {
        id -> Text,
        project_id -> Text,
        sandbox_id -> Text,
        native_id -> Nullable<Text>,
        name -> Nullable<Text>,
        status -> Text,
        size_bytes -> Nullable<BigInt>,
        failure -> Nullable<Text>,
        created_at -> BigInt,
        updated_at -> BigInt,
        deleted_at -> Nullable<BigInt>,
    }
}

diesel::allow_tables_to_appear_in_same_query!(snapshots, sandboxes);
