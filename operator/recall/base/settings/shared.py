"""The settings both components share: the API server and the object store."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# A setting whose empty value (a chart value left blank) means None.
EmptyIsNone = Annotated[str | None, AfterValidator(lambda v: v or None)]


def default_worker_id() -> str:
    """The pod name in a cluster (downward API `POD_NAME`, else the hostname)."""
    return os.environ.get("POD_NAME") or socket.gethostname()


class ApiSettings(BaseSettings):
    """How both components talk to the API server."""

    model_config = SettingsConfigDict(env_prefix="RECALL_API_", extra="ignore")

    timeout: float = Field(15.0, gt=0, description="Timeout of one API request, seconds.")
    watch_seconds: int = Field(
        300, ge=10, description="How long one watch request lasts before it is renewed."
    )


SCHEMES = ("s3", "gs", "az", "file", "memory")


class StoreSettings(BaseSettings):
    """Where the work's bytes go: the object store both components use (DESIGN §4b).

    Credentials come from the standard variables of each store (`AWS_*`, `GOOGLE_*`,
    `AZURE_*`, read by the store client itself: static keys, IRSA-style web identity, the GKE
    metadata server, Azure workload identity), or from files in `credentials_dir` (a mounted
    Secret, re-read when it changes). Server-side encryption settings pass through the same way
    (`AWS_SERVER_SIDE_ENCRYPTION`, `AWS_SSE_KMS_KEY_ID`, ...).
    """

    model_config = SettingsConfigDict(env_prefix="RECALL_STORE_", extra="ignore")

    url: str = Field(
        "",
        description="The results store: s3://bucket/prefix, gs://bucket/prefix, "
        "az://container/prefix or file:///path (a mounted volume).",
    )
    credentials_dir: Path | None = Field(
        None,
        description="A directory of credential files named like the variables they replace "
        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN): a mounted Secret, "
        "re-read within a minute of a change.",
    )
    timeout: float = Field(30.0, gt=0, description="Timeout of one store request, seconds.")
    connect_timeout: float = Field(5.0, gt=0, description="Timeout of one connection, seconds.")
    credentials_refresh_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="How long credentials read from credentials_dir are used before the files "
        "are read again (a rotated Secret is picked up within this).",
    )
    presign_seconds: int = Field(
        3600, ge=60, le=7 * 24 * 3600, description="How long a presigned URL is valid."
    )

    @field_validator("url")
    @classmethod
    def _scheme(cls, v: str) -> str:
        v = v.strip()
        if v and v.split("://", 1)[0].lower() not in SCHEMES:
            raise ValueError(
                f"unsupported store URL {v!r}: use s3://, gs://, az:// or file:// (memory:// "
                "in tests)"
            )
        return v
