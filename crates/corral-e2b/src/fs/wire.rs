//! envd's `filesystem.Filesystem` messages as protojson writes them (lowerCamelCase, enum
//! names, int64 as a string, zero values omitted), and the `/files` upload's answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::path::base_name;

/// `filesystem.FileType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum FileType {
    /// Neither a regular file nor a directory (or a symlink's target of another kind).
    #[default]
    #[serde(rename = "FILE_TYPE_UNSPECIFIED")]
    Unspecified,
    /// A regular file.
    #[serde(rename = "FILE_TYPE_FILE")]
    File,
    /// A directory.
    #[serde(rename = "FILE_TYPE_DIRECTORY")]
    Directory,
    /// A symlink (only a dangling one: a resolvable one reports its target's type).
    #[serde(rename = "FILE_TYPE_SYMLINK")]
    Symlink,
}

impl FileType {
    fn is_unspecified(&self) -> bool {
        *self == FileType::Unspecified
    }
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

/// protojson writes an int64 as a JSON string.
fn serialize_i64_string<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.to_string())
}

/// An integer as protojson reads it: a JSON number or a decimal string.
#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrString {
    Number(i64),
    String(String),
}

fn deserialize_i64_lenient<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    match NumberOrString::deserialize(d)? {
        NumberOrString::Number(n) => Ok(n),
        NumberOrString::String(s) => s.trim().parse().map_err(serde::de::Error::custom),
    }
}

fn deserialize_u32_lenient<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = deserialize_i64_lenient(d)?;
    u32::try_from(n).map_err(serde::de::Error::custom)
}

/// `filesystem.EntryInfo`: one file system object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EntryInfo {
    /// The last path component.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The object's type (a symlink's target's type; see [`EntryInfo::is_symlink`]).
    #[serde(rename = "type", skip_serializing_if = "FileType::is_unspecified")]
    pub r#type: FileType,
    /// The absolute path.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// Size in bytes (of the link itself for a symlink, as `lstat`).
    #[serde(
        skip_serializing_if = "is_zero_i64",
        serialize_with = "serialize_i64_string",
        deserialize_with = "deserialize_i64_lenient"
    )]
    pub size: i64,
    /// Permission bits (`0o644` → 420); a symlink's target's.
    #[serde(
        skip_serializing_if = "is_zero_u32",
        deserialize_with = "deserialize_u32_lenient"
    )]
    pub mode: u32,
    /// Go's `FileMode.String()` of the object itself: `-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub permissions: String,
    /// The owner's name (its numeric id when it has none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// The group's name (its numeric id when it has none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Last modification, RFC 3339 (`google.protobuf.Timestamp` in protojson).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_time: Option<String>,
    /// A symlink's fully resolved target; absent for anything else and for a dangling link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    /// User metadata (`user.e2b.*` extended attributes); Corral reports none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Whether the object is a symlink.
    #[serde(skip_serializing_if = "is_false")]
    pub is_symlink: bool,
}

/// `filesystem.StatRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatRequest {
    /// The path to describe.
    pub path: String,
}

/// `filesystem.StatResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatResponse {
    /// The object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// `filesystem.ListDirRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListDirRequest {
    /// The directory to list.
    pub path: String,
    /// How many levels to list; 0 (absent) means 1.
    #[serde(
        skip_serializing_if = "is_zero_u32",
        deserialize_with = "deserialize_u32_lenient"
    )]
    pub depth: u32,
}

impl ListDirRequest {
    /// The depth envd lists: `depth`, or 1 when it is 0.
    pub fn effective_depth(&self) -> u32 {
        self.depth.max(1)
    }
}

/// `filesystem.ListDirResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ListDirResponse {
    /// The entries, depth first, each directory's entries in byte order (as Go's `WalkDir`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<EntryInfo>,
}

/// `filesystem.MakeDirRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MakeDirRequest {
    /// The directory to make, with its missing parents.
    pub path: String,
}

/// `filesystem.MakeDirResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MakeDirResponse {
    /// The new directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// `filesystem.RemoveRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RemoveRequest {
    /// The file or directory (recursively) to remove.
    pub path: String,
}

/// `filesystem.RemoveResponse` (empty: `{}`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RemoveResponse {}

/// `filesystem.MoveRequest`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MoveRequest {
    /// The object to move.
    pub source: String,
    /// Its new path.
    pub destination: String,
}

