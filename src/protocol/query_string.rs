//! Query strings (`?topic=clusters%2Fprod&limit=20`), decoded strictly:
//! a `%` not followed by two hex digits, or bytes that decode to text that
//! is not UTF-8, are errors rather than read as they come (`%zz` kept as
//! is, `%ff` turned into U+FFFD), so a client learns that its URL was
//! built wrong instead of asking for something else than it meant.

/// The `name=value` pairs of `raw`, in order (`+` is a space; an empty
/// segment, as in `a=1&&b=2`, is skipped; a name without `=` has an empty
/// value).
pub fn pairs(raw: &str) -> Result<Vec<(String, String)>, String> {
    raw.split('&')
        .filter(|segment| !segment.is_empty())
        .map(|segment| {
            let (name, value) = segment.split_once('=').unwrap_or((segment, ""));
            Ok((decode(name)?, decode(value)?))
        })
        .collect()
}

/// [`pairs`] (an error says the query string is malformed), refusing a
/// name given twice unless it is one of `repeatable` (the others take one
/// value): what the REST routes and the event stream read.
pub fn pairs_once(raw: &str, repeatable: &[&str]) -> Result<Vec<(String, String)>, String> {
    let pairs = pairs(raw).map_err(|e| format!("malformed query string: {e}"))?;
    let mut seen: Vec<&str> = Vec::new();
    for (name, _) in &pairs {
        if repeatable.contains(&name.as_str()) {
            continue;
        }
        if seen.contains(&name.as_str()) {
            return Err(format!(
                "query parameter {name:?} is given twice; it takes one value"
            ));
        }
        seen.push(name);
    }
    Ok(pairs)
}

/// One component, `+` and `%XX` decoded.
fn decode(raw: &str) -> Result<String, String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                let Some(byte) = hex else {
                    let end = (i + 3).min(bytes.len());
                    return Err(format!(
                        "malformed percent-encoding {:?} in {raw:?}: `%` is followed by two hex digits (a `%` itself is %25)",
                        String::from_utf8_lossy(&bytes[i..end])
                    ));
                };
                out.push(byte);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("{raw:?} does not decode to UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_decode_strictly() {
        let ok = |raw: &str| pairs(raw).unwrap();
        assert_eq!(
            ok("topic=clusters%2Fprod&topic=apps/**&limit=20"),
            [
                ("topic".to_string(), "clusters/prod".to_string()),
                ("topic".into(), "apps/**".into()),
                ("limit".into(), "20".into()),
            ]
        );
        assert_eq!(
            ok("a=x+y%20z&&b"),
            [
                ("a".to_string(), "x y z".to_string()),
                ("b".into(), String::new())
            ]
        );
        assert_eq!(
            ok("filter=%7B%22eq%22%3A1%7D"),
            [("filter".to_string(), "{\"eq\":1}".to_string())]
        );
        assert_eq!(ok("n=%C3%A9"), [("n".to_string(), "é".to_string())]);
        assert!(ok("").is_empty());
        for (raw, want) in [
            ("topic=clusters/%zz", "malformed percent-encoding \"%zz\""),
            ("topic=clusters/%", "malformed percent-encoding \"%\""),
            ("topic=%4", "malformed percent-encoding \"%4\""),
            ("topic=%+1", "malformed percent-encoding"),
            ("cluster=%ff", "does not decode to UTF-8"),
            ("%ff%fe=1", "does not decode to UTF-8"),
        ] {
            let err = pairs(raw).unwrap_err();
            assert!(err.contains(want), "{raw}: {err}");
        }
        let once = |raw: &str| pairs_once(raw, &["topic"]);
        assert_eq!(once("topic=a&topic=b&limit=1").unwrap().len(), 3);
        assert!(
            once("limit=1&limit=2")
                .unwrap_err()
                .contains("\"limit\" is given twice")
        );
        assert!(
            once("topic=%zz")
                .unwrap_err()
                .starts_with("malformed query string: ")
        );
    }
}
