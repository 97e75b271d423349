"""``python -S fairseq_client.py FOLDER COMMAND ARGS...``: run ``COMMAND ARGS`` in a child
of the fork server listening on ``FOLDER/COMMAND`` (see ``fairseq_server.py``) with this process's
stdin, stdout, stderr, folder and environment, and exit with its status."""

import json
import os
import socket
import sys


def main() -> int:
    folder, command, *argv = sys.argv[1:]
    request = {"command": command, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(os.path.join(folder, command))
        socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
        status = conn.recv(16)
    if not status:
        print(f"{command}: the fork server's child died without an exit status",
              file=sys.stderr)
        return 1
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
