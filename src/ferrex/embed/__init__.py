"""Embedding adapters: dense embeddings, BM25 sparse vectors and the cross-encoder reranker."""
