//! Karpor 0.6's Go types as JSON shapes (`pkg/kubernetes/apis/cluster` and
//! `search`, `v1beta1/types.go`): what its apiserver keeps of a written
//! object (`typed.rs` applies them through `mod.rs`, picked by `kinds.rs`).

use super::{Field, Shape, field, optional};

const STR_LIST: Shape = Shape::List(&Shape::Str);

/// metav1.Condition.
const CONDITION: &[Field] = &[
    field("type", Shape::Str),
    field("status", Shape::Str),
    optional("observedGeneration", Shape::Int),
    field("lastTransitionTime", Shape::Time),
    field("reason", Shape::Str),
    field("message", Shape::Str),
];

/// metav1.LabelSelector.
const LABEL_SELECTOR: &[Field] = &[
    optional("matchLabels", Shape::StrMap),
    optional(
        "matchExpressions",
        Shape::List(&Shape::Struct(&[
            field("key", Shape::Str),
            field("operator", Shape::Str),
            optional("values", STR_LIST),
        ])),
    ),
];

const EXEC_CONFIG: &[Field] = &[
    field("command", Shape::Str),
    field("args", STR_LIST),
    field(
        "env",
        Shape::List(&Shape::Struct(&[
            field("name", Shape::Str),
            field("value", Shape::Str),
        ])),
    ),
    optional("apiVersion", Shape::Str),
    optional("installHint", Shape::Str),
    field("provideClusterInfo", Shape::Bool),
    optional("interactiveMode", Shape::Str),
];

const CREDENTIAL: &[Field] = &[
    field("type", Shape::Str),
    optional("serviceAccountToken", Shape::Str),
    optional(
        "x509",
        Shape::Ptr(&Shape::Struct(&[
            field("certificate", Shape::Bytes),
            field("privateKey", Shape::Bytes),
        ])),
    ),
    optional("execConfig", Shape::Ptr(&Shape::Struct(EXEC_CONFIG))),
];

const ACCESS: Shape = Shape::Struct(&[
    field("endpoint", Shape::Str),
    optional("caBundle", Shape::Bytes),
    optional("insecure", Shape::Ptr(&Shape::Bool)),
    optional("credential", Shape::Ptr(&Shape::Struct(CREDENTIAL))),
]);

const CLUSTER_SPEC: Shape = Shape::Struct(&[
    field("provider", Shape::Str),
    field("access", ACCESS),
    field("description", Shape::Str),
    field("displayName", Shape::Str),
    optional("finalized", Shape::Ptr(&Shape::Bool)),
]);

/// The spec of Karpor #836 (an agent in the member cluster): `mode`
/// (`pull`, the default, or `push`), `omitempty`.
const CLUSTER_SPEC_WITH_MODE: Shape = Shape::Struct(&[
    field("provider", Shape::Str),
    optional("mode", Shape::Str),
    field("access", ACCESS),
    field("description", Shape::Str),
    field("displayName", Shape::Str),
    optional("finalized", Shape::Ptr(&Shape::Bool)),
]);

/// Karpor 0.6's Cluster status: only `healthy`.
const STATUS: Shape = Shape::Struct(&[optional("healthy", Shape::Bool)]);

/// Karpor #831's ("add cluster status"): also `apiserver`, `version` and
/// `conditions` (metav1.Condition list), each `omitempty`.
const STATUS_WITH_CONDITIONS: Shape = Shape::Struct(&[
    optional("healthy", Shape::Bool),
    optional("apiserver", Shape::Str),
    optional("version", Shape::Str),
    optional("conditions", Shape::List(&Shape::Struct(CONDITION))),
]);

/// Karpor 0.6's Cluster: `status` has only `healthy`.
pub(crate) const CLUSTER: &[Field] = &[field("spec", CLUSTER_SPEC), optional("status", STATUS)];

/// The Cluster of Karpor #831.
pub(crate) const CLUSTER_WITH_CONDITIONS: &[Field] = &[
    field("spec", CLUSTER_SPEC),
    optional("status", STATUS_WITH_CONDITIONS),
];

/// Karpor 0.6's Cluster with #836's `spec.mode`.
pub(crate) const CLUSTER_WITH_MODE: &[Field] = &[
    field("spec", CLUSTER_SPEC_WITH_MODE),
    optional("status", STATUS),
];

/// The Cluster of Karpor #831 with #836's `spec.mode`.
pub(crate) const CLUSTER_WITH_CONDITIONS_AND_MODE: &[Field] = &[
    field("spec", CLUSTER_SPEC_WITH_MODE),
    optional("status", STATUS_WITH_CONDITIONS),
];

const TRANSFORM_RULE_SPEC: Shape = Shape::Struct(&[
    field("type", Shape::Str),
    field("valueTemplate", Shape::Str),
]);

const TRIM_RULE_SPEC: Shape = Shape::Struct(&[optional(
    "retain",
    Shape::Struct(&[optional("jsonPaths", STR_LIST)]),
)]);

const SYNC_RULE: Shape = Shape::Struct(&[
    field("apiVersion", Shape::Str),
    field("resource", Shape::Str),
    optional("namespace", Shape::Str),
    // metav1.Duration prints as a Go duration string.
    optional("resyncPeriod", Shape::Ptr(&Shape::Str)),
    optional("maxConcurrent", Shape::Int),
    optional(
        "selectors",
        Shape::List(&Shape::Struct(&[
            optional("labelSelector", Shape::Ptr(&Shape::Struct(LABEL_SELECTOR))),
            optional(
                "fieldSelector",
                Shape::Ptr(&Shape::Struct(&[
                    optional("matchFields", Shape::StrMap),
                    optional("serverSupported", Shape::Bool),
                ])),
            ),
        ])),
    ),
    optional("transform", Shape::Ptr(&TRANSFORM_RULE_SPEC)),
    optional("transformRefName", Shape::Str),
    optional("trim", Shape::Ptr(&TRIM_RULE_SPEC)),
    optional("trimRefName", Shape::Str),
    optional("remainAfterDeleted", Shape::Bool),
]);

pub(crate) const SYNC_REGISTRY: &[Field] = &[
    optional(
        "spec",
        Shape::Struct(&[
            optional("clusters", STR_LIST),
            optional(
                "clusterLabelSelector",
                Shape::Ptr(&Shape::Struct(LABEL_SELECTOR)),
            ),
            optional("syncResources", Shape::List(&SYNC_RULE)),
            optional("syncResourcesRefName", Shape::Str),
        ]),
    ),
    optional(
        "status",
        Shape::Struct(&[
            field(
                "clusters",
                Shape::List(&Shape::Struct(&[
                    field("cluster", Shape::Str),
                    field("status", Shape::Str),
                    field(
                        "resources",
                        Shape::List(&Shape::Struct(&[
                            field("apiVersion", Shape::Str),
                            field("kind", Shape::Str),
                            field("status", Shape::Str),
                            optional("reason", Shape::Str),
                            optional("message", Shape::Str),
                            field("lastTransitionTime", Shape::Time),
                        ])),
                    ),
                ])),
            ),
            field("lastTransitionTime", Shape::Time),
        ]),
    ),
];

pub(crate) const SYNC_RESOURCES: &[Field] = &[optional(
    "spec",
    Shape::Struct(&[optional("syncResources", Shape::List(&SYNC_RULE))]),
)];

pub(crate) const TRANSFORM_RULE: &[Field] = &[optional("spec", TRANSFORM_RULE_SPEC)];

pub(crate) const TRIM_RULE: &[Field] = &[optional("spec", TRIM_RULE_SPEC)];
