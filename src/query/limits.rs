//! The bounds of a live query and the one syntax its parts share (JSON
//! pointers), which [`super::filter`] and [`super::spec`] both check.

/// The bounds of a query.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Bytes of the filter's JSON text.
    pub filter_bytes: usize,
    /// Nodes of a filter (operators and comparisons).
    pub filter_nodes: usize,
    /// How deep a filter nests.
    pub filter_depth: usize,
    /// Fields of a sort.
    pub sort_fields: usize,
    /// Rows of a window.
    pub max_limit: usize,
    /// How far a window may start from the first row.
    pub max_offset: usize,
    /// Distinct groups reported; the rest are counted under [`OTHER_GROUP`].
    pub max_groups: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            filter_bytes: 4096,
            filter_nodes: 64,
            filter_depth: 8,
            sort_fields: 4,
            max_limit: 500,
            max_offset: 10_000,
            max_groups: 1000,
        }
    }
}

/// The window's size when a query names none (and has no `groupBy`).
pub const DEFAULT_LIMIT: usize = 50;

/// The group of documents past [`Limits::max_groups`] distinct values, and
/// of those whose value is an object, a list or longer than
/// [`MAX_GROUP_BYTES`].
pub const OTHER_GROUP: &str = "(other)";

/// The longest value (its text) that is a group of its own.
pub const MAX_GROUP_BYTES: usize = 256;

/// A [`pointer`] to a member, not the whole document (`""`): what `sort`
/// and `groupBy` take (a document's whole text is neither an order nor a
/// group).
pub fn member_pointer(raw: &str) -> Result<String, String> {
    if raw.is_empty() {
        return Err("\"\" is the whole document: name a member, like /phase".to_string());
    }
    pointer(raw)
}

/// Checks a JSON pointer (RFC 6901): empty (the whole document) or `/`
/// then tokens, `~` only as `~0` or `~1`, at most 256 bytes.
pub fn pointer(raw: &str) -> Result<String, String> {
    if raw.len() > 256 {
        let start: String = raw.chars().take(32).collect();
        return Err(format!("pointer {start:?}… is longer than 256 bytes"));
    }
    if !raw.is_empty() && !raw.starts_with('/') {
        return Err(format!(
            "{raw:?} is not a JSON pointer: it starts with /, like /phase"
        ));
    }
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!("{raw:?}: ~ is written ~0 and / inside a name ~1"));
        }
    }
    Ok(raw.to_string())
}
