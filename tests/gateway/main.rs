//! The gateway's integration tests, one module per area, in one test binary
//! (the shared fixtures are the `pulse-testkit` crate).

mod agent;
mod cli;
mod demo_push;
mod deploy;
mod deploy_agent;
mod faults;
mod helm;
mod initial_lists;
mod karpor;
mod karpor_not_served;
mod karpor_owned;
mod karpor_status;
mod live_queries;
mod live_query_props;
mod member_answers;
mod members;
mod monitoring;
mod nats_agents;
mod nats_auth;
mod nats_integrity;
mod nodes;
mod ownership;
mod pipeline;
mod pods;
mod replay_window;
mod scaleout;
mod scaleout_faults;
mod scaleout_karpor;
mod scaleout_nats_cluster;
mod scaleout_repair;
mod scaleout_resume;
mod security;
mod subscriptions;
mod tasks;
mod transports;
