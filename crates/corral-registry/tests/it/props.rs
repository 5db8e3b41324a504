//! Property tests of the two parsers that read client text before any database access: the
//! list cursor and the API key.

use corral_domain::{Provider, SandboxId};
use corral_registry::testing::TestDb;
use corral_registry::{API_KEY_PREFIX, ListCursor, RegistryError, api_key_id, cursor_pattern};
use proptest::prelude::*;
use ulid::Ulid;

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

fn any_sandbox_id() -> impl Strategy<Value = SandboxId> {
    (
        proptest::sample::select(Provider::ALL.to_vec()),
        any::<u128>(),
    )
        .prop_map(|(p, u)| SandboxId::from_parts(p, Ulid::from(u)))
}

fn base32(len: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(ALPHABET.to_vec()), len)
        .prop_map(|b| String::from_utf8(b).unwrap())
}

/// `body` + its checksum: CRC-32 (IEEE) of the body's bytes, big-endian, as 7 base32
/// characters (the last one zero-padded), as the registry's docs describe the format.
fn with_checksum(body: &str) -> String {
    let crc = crate::keys::crc32(body.as_bytes());
    let bits = u64::from(crc) << 3; // 35 bits: the CRC then three zero bits of padding
    let sum: String = (0..7)
        .rev()
        .map(|i| char::from(ALPHABET[((bits >> (5 * i)) & 31) as usize]))
        .collect();
    format!("{body}{sum}")
}

fn a_valid_key() -> impl Strategy<Value = (String, String)> {
    (base32(16), base32(52)).prop_map(|(id, secret)| {
        let key = with_checksum(&format!("{API_KEY_PREFIX}{id}_{secret}"));
        (id, key)
    })
}

#[test]
fn the_tests_crc32_is_the_ieee_one() {
    assert_eq!(crate::keys::crc32(b"123456789"), 0xcbf4_3926);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn cursors_round_trip(created in 0i64..1_000_000_000_000_000_000, id in any_sandbox_id()) {
        let cursor = ListCursor { created_at_micros: created, id };
        let text = cursor.to_string();
        prop_assert_eq!(ListCursor::parse(&text).unwrap(), cursor);
    }

    #[test]
    fn every_string_of_the_documented_cursor_form_is_accepted(
        text in proptest::string::string_regex(
            cursor_pattern().trim_start_matches('^').trim_end_matches('$'),
        ).unwrap(),
    ) {
        prop_assert!(ListCursor::parse(&text).is_ok(), "{}", text);
    }

    #[test]
    fn an_accepted_cursor_is_of_the_documented_form(text in "[0-9_a-z]{0,60}|\\PC{0,60}") {
        if let Ok(cursor) = ListCursor::parse(&text) {
            let (created, id) = text.split_once('_').unwrap();
            prop_assert!((1..=18).contains(&created.len()));
            prop_assert!(created.bytes().all(|b| b.is_ascii_digit()));
            prop_assert_eq!(cursor.id.to_string(), id);
        }
    }

    #[test]
    fn a_tampered_cursor_is_invalid_cursor_never_a_panic(
        created in 0i64..1_000_000_000_000_000_000,
        id in any_sandbox_id(),
        pos in any::<usize>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let text = ListCursor { created_at_micros: created, id }.to_string();
        let mut bytes = text.clone().into_bytes();
        let pos = pos % bytes.len();
        if cut {
            bytes.truncate(pos);
        } else {
            bytes[pos] = byte;
        }
        let tampered = String::from_utf8_lossy(&bytes).into_owned();
        match ListCursor::parse(&tampered) {
            Ok(c) => {
                // Only a change that keeps the form survives: a digit for a digit, a cut
                // inside the number, or another valid payload character.
                prop_assert!(of_the_cursor_form(&tampered), "{}", tampered);
                prop_assert_eq!(c.id.to_string(), tampered.split_once('_').unwrap().1);
            }
            Err(e) => prop_assert!(matches!(e, RegistryError::InvalidCursor), "{e:?}"),
        }
    }

    #[test]
    fn keys_of_the_documented_form_parse_to_their_id((id, key) in a_valid_key()) {
        prop_assert_eq!(key.len(), 4 + 16 + 1 + 52 + 7);
        prop_assert_eq!(api_key_id(&key), Some(id.as_str()));
    }

    #[test]
    fn any_single_character_change_to_a_key_is_refused(
        (_, key) in a_valid_key(),
        pos in any::<usize>(),
        c in any::<char>(),
    ) {
        let mut chars: Vec<char> = key.chars().collect();
        let pos = pos % chars.len();
        prop_assume!(chars[pos] != c);
        chars[pos] = c;
        let changed: String = chars.into_iter().collect();
        prop_assert_eq!(api_key_id(&changed), None, "{}", changed);
    }

    #[test]
    fn a_key_cut_or_extended_is_refused((_, key) in a_valid_key(), n in 1usize..80, extra in "\\PC{1,4}") {
        let (appended, prepended) = (format!("{key}{extra}"), format!("{extra}{key}"));
        prop_assert_eq!(api_key_id(&key[..key.len() - n.min(key.len())]), None);
        prop_assert_eq!(api_key_id(&appended), None);
        prop_assert_eq!(api_key_id(&prepended), None);
    }

    #[test]
    fn arbitrary_text_is_never_a_key_unless_of_the_form(text in "crl_[0-9a-z_]{0,90}|\\PC{0,100}") {
        if let Some(id) = api_key_id(&text) {
            prop_assert_eq!(text.len(), 80);
            prop_assert!(text.starts_with(API_KEY_PREFIX));
            prop_assert_eq!(&text[4..20], id);
            prop_assert_eq!(with_checksum(&text[..73]), text.clone());
        }
    }
}

/// Whether `text` has the cursor form, checked piecewise (the id by round trip).
fn of_the_cursor_form(text: &str) -> bool {
    let Some((created, id)) = text.split_once('_') else {
        return false;
    };
    (1..=18).contains(&created.len())
        && created.bytes().all(|b| b.is_ascii_digit())
        && id.parse::<SandboxId>().is_ok_and(|p| p.to_string() == id)
}

/// Through the registry: a tampered cursor is [`RegistryError::InvalidCursor`] (which the
/// service answers as `invalid_request`), never a panic or a database error; an intact one
/// reads a page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_cursors_reach_the_registry_as_invalid_cursor() {
    let db = TestDb::sqlite();
    let reg = crate::registry(&db).await;
    let project = reg.create_project("cursors").await.unwrap();
    let valid = ListCursor {
        created_at_micros: 1_700_000_000_000_000,
        id: SandboxId::from_parts(Provider::Local, Ulid::from(7u128)),
    }
    .to_string();
    assert!(
        reg.list_sandboxes(project.id, 10, Some(&valid))
            .await
            .is_ok()
    );
    for pos in 0..valid.len() {
        for replacement in ["", "_", "Z", "-", "9", "\u{e9}", "\0", "%00", "' OR 1=1 --"] {
            let mut tampered = valid.clone();
            tampered.replace_range(pos..=pos, replacement);
            let result = reg.list_sandboxes(project.id, 10, Some(&tampered)).await;
            match ListCursor::parse(&tampered) {
                Ok(_) => assert!(result.is_ok(), "{tampered}: {result:?}"),
                Err(_) => assert!(
                    matches!(result, Err(RegistryError::InvalidCursor)),
                    "{tampered}: {result:?}"
                ),
            }
        }
    }
}
