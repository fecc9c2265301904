"""The `recall` command: submit, watch, get, transcript, doctor, and the components' entry points.

- `main`: the typer app (`recall operator`, `recall worker`, `recall submit`, ...);
- `client`: what the commands read and write through the store;
- `watch`: `recall watch`, live progress of a Batch; `formats`: transcripts as txt/srt/vtt/json;
- `doctor` and `checks`: `recall doctor`, which checks an install, one function per check.

The top layer: may import every other package. It is the only place that imports the
development tools (`recall dev …` imports `recall_dev` lazily, when that command runs).
"""

from recall.cli.main import main

__all__ = ["main"]
