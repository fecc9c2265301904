"""How the API server's answers become the store's typed errors (no API server needed)."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from recall.kube import ApiError, Conflict, Invalid, NotFound, TooLarge, Unavailable
from recall.kube.http import translate


def api_error(status: int, reason: str = "", body: str = "") -> ApiException:
    e = ApiException(status=status, reason=reason)
    e.body = body
    return e


@pytest.mark.parametrize(
    ("status", "body", "kind", "maybe_applied"),
    [
        (404, '{"message": "not found"}', NotFound, False),
        (409, '{"message": "the object has been modified"}', Conflict, False),
        # A watch's 410 (the client raises it itself): the caller must list again.
        (410, '{"message": "too old resource version: 711 (2090)"}', Conflict, False),
        (422, '{"message": "spec.x: Invalid value"}', Invalid, False),
        (413, "", TooLarge, False),
        (500, '{"message": "etcdserver: request is too large"}', TooLarge, False),
        (503, "", Unavailable, True),
        (429, "", Unavailable, False),
    ],
)
def test_translate__status_to_typed_error(
    status: int, body: str, kind: type[ApiError], maybe_applied: bool
) -> None:
    error = translate(api_error(status, "Reason", body), "patch job ns/j", write=True)
    assert type(error) is kind
    assert error.status == status
    if isinstance(error, Unavailable):
        assert error.maybe_applied is maybe_applied


def test_translate__a_read_is_never_maybe_applied() -> None:
    error = translate(api_error(503), "get job ns/j", write=False)
    assert isinstance(error, Unavailable) and not error.maybe_applied
