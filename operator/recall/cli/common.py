"""What the commands share: the one-line error they raise, the options most of them take, and
the API client and namespace those options name.

Imports only typer at the top, so `recall --help` stays quick; the API client is imported when a
command connects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer


class CliError(Exception):
    """A user-facing error: printed as one line, exit code `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


KubeconfigOpt = Annotated[
    Path | None,
    typer.Option("--kubeconfig", envvar="KUBECONFIG", help="Path to the kubeconfig file."),
]
NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Namespace (default: the context's).")
]


def given(**options: Any) -> dict[str, Any]:
    """The options given on the command line (the rest come from the environment)."""
    return {k: v for k, v in options.items() if v is not None}


def connect(kubeconfig: Path | None) -> Any:
    """The API client of `kubeconfig`, with the ApiSettings of the environment; a kubeconfig
    that cannot be loaded is a CliError."""
    from recall.base.settings import ApiSettings
    from recall.kube.client import KubeClient, load_api_client

    api = ApiSettings()
    try:
        client = load_api_client(kubeconfig)
    except Exception as e:  # a missing or broken kubeconfig
        raise CliError(f"cannot load the kubeconfig: {e}") from e
    return KubeClient(client, timeout=api.timeout, watch_seconds=api.watch_seconds)


def namespace_of(namespace: str | None, kubeconfig: Path | None) -> str:
    """`namespace`, else the kubeconfig context's."""
    from recall.kube.client import current_namespace

    return namespace or current_namespace(kubeconfig)
