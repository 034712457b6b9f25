"""Client programs run in environments of their own (KServe's SDK)."""
