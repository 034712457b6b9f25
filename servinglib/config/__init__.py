"""The service's configuration: its typed spec, how `servinglib.yaml` is read, checked and
overridden from the environment."""
