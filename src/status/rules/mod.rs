//! Health rules: how to read a custom workload (a KusionStack CollaSet, an
//! OpenKruise CloneSet, an Argo Rollout, or any kind a config names) into
//! the [`Workload`] the app machine reads, exactly as it reads a Deployment
//! (`sources ──object──▶ [rules] ──Workload──▶ app machine`).
//!
//! A rule names a resource (group, version, plural, kind) and says, as CEL
//! expressions over the object (`object`), how to read its desired,
//! current, updated, ready and available counts, its observed generation,
//! whether it is paused, failed or still progressing, its pod selector and
//! images. Every expression is compiled when the configuration is loaded,
//! and refused there, with the rule, the field and why, when it does not
//! parse, names anything but `object`, or may cost more than
//! [`cost::MAX_COST`]. Built-in rules (`builtin.yaml`) cover the three
//! kinds above; a config rule of the same name replaces a built-in one.

pub mod cost;
mod eval;
mod value;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use cel::{Env, Program};
use serde::Deserialize;

use crate::status::sync::Gvr;

pub use eval::RULE_ERROR;

/// One health rule as written in the config file (`healthRules`) or the
/// built-in set. Absent expressions take the defaults in [`DEFAULTS`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleSpec {
    /// The rule's name (unique; a config rule named like a built-in one replaces it).
    pub name: String,
    /// API group of the resource (not empty: core and `apps` workloads are built in).
    pub group: String,
    /// API version to watch.
    pub version: String,
    /// Plural resource name (`collasets`).
    pub resource: String,
    /// Kind of its objects (`CollaSet`), as the app document names workloads.
    pub kind: String,
    /// Replicas it should run (int; absent: 1).
    #[serde(default)]
    pub expected: Option<String>,
    /// Pods that exist, ready or not (int; absent: 0).
    #[serde(default)]
    pub replicas: Option<String>,
    /// Pods of the current template (int; absent: 0).
    #[serde(default)]
    pub updated: Option<String>,
    /// Ready pods (int; absent: 0).
    #[serde(default)]
    pub ready: Option<String>,
    /// Available pods (int; absent: 0).
    #[serde(default)]
    pub available: Option<String>,
    /// The generation its controller last acted on (int, or a string of
    /// digits; absent: 0).
    #[serde(default)]
    pub observed_generation: Option<String>,
    /// Whether the rollout is paused on purpose (bool; absent: false).
    #[serde(default)]
    pub paused: Option<String>,
    /// Why its controller gave up: a string (the message), or a map with
    /// `reason` and `message`; null, absent or empty: not failed.
    #[serde(default)]
    pub failed: Option<String>,
    /// What is still under way although the counters look done (string;
    /// null, absent or empty: nothing).
    #[serde(default)]
    pub progressing: Option<String>,
    /// The labels of the pods it owns (map of strings; absent: none).
    #[serde(default)]
    pub selector: Option<String>,
    /// Container images of its pod template (list of strings; absent: none).
    #[serde(default)]
    pub images: Option<String>,
    /// Where tasks set the replica count when the member serves no `/scale`
    /// for the resource (a JSON pointer; default `/spec/replicas`).
    #[serde(default)]
    pub replicas_path: Option<String>,
    /// Where the pod template is, for Update tasks (a JSON pointer; default
    /// `/spec/template`).
    #[serde(default)]
    pub template_path: Option<String>,
}

/// The expression of each field a rule leaves out. A field missing from the
/// object makes an expression's value absent (see `eval`), so these read
/// what most workload kinds share with Deployments.
pub const DEFAULTS: [(Field, &str); 11] = [
    (Field::Expected, "object.spec.replicas"),
    (Field::Replicas, "object.status.replicas"),
    (Field::Updated, "object.status.updatedReplicas"),
    (Field::Ready, "object.status.readyReplicas"),
    (Field::Available, "object.status.availableReplicas"),
    (
        Field::ObservedGeneration,
        "object.status.observedGeneration",
    ),
    (Field::Paused, "false"),
    (Field::Failed, "null"),
    (Field::Progressing, "null"),
    (Field::Selector, "object.spec.selector.matchLabels"),
    (
        Field::Images,
        "object.spec.template.spec.containers.map(c, c.image)",
    ),
];

