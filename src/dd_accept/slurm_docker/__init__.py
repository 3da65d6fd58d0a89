"""A real Slurm cluster in Docker: image recipes, slurm.conf, lifecycle through the docker SDK."""

from dd_accept.slurm_docker.cluster import ClusterSpec, SlurmCluster

__all__ = ["ClusterSpec", "SlurmCluster"]
