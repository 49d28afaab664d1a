//! Where a resource request goes: the path parsed against the catalogue
//! (`/api/v1/...`, `/apis/{group}/{version}/...`) into a [`Target`], and the
//! verb its method means there.

use axum::http::Method;

use crate::params::Params;
use crate::resources::ResourceDef;
use crate::shared::Shared;
use crate::status::{ApiError, ApiResult};

/// A subresource of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sub {
    Status,
    Scale,
}

/// What a resource path addresses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// `APIResourceList` of a group/version.
    Discovery { group: String, version: String },
    /// `APIGroup` of a group (`/apis/{group}`).
    Group(String),
    /// A collection, in one namespace or across all.
    Collection {
        def: ResourceDef,
        namespace: Option<String>,
    },
    /// One object, or one of its subresources.
    Object {
        def: ResourceDef,
        namespace: Option<String>,
        name: String,
        sub: Option<Sub>,
    },
}

/// Resolves a request path against the catalogue.
pub(crate) fn parse_path(shared: &Shared, path: &str) -> ApiResult<Target> {
    let catalog = shared.store.catalog();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["apis", group] => return Ok(Target::Group(group.to_string())),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::no_route(path)),
    };
    if catalog.in_group_version(group, version).is_empty() {
        return Err(ApiError::no_route(path));
    }
    let find = |plural: &str| {
        catalog
            .find(group, version, plural)
            .cloned()
            .ok_or_else(|| ApiError::no_route(path))
    };
    let sub = |s: &str, def: &ResourceDef| match s {
        "status" if def.status_subresource => Ok(Sub::Status),
        "scale" if def.scale_subresource => Ok(Sub::Scale),
        _ => Err(ApiError::no_route(path)),
    };
    let namespaced_res = |plural: &str| {
        catalog
            .find(group, version, plural)
            .is_some_and(|d| d.namespaced)
    };
    match rest {
        [] => Ok(Target::Discovery {
            group: group.into(),
            version: version.into(),
        }),
        ["namespaces", ns, plural, tail @ ..] if namespaced_res(plural) => {
            let def = find(plural)?;
            let namespace = Some(ns.to_string());
            match tail {
                [] => Ok(Target::Collection { def, namespace }),
                [name] => Ok(Target::Object {
                    def,
                    namespace,
                    name: name.to_string(),
                    sub: None,
                }),
                [name, s] => {
                    let sub = Some(sub(s, &def)?);
                    Ok(Target::Object {
                        def,
                        namespace,
                        name: name.to_string(),
                        sub,
                    })
                }
                _ => Err(ApiError::no_route(path)),
            }
        }
        [plural] => Ok(Target::Collection {
            def: find(plural)?,
            namespace: None,
        }),
        [plural, name, tail @ ..] => {
            let def = find(plural)?;
            if def.namespaced {
                return Err(ApiError::no_route(path));
            }
            let sub = match tail {
                [] => None,
                [s] => Some(sub(s, &def)?),
                _ => return Err(ApiError::no_route(path)),
            };
            Ok(Target::Object {
                def,
                namespace: None,
                name: name.to_string(),
                sub,
            })
        }
    }
}

/// The RBAC-style verb of a request, for the deny list and the counters.
pub(crate) fn verb_of(method: &Method, target: &Target, params: &Params) -> &'static str {
    match (target, method.as_str()) {
        (Target::Collection { .. }, "GET") if params.bool("watch").unwrap_or(false) => "watch",
        (Target::Collection { .. }, "GET") => "list",
        (Target::Collection { .. }, "POST") => "create",
        (Target::Collection { .. }, "DELETE") => "deletecollection",
        (Target::Object { .. }, "GET") => "get",
        (Target::Object { .. }, "PUT") => "update",
        (Target::Object { .. }, "PATCH") => "patch",
        (Target::Object { .. }, "DELETE") => "delete",
        (Target::Discovery { .. } | Target::Group(_), _) => "get",
        _ => "unsupported",
    }
}
