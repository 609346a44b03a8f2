//! From an index URL and a skill name to a verified artifact file, with its provenance.
//!
//! Order: load the index (network, or the cached copy with `--offline`), select the entry
//! (refusing skipped, ambiguous and v0.1.0 entries), resolve its URL, look the digest up in the
//! cache, else download into a temporary file while hashing, and keep the bytes only if their
//! digest is the listed one. A mismatching download is removed before this returns.

use serde::Serialize;
use serde_json::Value;
use url::Url;

use super::FetchError;
use super::cache::{self, Cache, Hit};
use super::client::{Client, Download, Hop, What};
use crate::digest::Sha256Digest;
use crate::index::{self, Entry, EntryType, Index, IndexError, IndexLimits, Lookup, Skipped};
use crate::urls::UrlForm;

/// Where bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Network,
    Cache,
}

/// The provenance block: everything needed to say where the bytes came from.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Provenance {
    pub index_url: String,
    pub index_source: Option<Source>,
    /// The index download (redirect hops, final URL, Content-Type) when fetched now.
    pub index_download: Option<Download>,
    /// The entry object exactly as the index lists it.
    pub entry: Option<Value>,
    pub resolved_url: Option<String>,
    pub url_form: Option<UrlForm>,
    pub cross_origin: Option<bool>,
    pub artifact_source: Option<Source>,
    /// Every redirect followed for the artifact, in order.
    pub hops: Vec<Hop>,
    /// Where this fetch's artifact download ended (after redirects); `None` for a cache hit,
    /// which downloads nothing: where the entry pointed is `resolved_url`, where the bytes
    /// were first downloaded from is `cached_from` (see [`Self::artifact_url`]).
    pub final_url: Option<String>,
    /// The address the artifact was received from.
    pub address: Option<String>,
    /// The proxy the artifact came through (credentials redacted), if any.
    pub via_proxy: Option<String>,
    pub content_type: Option<String>,
    /// The digest listed and verified.
    pub digest: Option<Sha256Digest>,
    pub size: Option<u64>,
    /// For a cache hit, the record of the download that stored the bytes (its URL, final URL,
    /// Content-Type and time), which may have been listed by another index or at another URL.
    pub cached_from: Option<cache::Origin>,
    /// When this fetch ran (RFC 3339, UTC).
    pub time: String,
}

impl Provenance {
    /// Where this fetch's artifact came from, as far as is known: the final URL of its
    /// download; for a cache hit, the URL the entry resolved to, or the cached download's
    /// final URL when that download was of this same URL (its redirects are then this URL's;
    /// a hit makes no request to see them again). Never the URL of a download made for
    /// another entry or index, which the same digest does not make this one's.
    pub fn artifact_url(&self) -> Option<&str> {
        if let Some(u) = &self.final_url {
            return Some(u);
        }
        let resolved = self.resolved_url.as_deref()?;
        match &self.cached_from {
            Some(o) if o.url == resolved && !o.final_url.is_empty() => Some(&o.final_url),
            _ => Some(resolved),
        }
    }
}

/// Why the pipeline stopped before extraction.
#[derive(Debug, thiserror::Error)]
// Not `non_exhaustive`: the CLI maps every variant to an exit status, and a new one must
// not compile until it has one.
pub enum AcquireError {
    #[error(transparent)]
    Fetch(#[from] FetchError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("the index lists no skill named {name:?} (listed: {listed})")]
    NotListed { name: String, listed: String },
    #[error("the index entry for {:?} was skipped: {}", .0.name.as_deref().unwrap_or(""), .0.reason)]
    EntrySkipped(Skipped),
    #[error(
        "{name:?} comes from a v0.1.0 index (no $schema): it lists no digest, so it cannot be fetched for installation"
    )]
    NotInstallable { name: String },
    #[error("the entry for {name:?} has a relative URL and no base to resolve it against")]
    Unresolved { name: String },
    #[error(
        "digest mismatch: the index lists {expected}, the {size} bytes received hash to {actual}; they were discarded"
    )]
    DigestMismatch {
        expected: Sha256Digest,
        actual: Sha256Digest,
        size: u64,
    },
    #[error("--offline: {0}")]
    Offline(String),
    #[error("cache: {0}")]
    Cache(#[source] std::io::Error),
}

/// A verified artifact ready for extraction.
#[derive(Debug)]
pub struct Acquired {
    pub entry: Entry,
    pub artifact_type: EntryType,
    pub hit: Hit,
}

