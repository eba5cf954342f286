"""Cross-encoders: `rerank.Reranker` scores (query, document) pairs; `cross_encoder` scores
pairs with a model being trained."""
