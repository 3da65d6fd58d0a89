"""How a Slurm step's environment tells the node programs what they need.

Defined here, in a module that imports nothing, so the harness side that sets these
variables and the node side that reads them share one spelling, and planning a run does
not import the replica's server stack.
"""

EVENTS_ENV = "DD_ACCEPT_REPLICA_EVENTS"  # where the recorder middleware in front of vLLM writes
REPLICA_ENV = "DD_ACCEPT_REPLICA_INDEX"  # which replica this step is
TOKEN_ENV = "DD_ACCEPT_CONTROL_TOKEN"  # the replica control plane's token, never in argv