/// Fetch (or, offline, read from the cache) and parse the index at `url`.
pub fn load_index(
    client: &Client,
    cache: Option<&Cache>,
    url: &Url,
    limits: &IndexLimits,
    offline: bool,
    prov: &mut Provenance,
) -> Result<Index, AcquireError> {
    client
        .policy()
        .check_url(url)
        .map_err(FetchError::Refused)?;
    // Where the document was retrieved from: its references resolve against the last URL of
    // its redirects (RFC 3986 5.1.3), a publisher that moved its index keeping its relative
    // URLs; cross-origin is still judged against the URL typed.
    let (bytes, retrieved_from) = if offline {
        let cache = cache.ok_or_else(|| AcquireError::Offline("no cache directory".into()))?;
        let (bytes, from) = cache
            .load_index(url.as_str())
            .map_err(AcquireError::Cache)?
            .ok_or_else(|| AcquireError::Offline(format!("no cached copy of the index {url}")))?;
        prov.index_source = Some(Source::Cache);
        (bytes, from.as_deref().and_then(|u| Url::parse(u).ok()))
    } else {
        let mut body = Vec::new();
        let mut hops = Vec::new();
        let got = client.get(url, What::Index, &mut body, &mut hops);
        let moved = match got {
            Ok(d) => {
                let moved = Url::parse(&d.final_url).ok().filter(|f| f != url);
                prov.index_download = Some(d);
                moved
            }
            Err(e) => {
                prov.index_download = (!hops.is_empty()).then(|| Download {
                    hops,
                    final_url: String::new(),
                    address: String::new(),
                    content_type: None,
                    bytes: 0,
                    via_proxy: None,
                });
                return Err(match e {
                    // An index over its bound is the index error a file over it gives.
                    FetchError::IndexTooLarge { size, max, .. } => {
                        prov.index_source = Some(Source::Network);
                        IndexError::TooLarge { size, max }.into()
                    }
                    other => other.into(),
                });
            }
        };
        prov.index_source = Some(Source::Network);
        (body, moved)
    };
    let base = retrieved_from.as_ref().unwrap_or(url);
    let index = index::parse_retrieved(&bytes, Some(base), Some(url), limits)?;
    if !offline && let Some(cache) = cache {
        // Only a processed index is kept; a failure to keep it is not a failure to fetch.
        // A password in an entry URL is kept out of the copy (that entry is refused anyway).
        let kept = index::redacted_document(&bytes);
        let _ = cache.store_index(
            url.as_str(),
            kept.as_deref().unwrap_or(&bytes),
            retrieved_from.as_ref().map(Url::as_str),
        );
    }
    Ok(index)
}

/// Select the entry named `name` and make sure it can be installed.
pub fn select(index: &Index, name: &str) -> Result<Entry, AcquireError> {
    match index.find(name) {
        Lookup::Found(e) if index.installable => Ok(e.clone()),
        Lookup::Found(e) => Err(AcquireError::NotInstallable {
            name: e.name.clone(),
        }),
        Lookup::Skipped(s) => Err(AcquireError::EntrySkipped(s.clone())),
        Lookup::Absent => {
            let mut listed: Vec<&str> = index
                .entries
                .iter()
                .map(|e| e.name.as_str())
                .take(20)
                .collect();
            if listed.is_empty() {
                listed.push("none");
            }
            Err(AcquireError::NotListed {
                name: index::check_name(name)
                    .map(|()| name.to_owned())
                    .unwrap_or_else(|_| crate::reason::display_name(name.as_bytes())),
                listed: listed.join(", "),
            })
        }
    }
}