/// The fields a rule yields (their meaning: [`RuleSpec`]'s fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum Field {
    Expected,
    Replicas,
    Updated,
    Ready,
    Available,
    ObservedGeneration,
    Paused,
    Failed,
    Progressing,
    Selector,
    Images,
}

impl Field {
    /// The field's key in the config file.
    pub fn key(self) -> &'static str {
        match self {
            Field::Expected => "expected",
            Field::Replicas => "replicas",
            Field::Updated => "updated",
            Field::Ready => "ready",
            Field::Available => "available",
            Field::ObservedGeneration => "observedGeneration",
            Field::Paused => "paused",
            Field::Failed => "failed",
            Field::Progressing => "progressing",
            Field::Selector => "selector",
            Field::Images => "images",
        }
    }

    fn written(self, spec: &RuleSpec) -> Option<&str> {
        match self {
            Field::Expected => spec.expected.as_deref(),
            Field::Replicas => spec.replicas.as_deref(),
            Field::Updated => spec.updated.as_deref(),
            Field::Ready => spec.ready.as_deref(),
            Field::Available => spec.available.as_deref(),
            Field::ObservedGeneration => spec.observed_generation.as_deref(),
            Field::Paused => spec.paused.as_deref(),
            Field::Failed => spec.failed.as_deref(),
            Field::Progressing => spec.progressing.as_deref(),
            Field::Selector => spec.selector.as_deref(),
            Field::Images => spec.images.as_deref(),
        }
    }
}

/// A rule ready to read objects: its resource and compiled expressions.
pub struct HealthRule {
    /// The rule's name.
    pub name: String,
    /// The resource it reads.
    pub gvr: Gvr,
    /// The kind of its objects (interned: workloads name their kind by
    /// `&'static str`; one allocation per distinct kind for the process).
    pub kind: &'static str,
    /// Where tasks set the replica count without `/scale`.
    pub replicas_path: String,
    /// Where the pod template is.
    pub template_path: String,
    programs: BTreeMap<Field, (String, Program)>,
    env: Arc<Env>,
}

impl std::fmt::Debug for HealthRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthRule")
            .field("name", &self.name)
            .field("gvr", &self.gvr)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// The health rules in force: the built-in ones, replaced or joined by the
/// config file's.
pub struct HealthRules {
    rules: Vec<Arc<HealthRule>>,
}

impl Default for HealthRules {
    /// The built-in rules alone.
    fn default() -> Self {
        Self::compile(&[]).expect("the built-in health rules compile")
    }
}

impl std::fmt::Debug for HealthRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|r| &r.name))
            .finish()
    }
}

impl PartialEq for HealthRules {
    fn eq(&self, other: &Self) -> bool {
        self.rules.len() == other.rules.len()
            && self
                .rules
                .iter()
                .zip(&other.rules)
                .all(|(a, b)| a.name == b.name && a.gvr == b.gvr && a.kind == b.kind)
    }
}

/// The built-in rules, in the config file's format: KusionStack `CollaSet`,
/// OpenKruise `CloneSet` and Argo Rollouts `Rollout`, written from those
/// projects' API types (field names and meanings in docs/STATUS.md).
const BUILTIN: &str = include_str!("builtin.yaml");

/// Kinds a rule may not take: the app machine reads them itself.
const BUILTIN_KINDS: [&str; 2] = ["Deployment", "StatefulSet"];

impl HealthRules {
    /// The built-in rules with `configured` ones replacing those of the same
    /// name and joining the rest; or what is wrong with the first bad rule
    /// (its name, the field and why).
    pub fn compile(configured: &[RuleSpec]) -> Result<Self, String> {
        let mut specs: Vec<RuleSpec> =
            serde_yaml_ng::from_str(BUILTIN).expect("builtin.yaml holds health rules");
        for spec in configured {
            if configured.iter().filter(|s| s.name == spec.name).count() > 1 {
                return Err(format!("health rule {:?} is defined twice", spec.name));
            }
            match specs.iter_mut().find(|s| s.name == spec.name) {
                Some(builtin) => *builtin = spec.clone(),
                None => specs.push(spec.clone()),
            }
        }
        let env = Arc::new(Env::stdlib().with_optional_support(true));
        let mut rules: Vec<Arc<HealthRule>> = Vec::new();
        for spec in &specs {
            let rule = compile_rule(&env, spec)?;
            if let Some(other) = rules
                .iter()
                .find(|r| r.gvr == rule.gvr || r.kind == rule.kind)
            {
                return Err(format!(
                    "health rules {:?} and {:?} both read {} ({}): one rule per resource and kind",
                    other.name,
                    rule.name,
                    rule.gvr.path(),
                    rule.kind
                ));
            }
            rules.push(Arc::new(rule));
        }
        Ok(Self { rules })
    }

