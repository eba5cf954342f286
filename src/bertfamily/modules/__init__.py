"""Encoder building blocks: embeddings, attention (full, disentangled, windowed), feed-forward,
norms, activations, the layer and the encoder trunk."""