/// Get the entry's artifact: from the cache when its digest is there, else downloaded and
/// verified, then stored.
pub fn artifact(
    client: &Client,
    cache: &Cache,
    entry: Entry,
    offline: bool,
    prov: &mut Provenance,
) -> Result<Acquired, AcquireError> {
    prov.entry = Some(entry.as_listed.clone());
    let (Some(digest), Some(artifact_type)) = (entry.digest, entry.artifact_type) else {
        return Err(AcquireError::NotInstallable {
            name: entry.name.clone(),
        });
    };
    prov.digest = Some(digest);
    let url = entry.url.as_ref().ok_or_else(|| AcquireError::Unresolved {
        name: entry.name.clone(),
    })?;
    prov.url_form = Some(url.form);
    prov.cross_origin = Some(url.cross_origin);
    let resolved = url
        .resolved
        .clone()
        .ok_or_else(|| AcquireError::Unresolved {
            name: entry.name.clone(),
        })?;
    prov.resolved_url = Some(resolved.to_string());
    // The URL rules hold whether or not the bytes are already cached: a cache hit must not make
    // an entry installable that the network path would refuse.
    client
        .policy()
        .check_url(&resolved)
        .map_err(FetchError::Refused)?;

    // Held until the bytes are committed (or this fails): a concurrent fetch of the same digest
    // waits here, then finds them in the cache instead of downloading them again.
    let _lock = cache.lock(&digest).map_err(AcquireError::Cache)?;
    if let Some(hit) = cache.lookup(&digest).map_err(AcquireError::Cache)? {
        prov.artifact_source = Some(Source::Cache);
        prov.size = Some(hit.size);
        prov.cached_from = hit.origin.clone();
        prov.content_type = hit.origin.as_ref().and_then(|o| o.content_type.clone());
        // No download: `final_url` stays empty rather than naming the cached download's, which
        // may be another index's (this fetch's own is `resolved_url`; that one `cached_from`).
        return Ok(Acquired {
            entry,
            artifact_type,
            hit,
        });
    }
    if offline {
        return Err(AcquireError::Offline(format!(
            "{digest} is not in the cache"
        )));
    }
    // Policy is checked by the client for the artifact URL on its own: the index host listing a
    // cross-origin URL earns that URL nothing.
    let mut pending = cache.pending(&digest).map_err(AcquireError::Cache)?;
    let got = client.get(&resolved, What::Artifact, &mut pending, &mut prov.hops);
    let download = got?;
    prov.artifact_source = Some(Source::Network);
    prov.final_url = Some(download.final_url.clone());
    prov.address = Some(download.address.clone());
    prov.via_proxy = download.via_proxy.clone();
    prov.content_type = download.content_type.clone();
    prov.size = Some(download.bytes);
    let actual = pending.finish();
    if actual != digest {
        let size = pending.bytes();
        drop(pending); // removes the temporary file
        return Err(AcquireError::DigestMismatch {
            expected: digest,
            actual,
            size,
        });
    }
    let origin = cache::Origin {
        url: resolved.to_string(),
        final_url: download.final_url.clone(),
        content_type: download.content_type.clone(),
        fetched_at: prov.time.clone(),
    };
    let hit = cache
        .commit(pending, &origin)
        .map_err(AcquireError::Cache)?;
    Ok(Acquired {
        entry,
        artifact_type,
        hit,
    })
}

/// The engine's request for an acquired index artifact: its declared type, the response
/// Content-Type (preferred) and the URL's file name (fallback) as format hints, the digest it
/// is listed with, and the index's name and description for the review. An index artifact's
/// root is the skill directory (discovery draft), so the `.skill` wrapper is never accepted
/// here, whatever `limits` say.
pub fn engine_request(
    acquired: &Acquired,
    prov: &Provenance,
    limits: crate::extract::policy::Limits,
) -> crate::extract::Request {
    use crate::extract::{ArtifactType, Request};
    let mut req = Request::new(
        match acquired.artifact_type {
            EntryType::SkillMd => ArtifactType::SkillMd,
            EntryType::Archive => ArtifactType::Archive,
        },
        limits,
    );
    req.limits.accept_wrapper = false;
    req.media_type = prov.content_type.clone();
    req.file_name = prov
        .artifact_url()
        .and_then(|u| Url::parse(u).ok())
        .and_then(|u| {
            u.path_segments()
                .and_then(|mut s| s.next_back().map(str::to_owned))
        })
        .filter(|n| !n.is_empty());
    req.expected_digest = acquired.entry.digest;
    req.skill_name = Some(acquired.entry.name.clone());
    req.index_description = Some(acquired.entry.description.clone());
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a fetch's artifact came from: its own download's final URL; for a cache hit, the
    /// URL its entry resolved to, or the cached download's final URL only when that download
    /// was of the same URL (another index's redirect target is never this fetch's).
    #[test]
    fn artifact_url_is_this_fetchs_own() {
        let origin = |url: &str, final_url: &str| cache::Origin {
            url: url.into(),
            final_url: final_url.into(),
            content_type: None,
            fetched_at: "t".into(),
        };
        let downloaded = Provenance {
            resolved_url: Some("https://a.example/x".into()),
            final_url: Some("https://cdn.example/x".into()),
            ..Provenance::default()
        };
        assert_eq!(downloaded.artifact_url(), Some("https://cdn.example/x"));
        let hit = |cached: cache::Origin| Provenance {
            resolved_url: Some("https://b.example/y".into()),
            artifact_source: Some(Source::Cache),
            cached_from: Some(cached),
            ..Provenance::default()
        };
        let same = hit(origin("https://b.example/y", "https://cdn.example/y"));
        assert_eq!(same.artifact_url(), Some("https://cdn.example/y"));
        let other = hit(origin("https://a.example/x", "https://cdn.example/x"));
        assert_eq!(other.artifact_url(), Some("https://b.example/y"));
        let unrecorded = Provenance {
            cached_from: None,
            ..hit(origin("", ""))
        };
        assert_eq!(unrecorded.artifact_url(), Some("https://b.example/y"));
        assert_eq!(Provenance::default().artifact_url(), None);
    }
}
