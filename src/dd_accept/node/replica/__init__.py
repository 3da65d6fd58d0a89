"""Synthetic vLLM replicas: the engine model, the ASGI app, its server and control plane.

Modules here also run inside the cluster's SUT venv, so they import nothing host-only
(no docker, no pytest).
"""
