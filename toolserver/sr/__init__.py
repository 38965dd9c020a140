"""SMFANet super-resolution: the network (`arch`), its checkpoints, and the inference engine."""
