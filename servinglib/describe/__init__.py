"""Descriptions of what is served: the OpenAPI document and Triton model configurations."""
