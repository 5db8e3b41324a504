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

diesel::allow_tables_to_appear_in_same_query!(
    projects,
    api_keys,
    provider_profiles,
    profile_verifications,
    sandboxes
);
