//! A health rule read over one object: each field's expression evaluated
//! with `object` bound to it, into the [`Workload`] the app machine reads.
//! A field missing from the object (CEL's "no such key") makes an
//! expression's value absent, and absent values take the defaults a
//! Deployment's absent status fields take. Any other error (a value of the
//! wrong type, a list too long to range over) makes the workload `Failed`
//! with the reason [`RULE_ERROR`] and says which rule, which field and why:
//! its health is unknown, and the app shows that rather than a guess.

use std::sync::Arc;

use cel::{Context, ExecutionError, Value};
use serde_json::Value as Json;

use super::{Field, HealthRule, value};
use crate::status::app::{Failure, Workload};

/// The reason of a workload whose rule could not be evaluated.
pub const RULE_ERROR: &str = "HealthRuleError";

/// The reason a rule's `failed` string gets when it names none.
const FAILED: &str = "WorkloadFailed";

/// Why a rule could not read an object.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RuleError {
    /// The field whose expression failed (`ready`), or `object`.
    pub field: &'static str,
    /// Why.
    pub message: String,
}

impl HealthRule {
    /// What the app machine needs of `object` (a whole object, as the
    /// apiserver sends it), its app named by `app_label`.
    pub fn read(&self, object: &Json, app_label: &str) -> Workload {
        let meta = &object["metadata"];
        let text = |v: &Json| v.as_str().unwrap_or_default().to_string();
        let name = text(&meta["name"]);
        let app = meta["labels"][app_label]
            .as_str()
            .filter(|v| !v.is_empty())
            .map_or_else(|| name.clone(), str::to_string);
        let mut workload = Workload {
            kind: self.kind,
            namespace: text(&meta["namespace"]),
            app,
            name,
            generation: meta["generation"].as_i64().unwrap_or(0),
            observed_generation: 0,
            expected: 1,
            replicas: 0,
            updated: 0,
            ready: 0,
            available: 0,
            failure: None,
            paused: false,
            progressing: None,
            terminating: !meta["deletionTimestamp"].is_null(),
            images: Vec::new(),
            selector: Default::default(),
        };
        if let Err(e) = self.fill(object, &mut workload) {
            workload.failure = Some(Failure {
                reason: RULE_ERROR.into(),
                message: format!("health rule {:?}: `{}`: {}", self.name, e.field, e.message),
            });
        }
        workload
    }

    fn fill(&self, object: &Json, w: &mut Workload) -> Result<(), RuleError> {
        let bound =
            value::from_json(object, &mut "object".to_string()).map_err(|message| RuleError {
                field: "object",
                message,
            })?;
        let mut context = Context::with_env(Arc::clone(&self.env));
        context.add_variable_from_value("object", bound);
        for (field, (_, program)) in &self.programs {
            let key = field.key();
            let wrong = |message: String| RuleError {
                field: key,
                message,
            };
            let got = match program.execute(&context) {
                Ok(v) => v,
                Err(ExecutionError::NoSuchKey(_)) => Value::Null,
                Err(e) => return Err(wrong(e.to_string())),
            };
            let count = |v: &Value, default: i32| -> Result<i32, RuleError> {
                match value::to_int(v).map_err(wrong)? {
                    None => Ok(default),
                    Some(n) => {
                        i32::try_from(n).map_err(|_| wrong(format!("{n} is not a replica count")))
                    }
                }
            };
            match field {
                Field::Expected => w.expected = count(&got, 1)?,
                Field::Replicas => w.replicas = count(&got, 0)?,
                Field::Updated => w.updated = count(&got, 0)?,
                Field::Ready => w.ready = count(&got, 0)?,
                Field::Available => w.available = count(&got, 0)?,
                Field::ObservedGeneration => {
                    w.observed_generation = value::to_int(&got).map_err(wrong)?.unwrap_or(0);
                }
                Field::Paused => w.paused = value::to_bool(&got).map_err(wrong)?,
                Field::Failed => {
                    w.failure = value::to_failure(&got, FAILED)
                        .map_err(wrong)?
                        .map(|(reason, message)| Failure { reason, message });
                }
                Field::Progressing => w.progressing = value::to_text(&got).map_err(wrong)?,
                Field::Selector => w.selector = value::to_labels(&got).map_err(wrong)?,
                Field::Images => w.images = value::to_strings(&got).map_err(wrong)?,
            }
        }
        Ok(())
    }
}
