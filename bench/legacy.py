"""The earlier ConfigMap layout of transcripts, re-enacted for the "before" figures of `etcd`.

Earlier versions kept a transcript and its checkpoint in ConfigMaps owned by the job: one
manifest (`<job>-a<attempt>`) and shards of at most 256 KiB, each chunk's record merged into
the open shard with one PATCH (so etcd stored the whole shard again after every chunk), a new
shard and a manifest update when the open one was full, and the manifest's summary at the end.
`ConfigMapTranscript` sends exactly those writes to the API server, so `make bench` measures
what that layout cost etcd beside what the results store costs it now, in the same run. It is
a benchmark's model of old writes, never used by the runtime.
"""

from __future__ import annotations

import json
from typing import Any

from recall.kube.client import KubeClient

SHARD_BYTES = 256 * 1024


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class ConfigMapTranscript:
    """One attempt's manifest and shards, written as the ConfigMap layout wrote them."""

    def __init__(self, store: KubeClient, namespace: str, job: str) -> None:
        self.store = store
        self.namespace = namespace
        self.job = job
        self.shards: list[dict[str, Any]] = []
        self.open_bytes = 0
        self.writes = 0

    def _manifest(self, summary: dict[str, Any] | None = None) -> dict[str, str]:
        body = {"format": 1, "job": self.job, "attempt": 1, "shards": self.shards}
        if summary is not None:
            body["transcript"] = summary
        return {"manifest.json": _dumps(body)}

    def begin(self) -> None:
        labels = {"recall.dev/job": self.job, "recall.dev/store": "manifest"}
        self.store.create_config_map(
            self.namespace, f"{self.job}-a1", self._manifest(), labels=labels
        )
        self.writes += 1

    def add(self, index: int, segments: list[tuple[float, float, str]]) -> None:
        record = _dumps({"cut": [index, index + 1], "tail": "", "segments": segments})
        data = {f"c{index:06d}": record}
        size = len(record) + 7
        if self.shards and self.open_bytes + size <= SHARD_BYTES:
            self.store.patch_config_map(self.namespace, self.shards[-1]["name"], data)
            self.open_bytes += size
            self.writes += 1
            return
        name = f"{self.job}-a1-{len(self.shards)}"
        labels = {"recall.dev/job": self.job, "recall.dev/store": "shard"}
        self.store.create_config_map(self.namespace, name, data, labels=labels)
        self.shards.append({"name": name, "first": index, "end": None})
        self.store.patch_config_map(self.namespace, f"{self.job}-a1", self._manifest())
        self.open_bytes = size
        self.writes += 2

    def finish(self, chunks: int, words: int) -> None:
        summary = {"chunks": chunks, "durationSeconds": chunks * 30.0, "words": words}
        self.store.patch_config_map(self.namespace, f"{self.job}-a1", self._manifest(summary))
        self.writes += 1
