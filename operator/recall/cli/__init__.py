"""The `recall` command: submit, watch, get, transcript, doctor, and the components' entry points.

- `main`: the typer app, its commands in order, and the entry point; `common`: the error,
  options and API client the commands share;
- `components`: `recall worker` and `recall operator`; `commands`: the users' commands, each
  calling one of `submission` (`recall submit`), `listing` (`recall get`), `watch` (live
  progress of a Batch), `transcript` (where a transcript is) and `notify` (resend, usage);
- `doctor` and `checks` (with `crd_check` and `store_check`): `recall doctor`, which checks an
  install, one function per check.

The top layer: may import every other package. It is the only place that imports the
development tools (`recall dev …` imports `recall_dev` lazily, when that command runs).
"""

from recall.cli.main import main

__all__ = ["main"]
