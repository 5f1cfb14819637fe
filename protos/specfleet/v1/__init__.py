"""Generated gRPC stubs for specfleet (see protos/generate.py)."""
