"""LLM serving: prefill and decode steps with a KV cache, batching under latency targets."""
