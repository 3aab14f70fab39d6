"""Adapters that put llmsched's engine rules and policies into other serving engines (``vllm``: vLLM v1)."""
