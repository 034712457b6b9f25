"""Run the app under gunicorn: the launcher, the shipped config and the worker hooks."""
