"""Development tools of recall: the local control plane, the node, the demo, speech synthesis.

Installed from the checkout with the runtime package (`make venv` runs `pip install -e dev`);
never part of the image or a runtime dependency.
"""
