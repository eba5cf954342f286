"""Inference pipelines over a model directory: classification, NER, extractive QA, fill-mask
and sentence embeddings."""
