"""Who said each word: speaker labels for a file's transcript (`spec.transcript.speakers`).

- `model`: the speaker-embedding model (Resemblyzer's GE2E voice encoder; weights read from
  the installed package, the network run by onnxruntime, the features in numpy);
- `onnx`: its LSTM layers as an ONNX graph;
- `cluster`: the windows' vectors grouped into voices (scipy), the count found or bounded;
- `label`: windows laid over the words' speech, embedded as the audio streams past, each
  word and segment labelled "S1", "S2", ... in order of first appearance.

Labels are made once the last chunk is in, from the whole file's words and audio: a pure
function of the two, so a file cut, batched, spread over slots or resumed from a checkpoint
differently gets the same labels for the same words, and a checkpoint carries nothing for
them. Beside the engines in the layering: it reads audio and the transcript's types
(`recall.media`, `recall.resources`) and never a store, the API or a component.
"""

from recall.resources import MAX_SPEAKERS, SpeakerSpec
from recall.speakers.cluster import Bounds
from recall.speakers.label import label_voices
from recall.speakers.model import ModelMissing, VoiceEncoder


def bounds_of(spec: SpeakerSpec) -> Bounds:
    """The count or bounds `spec` asks for (`{}`: found from the audio, up to 20)."""
    if spec.count is not None:
        return Bounds(count=spec.count)
    return Bounds(least=spec.min or 1, most=spec.max or MAX_SPEAKERS)


__all__ = [
    "Bounds",
    "ModelMissing",
    "VoiceEncoder",
    "bounds_of",
    "label_voices",
]
