"""Sentence embeddings: the embedder (`embed`), the sentence-transformers modules of a
directory (`sentence_modules`), the trainable form and its saved directory (`bi_encoder`),
SPLADE sparse vectors (`sparse`), bulk files (`bulk`) and output quantisation (`quantize`)."""
