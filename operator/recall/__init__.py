"""recall: a Kubernetes-native control plane for long transcription jobs."""

__version__ = "0.2.0"
