"""`NotifySettings`: how the operator delivers events (environment `RECALL_NOTIFY_*`)."""

from __future__ import annotations

import ipaddress
from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from recall.base.backoff import Backoff
from recall.resources.job import Sink


class NotifySettings(BaseSettings):
    """Settings of the operator's event delivery (docs/notify.md)."""

    model_config = SettingsConfigDict(env_prefix="RECALL_NOTIFY_", extra="ignore")

    default_sinks: list[Sink] = Field(
        default_factory=list,
        max_length=4,  # with an object's own 4: the 8 sinks an event's record can name
        description="Sinks every job and Batch event also goes to (JSON; the chart's "
        "notify.defaultSinks), 4 at most; their Secrets live in `secret_namespace`.",
    )
    secret_namespace: str = Field(
        "default", description="Namespace of the default sinks' Secrets (the operator's own)."
    )
    allow: list[str] = Field(
        default_factory=list,
        description="Addresses or networks (CIDR) a sink may use although loopback, "
        "link-local or a metadata address (the tests allow 127.0.0.1).",
    )
    backoff_initial: float = Field(
        1.0, gt=0, description="First retry after, seconds (unset: 1, or the cap if shorter)."
    )
    backoff_cap: float = Field(300.0, gt=0, description="Retries back off to this, seconds.")
    backoff_jitter: float = Field(
        0.5, ge=0, description="Each delay stretched by up to this share, never past the cap."
    )
    max_refusals: int = Field(
        5,
        ge=1,
        description="Tries of an event a sink refuses (4xx but 408/429) before it is given up.",
    )
    in_flight: int = Field(8, ge=1, description="Events in flight per sink at most.")
    timeout: float = Field(
        10.0,
        gt=0,
        description="One delivery's timeout, seconds: the whole request, connecting to reading.",
    )
    delete_seconds: float = Field(
        300.0,
        gt=0,
        description="How long a deleted object's pending events are still tried "
        "(and a Batch's deletion waits for them) before they are given up, seconds.",
    )
    secret_seconds: float = Field(30.0, gt=0, description="Keys are read again this often.")
    threads: int = Field(16, ge=1, description="Deliveries at once, over every sink.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if "backoff_initial" not in self.model_fields_set:
            # Any cap the chart accepts (> 0) works: a sub-second cap starts at the cap.
            self.backoff_initial = min(self.backoff_initial, self.backoff_cap)
        if self.backoff_initial > self.backoff_cap:
            raise ValueError("backoff_initial must not exceed backoff_cap")
        for a in self.allow:
            ipaddress.ip_network(a, strict=False)  # raises on a bad entry
        return self

    @property
    def backoff(self) -> Backoff:
        return Backoff(
            initial=self.backoff_initial, cap=self.backoff_cap, jitter=self.backoff_jitter
        )
