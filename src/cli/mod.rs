//! Command-line interface (`flags, env, config file ──▶ [cli] ──▶ gateway,
//! demo, simulator`): `sim`, `demo` and `serve`, each with `--help`, and
//! the conversion of flags into library configuration. `args.rs` is the
//! grammar of the commands, `shared.rs` the flag groups `demo` and `serve`
//! share, `settings.rs` what flags and the config file become, `sim.rs`
//! the `sim` command whole.

mod agent;
mod args;
mod settings;
mod shared;
#[cfg(feature = "demo")]
pub mod sim;

pub use agent::{AgentArgs, AgentKeyArgs, HubKeyArgs};
#[cfg(not(feature = "demo"))]
pub use args::NotBuilt;
pub use args::{Cli, Command, DemoArgs, ServeArgs};
pub use shared::{ConnectionArgs, NatsAuthArgs, NatsUrl, PushArgs, SecurityArgs, TaskArgs};
