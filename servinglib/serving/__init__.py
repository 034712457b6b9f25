"""The request path behind every front end.

The service and its lanes, traffic routing, dynamic batching, poison-input isolation,
calls run on the event loop, the watchdog, and the assembly of one worker process.
"""
