//! The log lines of a members change: one line per member while a change
//! touches few, one summary line per kind of change when it touches many
//! (a Karpor fleet of thousands starting, say), with the per-member lines
//! at `debug`.

use super::HeldMember;

/// Up to this many members of one kind of change get a line each.
pub(super) const PER_MEMBER_LINES: usize = 10;

/// The first names of `names`, then how many more.
fn some(names: &[&str]) -> String {
    let mut shown = names
        .iter()
        .take(PER_MEMBER_LINES)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > PER_MEMBER_LINES {
        shown.push_str(&format!(" and {} more", names.len() - PER_MEMBER_LINES));
    }
    shown
}

/// Members added: (name, server).
pub(super) fn added(members: &[(&str, &str)]) {
    if members.len() <= PER_MEMBER_LINES {
        for (name, server) in members {
            tracing::info!(cluster = %name, server = %server, "member cluster added");
        }
        return;
    }
    for (name, server) in members {
        tracing::debug!(cluster = %name, server = %server, "member cluster added");
    }
    let names: Vec<&str> = members.iter().map(|(name, _)| *name).collect();
    tracing::info!(count = members.len(), clusters = %some(&names), "member clusters added");
}

/// Members removed.
pub(super) fn removed(names: &[String]) {
    by_name(names, "member cluster removed", "member clusters removed");
}

/// Members whose settings changed: their sources restart.
pub(super) fn changed(names: &[String]) {
    by_name(
        names,
        "member cluster settings changed; restarting its sources",
        "member cluster settings changed; restarting their sources",
    );
}

fn by_name(names: &[String], one: &'static str, many: &'static str) {
    if names.len() <= PER_MEMBER_LINES {
        for name in names {
            tracing::info!(cluster = %name, "{one}");
        }
        return;
    }
    for name in names {
        tracing::debug!(cluster = %name, "{one}");
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    tracing::info!(count = names.len(), clusters = %some(&names), "{many}");
}

/// Members newly held (or held for another reason): no sources run.
/// Push members are one line each at debug, and one line in all.
pub(super) fn held(members: &[&HeldMember]) {
    let (pushed, members): (Vec<&HeldMember>, Vec<&HeldMember>) =
        members.iter().partition(|m| m.agent.is_some());
    for member in &pushed {
        tracing::debug!(cluster = %member.name, agent = member.agent.as_deref().unwrap_or(""), "push member: its agent's reports are its documents");
    }
    if !pushed.is_empty() {
        let names: Vec<&str> = pushed.iter().map(|m| m.name.as_str()).collect();
        tracing::info!(count = names.len(), clusters = %some(&names), "push members: their agents' reports are their documents");
    }
    if members.len() <= PER_MEMBER_LINES {
        for member in members {
            tracing::warn!(cluster = %member.name, server = ?member.server, reason = %member.reason, message = %member.message, "member cluster held: no sources run");
        }
        return;
    }
    for member in &members {
        tracing::debug!(cluster = %member.name, server = ?member.server, reason = %member.reason, message = %member.message, "member cluster held: no sources run");
    }
    // One line per reason, each with the first names.
    let mut reasons: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for member in &members {
        reasons
            .entry(member.reason.as_str())
            .or_default()
            .push(member.name.as_str());
    }
    for (reason, names) in reasons {
        tracing::warn!(count = names.len(), reason = %reason, clusters = %some(&names), "member clusters held: no sources run");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_names_are_cut_with_a_count() {
        let names: Vec<String> = (0..13).map(|i| format!("m{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(some(&names[..2]), "m0, m1");
        assert_eq!(
            some(&names),
            "m0, m1, m2, m3, m4, m5, m6, m7, m8, m9 and 3 more"
        );
    }
}
