//! Property tests of the id parsers against their published patterns: every string of the
//! documented form parses and prints back unchanged, and anything else — arbitrary text, or a
//! valid id with one byte changed, cut or extended — is refused (or, when the change happens
//! to keep the form, still round-trips). Ids reach the API from paths, cursors and JSON.

use corral_domain::{OperationId, SandboxId, ULID_PATTERN, sandbox_id_pattern};
use proptest::prelude::*;

fn unanchored(pattern: &str) -> String {
    pattern
        .trim_start_matches('^')
        .trim_end_matches('$')
        .to_owned()
}

fn of_the_form(text: &str) -> bool {
    text.parse::<SandboxId>()
        .is_ok_and(|id| id.to_string() == text)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn every_string_of_the_sandbox_id_pattern_parses_and_prints_back(
        text in proptest::string::string_regex(&unanchored(&sandbox_id_pattern())).unwrap(),
    ) {
        let id: SandboxId = text.parse().unwrap();
        prop_assert_eq!(id.to_string(), text.clone());
        let json = serde_json::to_string(&id).unwrap();
        prop_assert_eq!(json, format!("\"{text}\""));
    }

    #[test]
    fn every_string_of_the_operation_id_form_parses_and_prints_back(
        text in proptest::string::string_regex(&format!("op_{ULID_PATTERN}")).unwrap(),
    ) {
        let id: OperationId = text.parse().unwrap();
        prop_assert_eq!(id.to_string(), text);
    }

    #[test]
    fn a_valid_id_with_one_byte_changed_cut_or_extended_is_refused_unless_still_canonical(
        text in proptest::string::string_regex(&unanchored(&sandbox_id_pattern())).unwrap(),
        pos in any::<usize>(),
        byte in any::<u8>(),
        how in 0u8..3,
    ) {
        let mut bytes = text.into_bytes();
        let pos = pos % bytes.len();
        match how {
            0 => bytes[pos] = byte,
            1 => bytes.truncate(pos),
            _ => bytes.insert(pos, byte),
        }
        let Ok(changed) = String::from_utf8(bytes) else { return Ok(()) };
        match changed.parse::<SandboxId>() {
            Ok(id) => prop_assert_eq!(id.to_string(), changed.clone()),
            Err(_) => prop_assert!(!of_the_form(&changed)),
        }
        // JSON refuses exactly what the parser refuses.
        let json = serde_json::to_string(&changed).unwrap();
        prop_assert_eq!(
            serde_json::from_str::<SandboxId>(&json).is_ok(),
            changed.parse::<SandboxId>().is_ok()
        );
    }

    #[test]
    fn arbitrary_text_never_panics_and_only_canonical_ids_parse(
        text in "sbx_[a-z0-9_]{0,40}|op_[a-z0-9]{0,30}|\\PC{0,50}",
    ) {
        if let Ok(id) = text.parse::<SandboxId>() {
            prop_assert_eq!(id.to_string(), text.clone());
        }
        if let Ok(id) = text.parse::<OperationId>() {
            prop_assert_eq!(id.to_string(), text);
        }
    }
}
