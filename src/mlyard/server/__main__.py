"""`python -m mlyard.server [--host H] [--port P]`: the server in the foreground, as
`mlyard server run` runs it, without loading the CLI first. `mlyard server start` and service
managers (systemd, a container's command) start it this way, so a restart takes less time."""

from __future__ import annotations

import argparse
import sys

from mlyard.errors import MlyardError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlyard.server", description=__doc__.splitlines()[0])
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1, MLYARD_HOST)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8642, MLYARD_PORT)")
    arguments = parser.parse_args(argv)
    from mlyard.server.daemon import run_foreground
    from mlyard.server.settings import ServerSettings

    try:
        run_foreground(ServerSettings.from_environment(host=arguments.host, port=arguments.port))
    except MlyardError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
