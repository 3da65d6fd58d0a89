"""`vllm serve`'s command line, answered by the synthetic replica (no GPU needed).

dd-accept's vLLM backend starts replicas from `vllm serve MODEL --host H --port P
--middleware module.Object ...` and then treats them as black boxes: ready when `/health`
answers, overloaded by real load, evidence from its recorder middleware. This stand-in takes
the same command line, so that whole path is exercised where there is no GPU:

    --vllm-command "/opt/sut/bin/python -m dd_accept.node.replica.vllm_standin"

It has no control plane (no token), like vLLM. Options it does not model are ignored.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dd_accept.node.replica import server


def translate(argv: Sequence[str]) -> list[str]:
    """vLLM's arguments → the synthetic replica's (its middleware paths are `module:Object`)."""
    parser = argparse.ArgumentParser(prog="vllm", add_help=False)
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--middleware", action="append", default=[])
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--served-model-name")
    args, _ignored = parser.parse_known_args(argv)
    replica = ["--port", str(args.port), "--model", args.served_model_name or args.model]
    replica += ["--max-num-seqs", str(args.max_num_seqs), "--ttft-ms", "20", "--itl-ms", "25"]
    for path in args.middleware:
        module, _, name = path.rpartition(".")
        replica += ["--middleware", f"{module}:{name}"]
    return replica


def main(argv: Sequence[str] | None = None) -> int:
    return server.main(translate(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
