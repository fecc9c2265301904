"""`recall operator`'s settings, `RECALL_OPERATOR_*`, and the pools its autoscaler scales."""

from __future__ import annotations

import uuid
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from recall.base.settings.shared import EmptyIsNone, default_worker_id


class PoolScaling(BaseModel):
    """One worker pool the built-in autoscaler scales: its Deployment, engine and bounds."""

    model_config = ConfigDict(extra="forbid")

    pool: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    deployment: str
    engine: str = "whisper"
    min: int = Field(0, ge=0)
    max: int = Field(10, ge=1)
    slots: int = Field(1, ge=1, le=64)

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.min > self.max:
            raise ValueError(f"pool {self.pool}: min must not exceed max")
        return self


class OperatorSettings(BaseSettings):
    """Settings of `recall operator`."""

    model_config = SettingsConfigDict(env_prefix="RECALL_OPERATOR_", extra="ignore")

    namespace: EmptyIsNone = Field(None, description="Namespace to watch; None = all namespaces.")
    tick_seconds: float = Field(
        0.5,
        gt=0,
        le=10,
        description="How often the controller writes pending Batch projections (the coalescing "
        "window of Batch status writes) and checks leases at the latest, seconds.",
    )
    reconcile_interval: float = Field(
        30.0, gt=0, description="How often every Batch is reconciled with its jobs, seconds."
    )
    max_creates_per_tick: int = Field(
        200,
        ge=1,
        description="Jobs one tick creates for a Batch at most (a big fan-out "
        "continues on the next ticks).",
    )
    metrics_port: int = Field(0, ge=0, le=65535, description="Serve /metrics here; 0 = off.")
    discovery_seconds: float = Field(
        60.0,
        gt=0,
        description="How long the operator waits at start for the API server to serve the "
        "recall.dev resources (CRDs missing, or an API server still starting) before it exits "
        "with the reason (before the chart's liveness probe would restart it), seconds.",
    )
    sweep_seconds: float = Field(
        600.0,
        gt=0,
        description="How often the whole results store is compared with the jobs and Batches "
        "that exist (objects of deleted jobs, late writes of zombies), seconds.",
    )
    liveness_port: int = Field(
        0, ge=0, le=65535, description="Serve kopf's /healthz here; 0 = off."
    )
    health_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="Serve /readyz here (the job cache synced, the results store reachable); "
        "0 = off.",
    )
    dispatch: bool = Field(
        True, description="Offer claimable jobs to idle workers (they also serve themselves)."
    )
    offer_seconds: float = Field(
        5.0, gt=0, description="Withdraw an offer not claimed within this many seconds."
    )
    offer_ahead_seconds: float = Field(
        0.0,
        ge=0,
        description="Offer a worker its next job while it still holds one when its last job "
        "took less than this many seconds (and the one it holds too); 0 (the default) = only "
        "idle workers.",
    )
    leader_election: bool = Field(
        False, description="Elect one acting replica through a coordination.k8s.io Lease."
    )
    leader_election_name: str = Field("recall-operator", description="Name of that Lease.")
    leader_election_namespace: EmptyIsNone = Field(
        None, description="Namespace of that Lease; None = the watched namespace, or default."
    )
    lease_duration: float = Field(
        15.0,
        ge=1,
        description="Seconds a silent leader keeps the Lease (the takeover time); at least 1 "
        "(the Lease stores whole seconds).",
    )
    renew_deadline: float = Field(
        10.0, gt=0, description="A leader that could not renew for this long steps down."
    )
    retry_period: float = Field(2.0, gt=0, description="How often the Lease is renewed or tried.")
    identity: str = Field(
        default_factory=lambda: f"{default_worker_id()}_{uuid.uuid4().hex[:8]}",
        description="This replica's name in the Lease (unique per process).",
    )
    # The built-in autoscaler of the worker Deployment (recall.operator.scaling.decide) and the
    # endpoint KEDA's metrics-api trigger reads (recall.operator.scaling.keda).
    autoscale_deployment: EmptyIsNone = Field(
        None, description="The worker Deployment the operator scales; None = no autoscaling."
    )
    autoscale_namespace: EmptyIsNone = Field(
        None,
        description="Namespace of that Deployment and of the jobs it serves; None = the "
        "watched namespace, or default.",
    )
    autoscale_engine: str = Field(
        "whisper", description="The engine of that Deployment's workers (its pool of jobs)."
    )
    autoscale_slots: int = Field(
        1, ge=1, le=64, description="Leases each of that Deployment's workers holds at once."
    )
    autoscale_pools: list[PoolScaling] = Field(
        default_factory=list,
        description='More worker pools to scale, as JSON: [{"pool": "gpu", '
        '"deployment": "recall-worker-gpu", "engine": "whisper", "min": 0, '
        '"max": 4, "slots": 4}]; the Deployment of autoscale_deployment is the pool '
        "named default.",
    )
    autoscale_min: int = Field(0, ge=0, description="Fewest workers (0: scale to zero).")
    autoscale_max: int = Field(10, ge=1, description="Most workers.")
    autoscale_cooldown_seconds: float = Field(
        300.0,
        ge=0,
        description="Scale down only after fewer workers were wanted for this long, seconds.",
    )
    autoscale_step: int = Field(
        2, ge=1, description="Workers one scale-down removes at most (each drained first)."
    )
    autoscale_interval: float = Field(
        2.0, gt=0, description="Seconds between two decisions of the autoscaler."
    )
    autoscale_mark_pods: bool = Field(
        True,
        description="Annotate worker pods: safe-to-evict false while busy, and the lowest "
        "pod-deletion-cost on drained ones.",
    )
    workload_port: int = Field(
        0, ge=0, le=65535, description="Serve the pool's outstanding work as JSON here (KEDA)."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.tick_seconds * 2 > self.reconcile_interval:
            raise ValueError("reconcile_interval must be at least two ticks (tick_seconds)")
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        if self.autoscale_min > self.autoscale_max:
            raise ValueError("autoscale_min must not exceed autoscale_max")
        pools = [p.pool for p in self.scaled_pools()]
        if len(pools) != len(set(pools)):
            raise ValueError(f"each pool is scaled once: {pools}")
        return self

    def scaled_pools(self) -> list[PoolScaling]:
        """Every pool the built-in autoscaler scales: autoscale_deployment (the default pool),
        then autoscale_pools."""
        first = []
        if self.autoscale_deployment is not None:
            first.append(
                PoolScaling(
                    pool="default",
                    deployment=self.autoscale_deployment,
                    engine=self.autoscale_engine,
                    min=self.autoscale_min,
                    max=self.autoscale_max,
                    slots=self.autoscale_slots,
                )
            )
        return first + list(self.autoscale_pools)
