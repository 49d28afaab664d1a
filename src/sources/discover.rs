//! One discovery lookup (`member's /apis/{group}/{version} ──▶ [lookup] ──▶
//! watches of rule and registry resources, tasks' /scale`): whether the
//! member serves a resource, as what, with which verbs and subresources.

use kube::core::GroupVersion;
use kube::discovery::{ApiCapabilities, ApiResource};

use crate::status::sync::Gvr;

/// The member's discovery of `gvr`'s group version: the resource and its
/// capabilities where it serves the plural, None where it does not; the
/// error of the request otherwise (`kube::Error::Discovery` when the group
/// version is not served at all).
pub(crate) async fn lookup(
    client: &kube::Client,
    gvr: &Gvr,
) -> Result<Option<(ApiResource, ApiCapabilities)>, kube::Error> {
    let gv = GroupVersion::gv(&gvr.group, &gvr.version);
    let group = match kube::discovery::pinned_group(client, &gv).await {
        Ok(group) => group,
        // The member serves no such group/version: nor the resource.
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(group
        .versioned_resources(&gvr.version)
        .into_iter()
        .find(|(ar, _)| ar.plural == gvr.resource))
}