/// `filesystem.MoveResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MoveResponse {
    /// The object at its new path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// One entry of the `/files` upload answer (the SDK's `WriteInfo.from_dict` reads `name`,
/// `type` and `path`): `{"name": "a.txt", "type": "file", "path": "/home/user/a.txt"}`.
/// `path` must be the resolved absolute path.
pub fn write_info(path: &str) -> serde_json::Value {
    serde_json::json!({ "name": base_name(path), "type": "file", "path": path })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_info_serializes_as_protojson() {
        let e = EntryInfo {
            name: "a.txt".into(),
            r#type: FileType::File,
            path: "/home/user/a.txt".into(),
            size: 5,
            mode: 0o644,
            permissions: "-rw-r--r--".into(),
            owner: "user".into(),
            group: "user".into(),
            modified_time: Some("2026-11-27T08:03:32Z".into()),
            symlink_target: None,
            metadata: BTreeMap::new(),
            is_symlink: false,
        };
        let json = serde_json::to_value(&StatResponse {
            entry: Some(e.clone()),
        })
        .expect("json");
        assert_eq!(
            json,
            serde_json::json!({"entry": {
                "name": "a.txt", "type": "FILE_TYPE_FILE", "path": "/home/user/a.txt",
                "size": "5", "mode": 420, "permissions": "-rw-r--r--", "owner": "user",
                "group": "user", "modifiedTime": "2026-11-27T08:03:32Z"
            }})
        );
        let back: StatResponse = serde_json::from_value(json).expect("reads back");
        assert_eq!(back.entry, Some(e.clone()));
        // int64 as a number and the symlink fields read too.
        let link: EntryInfo = serde_json::from_str(
            r#"{"name":"l","type":"FILE_TYPE_DIRECTORY","size":7,"symlinkTarget":"/t","isSymlink":true}"#,
        )
        .expect("reads");
        assert_eq!(
            (link.size, link.r#type, link.is_symlink),
            (7, FileType::Directory, true)
        );
        assert_eq!(link.symlink_target.as_deref(), Some("/t"));
        let dangling = EntryInfo {
            r#type: FileType::Symlink,
            is_symlink: true,
            ..EntryInfo::default()
        };
        assert_eq!(
            serde_json::to_value(&dangling).expect("json"),
            serde_json::json!({"type": "FILE_TYPE_SYMLINK", "isSymlink": true})
        );
        assert_eq!(
            serde_json::to_string(&EntryInfo::default()).expect("json"),
            "{}"
        );
        assert_eq!(
            serde_json::to_string(&RemoveResponse {}).expect("json"),
            "{}"
        );
    }

    #[test]
    fn requests_read_as_the_sdk_sends_them() {
        let l: ListDirRequest = serde_json::from_str(r#"{"path":"dir","depth":2}"#).expect("reads");
        assert_eq!((l.path.as_str(), l.effective_depth()), ("dir", 2));
        let l: ListDirRequest = serde_json::from_str(r#"{"path":"dir"}"#).expect("reads");
        assert_eq!(l.effective_depth(), 1);
        let l: ListDirRequest = serde_json::from_str(r#"{"depth":"3"}"#).expect("reads");
        assert_eq!((l.path.as_str(), l.effective_depth()), ("", 3));
        assert!(serde_json::from_str::<ListDirRequest>(r#"{"depth":-1}"#).is_err());
        let m: MoveRequest =
            serde_json::from_str(r#"{"source":"a","destination":"b"}"#).expect("reads");
        assert_eq!((m.source.as_str(), m.destination.as_str()), ("a", "b"));
        let s: StatRequest = serde_json::from_str("{}").expect("reads");
        assert_eq!(s.path, "");
        let mk: MakeDirRequest =
            serde_json::from_str(r#"{"path":"x","future":1}"#).expect("unknown fields are ignored");
        assert_eq!(mk.path, "x");
        assert_eq!(
            serde_json::to_value(&l).expect("json"),
            serde_json::json!({"path": "", "depth": 3})
        );
    }

    #[test]
    fn write_info_is_what_the_sdk_reads() {
        assert_eq!(
            write_info("/home/user/dir/a.txt"),
            serde_json::json!({"name": "a.txt", "type": "file", "path": "/home/user/dir/a.txt"})
        );
    }
}
