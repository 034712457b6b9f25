"""Stubs generated from ``inference.proto`` (see the command at its top); not edited by hand."""
