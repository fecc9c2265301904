"""The `recall` command line: the app, its commands in `recall --help` order, the entry point.

Errors print as one line (`error: ...`) with kubectl's exit code (1) and no traceback; `--debug`
shows the traceback.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Annotated, Any

import typer

from recall.base import log
from recall.cli.commands import get, notify_resend, submit, transcript, usage, watch
from recall.cli.common import CliError
from recall.cli.components import operator_cmd, worker
from recall.cli.doctor import doctor

app = typer.Typer(
    name="recall",
    help="Kubernetes-native control plane for long transcription jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_state: dict[str, Any] = {"debug": False}


def _add_dev_commands() -> None:
    """`recall dev ...`: the development tools (`recall_dev`), or how to get them."""
    if importlib.util.find_spec("recall_dev") is not None:
        from recall_dev.cli import dev_app

        app.add_typer(dev_app, name="dev")
        return
    missing = typer.Typer(help="Development tools (not installed).", no_args_is_help=False)

    @missing.callback(invoke_without_command=True)
    def _missing() -> None:
        raise CliError("recall dev needs the development tools: run `make venv` in a checkout")

    app.add_typer(missing, name="dev")


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    log_level: Annotated[str, typer.Option("--log-level", envvar="RECALL_LOG_LEVEL")] = "info",
) -> None:
    _state["debug"] = debug
    log.configure(level=log_level)


# The order here is the order of `recall --help`.
app.command()(worker)
app.command("operator")(operator_cmd)
app.command()(doctor)
app.command()(submit)
app.command()(get)
app.command()(watch)
app.command()(transcript)
_add_dev_commands()
notify_app = typer.Typer(help="The operator's events (docs/notify.md).", no_args_is_help=True)
app.add_typer(notify_app, name="notify")
notify_app.command("resend")(notify_resend)
app.command()(usage)


def main() -> None:
    """Console entry point: one-line errors, kubectl's exit codes."""
    try:
        # Without standalone mode, click returns the exit code of typer.Exit instead of exiting.
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except CliError as e:
        _fail(str(e), e.code, e)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        _fail("aborted", 130, None)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        _fail(_describe(e), 1, e)


def _describe(e: Exception) -> str:
    from recall.kube import ApiError

    if isinstance(e, ApiError):
        return e.message
    return f"{type(e).__name__}: {e}" if not str(e) else str(e)


def _fail(message: str, code: int, exc: BaseException | None) -> None:
    if _state["debug"] and exc is not None:
        import traceback

        traceback.print_exception(exc)
    typer.echo(f"error: {message}", err=True)
    sys.exit(code)
