"""SMFANet super-resolution: the network (`arch`), its checkpoints, and the inference engine.

Only `arch` imports torch at module level; the rest import it when a network is first loaded, so starting
the server (and answering /healthz) does not wait for torch.
"""

# EASA pools the features by this factor, so an input must be at least this many pixels on each side.
MIN_INPUT_SIDE = 8
