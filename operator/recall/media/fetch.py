"""Fetching a source: a local file in place, or an http(s) download to a temporary file,
with its fingerprint; failures as one-line `JobFailure`s that hide credentials.

A temporary file's name says whose it is (`<prefix><pid>-<run>-…`, `run` random per process),
so `sweep` can remove what a process that died (SIGKILL, out of memory) left behind, in a /tmp
that outlives it, while keeping the files of live processes sharing it. Not guaranteed: a dead
process's files whose pid a live process took again stay until a later sweep.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from recall.media.common import USER_AGENT
from recall.resources.errors import JobFailure


@dataclass(frozen=True)
class Fetched:
    """A local file holding the source's bytes; `temporary` ones are removed by `remove()`."""

    url: str
    path: Path
    size: int
    fingerprint: str
    temporary: bool = False

    def remove(self) -> None:
        if self.temporary:
            self.path.unlink(missing_ok=True)


# Downloads an object-store source (s3://, gs://, az://) into `workdir` with the worker's store
# credentials: (url, workdir, max_bytes) -> (path of a new temporary file, its sha256). The
# worker provides it; media never opens a store itself.
ObjectReader = Callable[[str, Path | None, int], tuple[Path, str]]
OBJECT_SCHEMES = ("s3", "gs", "az")
TEMPORARY = re.compile(r"recall-(?:media|source)-(\d{1,10})-([0-9a-f]{8})-")  # save's names
_RUN = secrets.token_hex(4)  # this process's run, told apart from an earlier one with its pid


def fetch(
    url: str,
    *,
    max_bytes: int,
    http_timeout: float,
    workdir: Path | None = None,
    objects: ObjectReader | None = None,
) -> Fetched:
    """The source's bytes in a local file, with their fingerprint."""
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:  # an unclosed IPv6 literal, say; the reason may quote the credentials
        raise JobFailure(
            "SourceRejected", f"{display_url(url)}: not a valid URL", permanent=True
        ) from None
    if scheme == "file":
        path = local_path(url, max_bytes=max_bytes)
        st = path.stat()
        fingerprint = f"file:size={st.st_size};mtime={st.st_mtime_ns}"
        return Fetched(url, path, st.st_size, fingerprint)
    if scheme in ("http", "https"):
        path, digest = download(
            url, max_bytes=max_bytes, http_timeout=http_timeout, workdir=workdir
        )
        return Fetched(url, path, path.stat().st_size, f"sha256:{digest}", temporary=True)
    if scheme in OBJECT_SCHEMES and objects is not None:
        path, digest = objects(url, workdir, max_bytes)
        return Fetched(url, path, path.stat().st_size, f"sha256:{digest}", temporary=True)
    raise JobFailure(
        "SourceRejected",
        f"{display_url(url)}: unsupported URL scheme (use file://, http(s)://, or s3://, gs://, "
        "az:// on a worker with a results store)",
        permanent=True,
    )


def local_path(url: str, *, max_bytes: int) -> Path:
    """The regular file a `file://` URL names, checked to exist and to fit `max_bytes`."""
    shown = display_url(url)
    # By hand: a raw '#' or '?' is a character of the file's name, never a fragment or query
    # that urlsplit would cut off (naming another file).
    _, sep, after = url.partition("://")
    host, _, rest = (after if sep else url.partition(":")[2]).partition("/")  # file:/path too
    if host not in ("", "localhost"):
        raise JobFailure(
            "SourceRejected",
            f"{shown}: a file URL must not name a host (use file:///path)",
            permanent=True,
        )
    path = Path("/" + unquote(rest))
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise JobFailure("SourceNotFound", f"{shown}: no such file", permanent=True) from None
    except PermissionError:
        raise JobFailure("SourceRejected", f"{shown}: permission denied", permanent=True) from None
    except OSError as e:  # EIO, ESTALE on a network volume: it may come back
        raise JobFailure(
            "SourceUnavailable", f"{shown}: cannot read: {e.strerror or e}", permanent=False
        ) from None
    if not path.is_file():
        raise JobFailure("SourceNotFound", f"{shown}: not a regular file", permanent=True)
    if st.st_size > max_bytes:
        raise too_large(shown, max_bytes, st.st_size)
    return path


