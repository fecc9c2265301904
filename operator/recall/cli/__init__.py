"""The `recall` command: submit, watch, get, transcript, doctor, and the components' entry points.

- `main`: the typer app and the entry point; `common`: what the commands share;
- `components`: `recall worker` and `recall operator`; `commands`: the users' commands, each
  calling one of `submission`, `listing`, `watch`, `transcript` and `notify`;
- `doctor` and `checks` (with `crd_check`, `store_check`): `recall doctor`, one function a check.

The top layer: may import every other package, and the only one to import the development
tools (`recall_dev`, lazily, when `recall dev` runs).
"""

from recall.cli.main import main

__all__ = ["main"]
