"""Inference pipelines by kind, each on the inference engine (`bertfamily.inference`):
`embedding` (sentence embeddings, sparse SPLADE vectors, bulk files, output quantisation),
`reranking` (cross-encoders), `tasks` (classification, NER, extractive QA, fill-mask, early
exit) and `retrieval` (the persisted indexes, fusion, hard-negative mining)."""
