"""``servinglib bench``: load a running server, measure it, plot it and compare runs.

A client-side tool beside the server: it talks HTTP (and gRPC) to a server it was given
or started, and reads ``/metrics`` for the server's own view (queue vs compute time, batch
sizes). Nothing here runs in a worker, and importing this package imports nothing heavy:
``servinglib serve`` builds its parser before it sets up prometheus_client's multiprocess
directory, which must come first.
"""
