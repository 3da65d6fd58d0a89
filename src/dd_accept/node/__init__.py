"""Programs that run on compute nodes, in the SUT's interpreter: replica, load client, probe, drills.

They import only `dd_accept.base` and the standard library (plus aiohttp/uvicorn the SUT
venv carries): the node image holds this package and `base`, nothing else of dd-accept.
"""
