"""A fork server for fairseq's commands, so that tests of our drivers (the comparison,
the reproduction, the benchmarks) do not pay an interpreter start-up with torch and
fairseq imported (about 5 s) for every ``fairseq-train`` and ``fairseq-generate`` they
run.

``python fairseq_server.py FOLDER COMMAND`` imports one of fairseq's commands
(``fairseq-train`` or ``fairseq-generate``; one server each, as their imports configure
logging differently) and listens on ``FOLDER/COMMAND``; for each request it forks a child
that takes the client's stdin, stdout and stderr, working folder, environment and
arguments, and runs the command's own ``cli_main`` there, loading batches in the child
(the plugin is imported by its ``--user-dir``, as in a fresh process); the child sends
its exit status back.
``fairseq_client.py`` is the other end: a console-script stand-in that starts without
site-packages. The server process is single-threaded and never runs torch, so forking
it is safe.
"""

import importlib
import json
import os
import signal
import socket
import sys
import traceback


def serve(folder: str, command: str) -> None:
    module = importlib.import_module({"fairseq-train": "fairseq_cli.train",
                                      "fairseq-generate": "fairseq_cli.generate"}[command])
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(os.path.join(folder, command))
    server.listen(8)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _run(conn, json.loads(message), fds, module.cli_main)
        for fd in fds:
            os.close(fd)
        conn.close()


def _run(conn, request, fds, cli_main) -> None:
    """In the forked child: become the client's command, report its exit status, exit."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # --num-workers 0: batches made in the child itself; a loader worker forked from it
    # waits out torch's 5 s shutdown timeout at the end of every epoch.
    loader = [] if "--num-workers" in request["argv"] else ["--num-workers", "0"]
    sys.argv = [request["command"], *request["argv"], *loader]
    code = 0
    try:
        cli_main()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException:
        sys.excepthook(*sys.exc_info())  # the plugin's one-line errors, as in the command
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                traceback.print_exc()
        conn.sendall(str(code).encode())
        os._exit(code)


if __name__ == "__main__":
    serve(*sys.argv[1:])
