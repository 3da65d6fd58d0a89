"""The subnets a new cluster's internal network may take: none a docker network or a host
route already uses."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from dd_accept.slurm_docker.sdk import docker


def _host_routes() -> list[ipaddress.IPv4Network]:
    """Networks the host routes to, so a picked subnet never shadows the host's own LAN."""
    routes: list[ipaddress.IPv4Network] = []
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return routes
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        destination = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
        mask = ipaddress.IPv4Address(int(fields[7], 16).to_bytes(4, "little"))
        if int(mask):
            routes.append(ipaddress.IPv4Network(f"{destination}/{mask}", strict=False))
    return routes


def free_subnets(client: docker.DockerClient) -> list[str]:
    """Candidate /24s in 10.213.0.0/16 that no docker network or host route uses."""
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = list(_host_routes())
    for network in client.networks.list():
        for config in (network.attrs.get("IPAM") or {}).get("Config") or []:
            if config.get("Subnet"):
                used.append(ipaddress.ip_network(config["Subnet"], strict=False))
    pool = ipaddress.ip_network("10.213.0.0/16")
    return [str(c) for c in pool.subnets(new_prefix=24) if not any(c.overlaps(u) for u in used if u.version == 4)]
