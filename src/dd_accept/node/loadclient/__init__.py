"""The load client: drives a workload through an endpoint and writes JSONL events.

It runs inside the allocation, as a step on the proxy's node (the proxy listens on
127.0.0.1 only), in the node image's `/opt/sut` venv. Two modes: `sut` goes through the
SUT's real client path (profile's adapter); `raw` is a plain aiohttp streaming client for
SUT-agnostic checks (time to first token, stream integrity). Imports nothing host-only.
"""
