//! The HTTP surface (`listener ──▶ [connections, client_ip] ──▶ guard ──▶
//! router ──▶ REST, SSE, WebSocket, tasks, health, web UI`): the listeners
//! and what they admit, the routes and their handlers. It reads the hub,
//! the transports, the tasks and the health checks; nothing below it
//! imports it. Its settings values live in the leaf src/http_settings.rs,
//! so the file format can name them.

pub mod client_ip;
pub mod connections;
pub mod guard;
pub mod health;
mod json_errors;
mod query;
pub mod rest;
pub mod router;
pub mod server;
mod session;
mod sse_socket;
pub mod tasks;
pub mod web;
