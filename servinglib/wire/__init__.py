"""Wire formats every transport shares: strict JSON, Open Inference tensors, datatypes.

Nothing here knows about HTTP: a gRPC front end would decode and encode with the same code.
"""
