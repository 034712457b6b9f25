"""Shadow traffic: copies of answered requests sent to other versions and compared off the
request path, under a CPU budget, optionally in a process of their own."""
