//! Live queries (`hub ──changes──▶ transports ──▶ [query] ──▶ messages`):
//! a subscription that asks for a filter, a sort, a window and counts gets
//! the window's rows and then only what changes in them, with the number
//! of matching documents and their counts per group, as documents change.
//! [`spec`] reads and checks what the client asked for, [`filter`] and
//! [`order`] are its language, [`live`] keeps one query's state. Depends
//! only on the wire (`protocol/`). `docs/PROTOCOL.md` ("Live queries") is
//! the reference.

pub mod filter;
pub mod limits;
pub mod live;
pub mod order;
pub mod spec;

pub use limits::Limits;
pub use live::{Initial, LiveQuery, QueryOut, Row};
pub use spec::{QueryMembers, QuerySpec};
