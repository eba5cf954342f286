"""Naive, obviously-correct reference implementations that the real kernels must match."""
