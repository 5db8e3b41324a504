//! diesel table definitions of the control-plane tables (migration `0003_control_plane` of
//! `corral-registry`), with the same SQL types on both backends.
#![allow(missing_docs, unreachable_pub)]

diesel::table! {
    users (id) {
        id -> Text,
        email -> Text,
        password_hash -> Nullable<Text>,
        personal_account_id -> Text,
        created_at -> BigInt,
        updated_at -> BigInt,
    }
}

diesel::table! {
    accounts (id) {
        id -> Text,
        name -> Text,
        kind -> Text,
        version -> BigInt,
        created_at -> BigInt,
        updated_at -> BigInt,
        deleting_at -> Nullable<BigInt>,
        deleted_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    memberships (account_id, user_id) {
        account_id -> Text,
        user_id -> Text,
        role -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    invitations (id) {
        id -> Text,
        account_id -> Text,
        email -> Text,
        role -> Text,
        token_hash -> Binary,
        invited_by -> Text,
        created_at -> BigInt,
        expires_at -> BigInt,
        accepted_at -> Nullable<BigInt>,
        revoked_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    sessions (id_hash) {
        id_hash -> Binary,
        user_id -> Text,
        created_at -> BigInt,
        last_seen_at -> BigInt,
        expires_at -> BigInt,
        revoked_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    sign_in_tokens (token_hash) {
        token_hash -> Binary,
        email -> Text,
        created_at -> BigInt,
        expires_at -> BigInt,
        used_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    project_accounts (project_id) {
        project_id -> Text,
        account_id -> Text,
        deleting_at -> Nullable<BigInt>,
        deleted_at -> Nullable<BigInt>,
    }
}

diesel::table! {
    legal_releases (document, release_number) {
        document -> Text,
        release_number -> BigInt,
        title -> Text,
        body -> Text,
        published_at -> BigInt,
    }
}

diesel::table! {
    legal_acceptances (user_id, document, release_number) {
        user_id -> Text,
        document -> Text,
        release_number -> BigInt,
        accepted_at -> BigInt,
    }
}

diesel::table! {
    audit_events (id) {
        id -> Text,
        account_id -> Nullable<Text>,
        actor_user_id -> Nullable<Text>,
        action -> Text,
        target -> Text,
        detail -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    email_suppressions (email) {
        email -> Text,
        reason -> Text,
        created_at -> BigInt,
    }
}

diesel::table! {
    email_webhook_ids (id) {
        id -> Text,
        received_at -> BigInt,
    }
}

diesel::joinable!(memberships -> accounts (account_id));
diesel::joinable!(memberships -> users (user_id));
diesel::joinable!(invitations -> accounts (account_id));
diesel::joinable!(project_accounts -> accounts (account_id));
diesel::joinable!(sessions -> users (user_id));

diesel::allow_tables_to_appear_in_same_query!(
    users,
    accounts,
    memberships,
    invitations,
    sessions,
    sign_in_tokens,
    project_accounts,
    legal_releases,
    legal_acceptances,
    audit_events,
    email_suppressions,
    email_webhook_ids,
);
