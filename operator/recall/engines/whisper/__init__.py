"""The local Whisper engine: faster-whisper (CTranslate2, on a CPU or a CUDA GPU) on each
chunk's samples, one chunk a call or a batch of chunks in one call, each chunk's speech decoded
in windows of up to 30 s, each window once.

The parts, each with its own contract:
- `model`: which model a name means, and the process's loaded copies of it;
- `vad`: Silero VAD's speech probabilities and the stretches of speech they make;
- `windows`: where a call's speech is and the 30 s windows it is decoded in;
- `decode`: the windows through faster-whisper's batched pipeline, prompts and the re-decodes;
- `align`: the model's words and segments as recall's, timed to the sound;
- `engine`: `WhisperEngine`, the `recall.engines.base.Engine` over them (models per job,
  language, the request in, segments out).
"""

from __future__ import annotations

from recall.engines.whisper.engine import WhisperEngine
from recall.engines.whisper.model import available_cpus, bundled_path, load_model

__all__ = ["WhisperEngine", "available_cpus", "bundled_path", "load_model"]
