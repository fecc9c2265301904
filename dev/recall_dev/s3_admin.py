"""Signed S3 requests with the standard library: what the dev tools need and obstore has not.

obstore reads and writes objects; it neither creates nor deletes buckets, and it gives no raw
request (a test that sends `If-None-Match` or SSE headers by hand, or reads a status code).
`S3Admin` signs requests with AWS Signature Version 4 (path-style URLs, one region) and sends
them with urllib.

Contract:
- `request()` returns every answer, 4xx and 5xx included, as an `S3Response`; it raises only
  when no answer came (`OSError`: refused, reset, timed out).
- `create_bucket()` is idempotent (a bucket this identity owns already counts as created);
  `delete_bucket(force=True)` deletes every object first (ListObjectsV2 pages, then one
  DELETE each), so it also removes a bucket that is not empty.
- `S3Error` carries the status and the S3 error code of an unexpected answer.

Not provided: multipart uploads, virtual-hosted URLs, chunked or streaming signatures,
session tokens.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class S3Error(RuntimeError):
    """An S3 request answered with a status the caller did not expect."""

    def __init__(self, method: str, path: str, response: S3Response) -> None:
        super().__init__(
            f"{method} {path}: HTTP {response.status} {response.error_code()}".rstrip()
        )
        self.status = response.status
        self.code = response.error_code()


@dataclass(frozen=True)
class S3Response:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def error_code(self) -> str:
        """The `<Code>` of an S3 error body ("" when there is none)."""
        try:
            root = ET.fromstring(self.body)
        except ET.ParseError:
            return ""
        code = root.find("Code")
        return code.text or "" if code is not None else ""


@dataclass
class S3Admin:
    """One identity's signed requests to one S3 endpoint (`http://host:port`)."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    timeout: float = 10.0
    _host: str = field(init=False)

    def __post_init__(self) -> None:
        self._host = urllib.parse.urlsplit(self.endpoint).netloc

    # -- buckets -------------------------------------------------------------------------------

    def create_bucket(self, name: str) -> None:
        r = self.request("PUT", f"/{name}")
        if r.status != 200 and r.error_code() != "BucketAlreadyOwnedByYou":
            raise S3Error("PUT", f"/{name}", r)

    def delete_bucket(self, name: str, *, force: bool = False) -> bool:
        """Delete bucket `name` (its objects first with `force`); False if it did not exist."""
        if force:
            try:
                keys = list(self.list_keys(name))
            except S3Error as e:
                if e.status == 404:
                    return False
                raise
            for key in keys:
                r = self.request("DELETE", f"/{name}/{key}")
                if r.status not in (200, 204, 404):
                    raise S3Error("DELETE", f"/{name}/{key}", r)
        r = self.request("DELETE", f"/{name}")
        if r.status == 404:
            return False
        if r.status not in (200, 204):
            raise S3Error("DELETE", f"/{name}", r)
        return True

    def list_buckets(self) -> list[str]:
        r = self.request("GET", "/")
        if r.status != 200:
            raise S3Error("GET", "/", r)
        root = ET.fromstring(r.body)
        return [el.text or "" for el in root.iter(f"{S3_NS}Name")]

    def list_keys(self, bucket: str, prefix: str = "") -> Iterator[str]:
        """Every key in `bucket` under `prefix` (ListObjectsV2, page by page)."""
        token = ""
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            r = self.request("GET", f"/{bucket}", query=query)
            if r.status != 200:
                raise S3Error("GET", f"/{bucket}", r)
            root = ET.fromstring(r.body)
            for el in root.iter(f"{S3_NS}Key"):
                yield el.text or ""
            token = root.findtext(f"{S3_NS}NextContinuationToken") or ""
            if root.findtext(f"{S3_NS}IsTruncated") != "true" or not token:
                return

    # -- any request ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes = b"",
    ) -> S3Response:
        """Send one signed request; every HTTP answer comes back (see the module contract)."""
        quoted_path = urllib.parse.quote(path, safe="/-_.~")
        canonical_query = "&".join(f"{_q(k)}={_q(v)}" for k, v in sorted((query or {}).items()))
        signed = self._sign(method, quoted_path, canonical_query, dict(headers or {}), body)
        url = f"{self.endpoint}{quoted_path}" + (f"?{canonical_query}" if canonical_query else "")
        req = urllib.request.Request(url, data=body or None, method=method, headers=signed)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return S3Response(resp.status, dict(resp.headers.items()), resp.read())
        except urllib.error.HTTPError as e:
            return S3Response(e.code, dict(e.headers.items()), e.read())

    def _sign(
        self, method: str, path: str, query: str, headers: dict[str, str], body: bytes
    ) -> dict[str, str]:
        now = datetime.datetime.now(datetime.UTC)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        scope = f"{now:%Y%m%d}/{self.region}/s3/aws4_request"
        payload_hash = hashlib.sha256(body).hexdigest()
        headers = {
            **{k.lower(): v.strip() for k, v in headers.items()},
            "host": self._host,
            "x-amz-date": amz_date,
            "x-amz-content-sha256": payload_hash,
        }
        names = sorted(headers)
        canonical = "\n".join(
            [method, path, query, *(f"{n}:{headers[n]}" for n in names), "", ";".join(names),
             payload_hash]
        )  # fmt: skip
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        key = f"AWS4{self.secret_key}".encode()
        for part in (f"{now:%Y%m%d}", self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
            f"SignedHeaders={';'.join(names)}, Signature={signature}"
        )
        return headers


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="-_.~")
