//! Positions in a stream of changes shared by replicas (`docs/SCALE-OUT.md`;
//! the hub's methods that use them are `Hub::follow_stream`,
//! `Hub::apply_streamed` and `Subscription::replay_from_stream`).
//! Each replica's hub numbers its own changes (`{epoch}-{seq}`), which mean
//! nothing to another replica; with a stream, the hub also records where in
//! the stream it was when it published each change, and cursors carry that
//! position (`{epoch}-{seq}.{stream}-{position}`). A client that has every
//! change up to a position on one replica resumes on another by getting
//! the other's logged changes of member topics that entered the stream
//! after it: an exact replay, patches and all, since every replica holds a
//! member's topics at the owner's revisions.

use crate::protocol::topic::{Topic, TopicKind};

/// Where a hub is in a stream of changes.
#[derive(Debug)]
pub(super) struct StreamMark {
    /// Names the stream (hex of its creation time).
    pub(super) id: String,
    /// Every message of the stream up to this sequence is in the hub (or
    /// was replaced there by a later message of its topic).
    pub(super) position: u64,
    /// The replay log may lack changes of member topics after this sequence
    /// (it let go of one that entered the stream there, or whose place in
    /// the stream it did not know, at this position).
    pub(super) forgotten: u64,
}

impl StreamMark {
    /// A change of `topic` that entered the stream at `streamed_at` (0:
    /// not known) left the replay log.
    pub(super) fn forget(&mut self, topic: &Topic, streamed_at: u64) {
        if !member_topic(topic) {
            return;
        }
        let at = match streamed_at {
            0 => self.position,
            at => at,
        };
        self.forgotten = self.forgotten.max(at);
    }
}

/// Topics of a member cluster: the ones the stream carries. Task and
/// summary topics are each replica's own.
pub(crate) fn member_topic(topic: &Topic) -> bool {
    matches!(
        topic.kind(),
        Some(TopicKind::Cluster { .. } | TopicKind::Sync { .. } | TopicKind::App { .. })
    )
}