    /// Every rule, built-in ones first.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<HealthRule>> {
        self.rules.iter()
    }

    /// The rule that reads `gvr`, if any.
    pub fn for_resource(&self, gvr: &Gvr) -> Option<&Arc<HealthRule>> {
        self.rules.iter().find(|r| &r.gvr == gvr)
    }

    /// The rule whose objects are of `kind`, if any.
    pub fn for_kind(&self, kind: &str) -> Option<&Arc<HealthRule>> {
        self.rules.iter().find(|r| r.kind == kind)
    }
}

fn compile_rule(env: &Arc<Env>, spec: &RuleSpec) -> Result<HealthRule, String> {
    let bad = |what: String| format!("health rule {:?}: {what}", spec.name);
    if spec.name.trim().is_empty() {
        return Err("a health rule has no name".into());
    }
    for (key, value) in [
        ("group", &spec.group),
        ("version", &spec.version),
        ("resource", &spec.resource),
        ("kind", &spec.kind),
    ] {
        if value.trim().is_empty() {
            return Err(bad(format!("`{key}` is empty")));
        }
    }
    if spec.group == "apps" || BUILTIN_KINDS.contains(&spec.kind.as_str()) {
        return Err(bad(format!(
            "{}/{} is read by the app machine itself; rules are for custom workloads",
            spec.group, spec.kind
        )));
    }
    let pointer = |key: &str, value: &Option<String>, default: &str| -> Result<String, String> {
        let value = value.clone().unwrap_or_else(|| default.to_string());
        if !value.starts_with('/') || value.len() < 2 {
            return Err(bad(format!(
                "`{key}` must be a JSON pointer such as {default}, not {value:?}"
            )));
        }
        Ok(value)
    };
    let replicas_path = pointer("replicasPath", &spec.replicas_path, "/spec/replicas")?;
    let template_path = pointer("templatePath", &spec.template_path, "/spec/template")?;
    let mut programs = BTreeMap::new();
    for (field, default) in DEFAULTS {
        let source = field.written(spec).unwrap_or(default);
        let program = compile_expression(env, source)
            .map_err(|why| bad(format!("`{}`: {why} (in {source:?})", field.key())))?;
        programs.insert(field, (source.to_string(), program));
    }
    Ok(HealthRule {
        name: spec.name.clone(),
        gvr: Gvr::new(&spec.group, &spec.version, &spec.resource),
        kind: intern_kind(&spec.kind),
        replicas_path,
        template_path,
        programs,
        env: Arc::clone(env),
    })
}

/// Compiles one expression and checks what it may read and cost.
fn compile_expression(env: &Env, source: &str) -> Result<Program, String> {
    let program = env.compile(source).map_err(|e| e.to_string())?;
    let unknown: Vec<String> = cost::free_names(program.expression())
        .into_iter()
        .filter(|v| v != "object")
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "unknown name {}: an expression may read only `object`",
            unknown.join(", ")
        ));
    }
    let estimate = cost::estimate(program.expression());
    if estimate > cost::MAX_COST {
        return Err(format!(
            "estimated cost {estimate} is over the bound of {} (each comprehension counts its body {} times, the longest list an object may hold)",
            cost::MAX_COST,
            cost::MAX_LIST
        ));
    }
    Ok(program)
}

/// `kind` as a `&'static str`, allocated once per distinct kind.
fn intern_kind(kind: &str) -> &'static str {
    use std::collections::BTreeSet;
    use std::sync::{Mutex, OnceLock};
    static KINDS: OnceLock<Mutex<BTreeSet<&'static str>>> = OnceLock::new();
    let mut kinds = KINDS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = kinds.get(kind) {
        return known;
    }
    let leaked: &'static str = Box::leak(kind.to_string().into_boxed_str());
    kinds.insert(leaked);
    leaked
}