def download(
    url: str, *, max_bytes: int, http_timeout: float, workdir: Path | None
) -> tuple[Path, str]:
    """Stream `url` into a new temporary file; its path (the caller removes it) and SHA-256."""
    shown = display_url(url)
    try:
        with (
            httpx.Client(
                timeout=httpx.Timeout(http_timeout),
                follow_redirects=True,
                headers={"User-Agent": USER_AGENT},
            ) as client,
            client.stream("GET", url) as response,
        ):
            verdict = classify_http_status(response.status_code)
            if verdict is not None:
                reason, permanent = verdict
                raise JobFailure(
                    reason,
                    f"{shown}: HTTP {response.status_code} {response.reason_phrase}",
                    permanent=permanent,
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise too_large(shown, max_bytes, int(declared))
            return save(response.iter_bytes(1 << 20), shown, max_bytes, workdir, _suffix(url))
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as e:
        raise JobFailure("SourceRejected", f"{shown}: invalid URL: {e}", permanent=True) from None
    except httpx.TimeoutException:
        raise JobFailure(
            "SourceUnavailable", f"{shown}: timed out after {http_timeout:g} s", permanent=False
        ) from None
    except httpx.HTTPError as e:  # connection refused, reset, DNS, a broken body...
        detail = str(e) or type(e).__name__
        raise JobFailure(
            "SourceUnavailable", f"{shown}: {one_line(detail)}", permanent=False
        ) from None


def save(
    blocks: Iterable[bytes],
    shown: str,
    max_bytes: int | None,
    workdir: Path | None,
    suffix: str,
    prefix: str = "recall-media-",
) -> tuple[Path, str]:
    """`blocks` streamed into a new temporary file, its path and SHA-256; the file is removed
    again when the blocks fail or pass `max_bytes` (None: no limit)."""
    owner = f"{prefix}{os.getpid()}-{_RUN}-"  # see the module: what `sweep` reads
    fd, name = tempfile.mkstemp(prefix=owner, suffix=suffix, dir=workdir)
    path = Path(name)
    digest = hashlib.sha256()
    try:
        received = 0
        with os.fdopen(fd, "wb") as f:
            for block in blocks:
                received += len(block)
                if max_bytes is not None and received > max_bytes:
                    raise too_large(shown, max_bytes, None)
                digest.update(block)
                f.write(block)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path, digest.hexdigest()


def sweep(directory: Path | None = None) -> int:
    """Remove the temporary files `save` made in `directory` (None: the system's temporary
    directory) for processes no longer running; how many. This process's own files and those
    of other live processes stay, as does what it cannot remove (another user's file)."""
    removed = 0
    try:
        entries = list(os.scandir(directory or tempfile.gettempdir()))
    except OSError:
        return 0
    for entry in entries:
        owner = TEMPORARY.match(entry.name)
        if owner is None or _running(int(owner[1]), owner[2]):
            continue
        try:
            os.unlink(entry.path)
        except OSError:  # gone already, another user's, or a directory
            continue
        removed += 1
    return removed


def _running(pid: int, run: str) -> bool:
    if pid == os.getpid():
        return run == _RUN  # else an earlier process with our pid (pid 1 in a container)
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or no process has such a pid
        return False
    except OSError:  # EPERM: it runs, as another user
        return True
    return True


def classify_http_status(status: int) -> tuple[str, bool] | None:
    """(reason, permanent) for a failed download, or None when `status` is a success."""
    if 200 <= status < 300:
        return None
    if status in (408, 429) or status >= 500:
        return "SourceUnavailable", False
    if status in (404, 410):
        return "SourceNotFound", True
    return "SourceRejected", True  # other 4xx; 1xx/3xx only arrive here if redirects loop


def too_large(shown: str, max_bytes: int, size: int | None) -> JobFailure:
    what = f"{size} bytes" if size is not None else "more"
    return JobFailure(
        "SourceTooLarge", f"{shown}: {what}, the limit is {max_bytes} bytes", permanent=True
    )


def display_url(url: str) -> str:
    """The URL on one line, without user info, query and fragment (they often carry
    credentials). A `user:password@` is hidden up to the URL's last `@`, whatever the password
    holds (`/`, `?`, `#` unencoded), at the price of hiding more of a path holding an `@`."""
    scheme, sep, rest = url.partition("://")
    at = rest.rfind("@")
    if sep and at >= 0 and ":" in rest[:at]:
        return display_url(f"{scheme}://{rest[at + 1 :]}").replace("://", "://***@", 1)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a malformed port or IPv6 literal: cut by hand
        return _display_malformed(url)
    netloc = ("***@" if "@" in parts.netloc else "") + host + port
    query = "…" if parts.query else ""
    return one_line(urlunsplit((parts.scheme, netloc, parts.path, query, "")), 1000)


def _display_malformed(url: str) -> str:
    """`display_url` of a URL `urlsplit` refuses: its scheme, its host and port as written
    (user info hidden) and its path; no query, no fragment, no line breaks."""
    flat = "".join(url.split())
    query = "?…" if "?" in flat else ""
    flat = re.split(r"[?#]", flat, maxsplit=1)[0]
    scheme, sep, rest = flat.partition("://") if "://" in flat else ("", "", flat)
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    return f"{scheme}{sep}{authority}{slash}{path}{query}"


def _suffix(url: str) -> str:
    """The URL's file extension, if it looks like one: a hint for FFmpeg's format probe."""
    match = re.search(r"\.([A-Za-z0-9]{1,8})$", urlsplit(url).path)
    return f".{match.group(1)}" if match else ""


def one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
