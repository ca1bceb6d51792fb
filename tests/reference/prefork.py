"""A pre-forked Python for the reference checks of one build directory.

Nearly every check in tests/reference imports torch (about 2 s here) and many import
transformers and peft too (about 6 s more), and a check starts several such interpreters (the
check itself, then make_tiny_model.py, qwen3_ref.py, hf_oracle.py, ... as subprocesses). The
server imports those packages once and forks a copy of itself for each script it is asked to
run; the fork runs the script with the caller's arguments, working directory, environment,
umask and standard streams, exactly as `python SCRIPT ARGS...` would, and its exit status
becomes the caller's. Nothing here computes a value: a script run through the server produces
what the same script produces started cold.

    prefork.py --key K --serve              start K's server (detached; returns when it accepts)
    prefork.py --key K --stop               stop K's server (scripts still running go on)
    prefork.py --key K -- SCRIPT [ARGS...]  run SCRIPT in a fork of K's server

K names the server (the build directory; CTest starts and stops it as the fixture
`reference_prefork`, tests/CMakeLists.txt). Without a server for K, or with one whose
interpreter or import-time environment (HF_*, TORCH*, PYTHON*, LD_*, ...) differs from the
caller's, the client runs SCRIPT itself with `exec`, so a check never depends on the server.
The fork's children see REFERENCE_PREFORK_KEY=K, so harness.run() routes the Python scripts they
start through the same server (the name does not start with TWINKLE_: twinkle-run forwards those
to the ranks and prints them in its command line).

The socket is an abstract Unix socket (no file to clean up) accepted only from this user's
processes (SO_PEERCRED). A fork whose caller goes away (a CTest timeout kills it) has its whole
process group terminated. The server exits after IDLE_EXIT_S seconds without a connection.
"""
import hashlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time

IDLE_EXIT_S = 1800
# Environment variables read when the preloaded packages are imported (or by the dynamic loader):
# a caller whose values differ from the server's runs cold, not in a fork that read other values.
IMPORT_TIME_PREFIXES = ("HF_", "TRANSFORMERS", "TORCH", "PYTORCH", "TOKENIZERS", "SAFETENSORS", "PEFT",
                        "PYTHON", "LD_", "CUDA", "MKL", "KMP_", "GOMP", "OPENBLAS", "NUMEXPR", "XDG_CACHE")
# ... except these, which the fork applies itself.
APPLIED_IN_FORK = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED")
PRELOAD = ("numpy", "torch", "torch.nn.functional", "safetensors", "safetensors.torch", "tokenizers", "jinja2",
           "transformers", "peft")


def socket_address(key):
    """The abstract socket address of key's server."""
    return "\0twinkle-prefork-" + hashlib.sha1(os.path.abspath(key).encode()).hexdigest()[:20]


def import_env(env):
    """The variables of `env` that the server's imports depend on (IMPORT_TIME_PREFIXES less
    APPLIED_IN_FORK)."""
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k not in APPLIED_IN_FORK}


def send_msg(sock, obj, fds=()):
    data = json.dumps(obj).encode()
    payload = struct.pack("!I", len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [payload[:1]], list(fds))
        sock.sendall(payload[sent:])
    else:
        sock.sendall(payload)


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return buf


def recv_msg(sock, with_fds=0):
    """One message; with_fds > 0: the first byte carries up to that many descriptors, returned too."""
    fds = []
    if with_fds:
        first, fds, _, _ = socket.recv_fds(sock, 1, with_fds)
        if not first:
            raise ConnectionError("peer closed")
        head = first + recv_exact(sock, 3)
    else:
        head = recv_exact(sock, 4)
    (n,) = struct.unpack("!I", head)
    obj = json.loads(recv_exact(sock, n))
    return (obj, fds) if with_fds else obj


# ---------------------------------------------------------------- the fork that runs a script

def run_script(req):
    """In the forked runner: becomes `python argv...` as the caller asked, runs it, and exits."""
    import io
    import runpy
    os.setpgid(0, 0)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(req["cwd"])
    os.umask(req["umask"])
    env = req["env"]
    os.environ.clear()
    os.environ.update(env)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))

    def stream(fd, mode, line):
        raw = io.FileIO(fd, mode, closefd=False)
        if mode == "r":
            return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8")
        buffered = io.BufferedWriter(raw)
        return io.TextIOWrapper(buffered, encoding="utf-8", errors="backslashreplace" if fd == 2 else "strict",
                                line_buffering=line or unbuffered, write_through=unbuffered)
    sys.stdin = sys.__stdin__ = stream(0, "r", False)
    sys.stdout = sys.__stdout__ = stream(1, "w", os.isatty(1))
    sys.stderr = sys.__stderr__ = stream(2, "w", True)

    import torch
    threads = env.get("OMP_NUM_THREADS")
    torch.set_num_threads(int(threads) if threads and threads.isdigit() and int(threads) > 0
                          else req["server_threads"])

    script = req["argv"][0]
    server_path = req["server_path"]
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [os.path.dirname(os.path.abspath(script))] + extra + server_path
    sys.argv = list(req["argv"])
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException as e:  # noqa: BLE001 - reported as the interpreter reports an uncaught exception
        # From the script's first frame on, as a cold interpreter shows it (not this function's or
        # runpy's; none at all for an error compiling the script).
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        code = 1
    try:
        import threading
        if hasattr(threading, "_shutdown"):
            threading._shutdown()
        import atexit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def supervise(conn, hello):
    """In the forked supervisor: says hello, takes the request and the caller's streams, forks the
    runner, and reports its exit status; kills the runner's process group if the caller goes."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        send_msg(conn, hello)
        req, fds = recv_msg(conn, with_fds=3)
        if req.get("op") != "run" or len(fds) != 3:
            os._exit(0)
        pid = os.fork()
        if pid == 0:
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            conn.close()
            req.update(server_threads=hello["threads"], server_path=hello["path"])
            run_script(req)
        try:
            os.setpgid(pid, pid)  # also done by the runner; whichever comes first
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        while True:
            ready, _, _ = select.select([pidfd, conn], [], [])
            if pidfd in ready:
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
                send_msg(conn, {"status": code})
                os._exit(0)
            if conn in ready and not conn.recv(1, socket.MSG_PEEK):
                # The caller is gone (killed by a timeout or a signal): so is what it started.
                for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
                    try:
                        os.killpg(pid, sig)
                    except ProcessLookupError:
                        break
                    if wait is not None:
                        r, _, _ = select.select([pidfd], [], [], wait)
                        if r:
                            break
                os.waitpid(pid, 0)
                os._exit(0)
    except BaseException:  # noqa: BLE001 - a supervisor never returns into the server's loop
        os._exit(1)


# ---------------------------------------------------------------- the server

def serve_forever(key, ready_fd):
    """The server: preloads PRELOAD, binds key's socket, writes one byte to ready_fd, and forks a
    supervisor per connection until stopped or idle for IDLE_EXIT_S."""
    import importlib
    start_env = import_env(os.environ)  # before the imports, which set some (TORCHINDUCTOR_CACHE_DIR)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    try:
        # The classes the checks use; transformers imports their modules on first access.
        import transformers
        for cls in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3Config", "Qwen3MoeConfig", "AutoConfig",
                    "AutoModelForCausalLM", "AutoTokenizer", "PreTrainedTokenizerFast"):
            getattr(transformers, cls, None)
    except ImportError:
        pass
    import torch
    hello = {"executable": sys.executable, "env": start_env, "pid": os.getpid(),
             "threads": torch.get_num_threads(), "path": sys.path[1:]}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(socket_address(key))
    except OSError:
        os.write(ready_fd, b"E")
        os._exit(1)
    sock.listen(64)
    sock.settimeout(60)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    os.write(ready_fd, b"R")
    os.close(ready_fd)
    last = time.monotonic()
    uid = os.getuid()
    while True:
        try:
            conn, _ = sock.accept()
        except socket.timeout:
            if time.monotonic() - last > IDLE_EXIT_S:
                os._exit(0)
            continue
        except InterruptedError:
            continue
        last = time.monotonic()
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _, peer_uid, _ = struct.unpack("3i", creds)
        if peer_uid != uid:
            conn.close()
            continue
        conn.settimeout(None)
        pid = os.fork()
        if pid == 0:
            sock.close()
            supervise(conn, hello)
        conn.close()


def connect(key, timeout=2.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(socket_address(key))
    except OSError:
        s.close()
        return None
    return s


def start(key):
    """Starts key's server unless one answers already; returns when it accepts (0) or failed (1)."""
    s = connect(key)
    if s is not None:
        try:
            hello = recv_msg(s)
            send_msg(s, {"op": "bye"})
            print(f"prefork: server {hello['pid']} for {key} already running")
            return 0
        except (OSError, ConnectionError, ValueError):
            pass
        finally:
            s.close()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        log = os.open(os.path.join(key, "prefork.log") if os.path.isdir(key) else os.devnull,
                      os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir("/")
        try:
            serve_forever(key, w)
        finally:
            os._exit(1)
    os.close(w)
    os.waitpid(pid, 0)
    t0 = time.monotonic()
    got = os.read(r, 1)
    os.close(r)
    if got != b"R":
        print(f"prefork: the server for {key} did not start (see {key}/prefork.log); checks run cold")
        return 1
    print(f"prefork: server for {key} ready after {time.monotonic() - t0:.1f} s")
    return 0


def stop(key):
    s = connect(key)
    if s is None:
        print(f"prefork: no server for {key}")
        return 0
    try:
        hello = recv_msg(s)
        send_msg(s, {"op": "bye"})
        os.kill(hello["pid"], signal.SIGTERM)
        print(f"prefork: stopped server {hello['pid']} for {key}")
    except (OSError, ConnectionError, ValueError) as e:
        print(f"prefork: could not stop the server for {key}: {e}")
    finally:
        s.close()
    return 0


def run_cold(argv):
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable] + argv)


def client(key, argv):
    """Runs argv (SCRIPT ARGS...) in a fork of key's server, or cold; exits with its status."""
    env = dict(os.environ, REFERENCE_PREFORK_KEY=key)
    s = connect(key)
    if s is None:
        run_cold(argv)
    try:
        s.settimeout(30)
        hello = recv_msg(s)
        if hello.get("executable") != sys.executable or hello.get("env") != import_env(env):
            send_msg(s, {"op": "bye"})
            s.close()
            run_cold(argv)
        umask = os.umask(0)
        os.umask(umask)
        send_msg(s, {"op": "run", "argv": argv, "cwd": os.getcwd(), "env": env, "umask": umask}, fds=(0, 1, 2))
        s.settimeout(None)
        reply = recv_msg(s)
    except (OSError, ConnectionError, ValueError) as e:
        print(f"prefork: lost the server for {key} ({e})", file=sys.stderr)
        os._exit(1)
    code = reply["status"]
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def main():
    args = sys.argv[1:]
    if len(args) < 3 or args[0] != "--key":
        raise SystemExit("usage: prefork.py --key K (--serve | --stop | -- SCRIPT [ARGS...])")
    key, op, rest = args[1], args[2], args[3:]
    if op == "--serve":
        return start(key)
    if op == "--stop":
        return stop(key)
    if op == "--" and rest:
        return client(key, rest)
    raise SystemExit("usage: prefork.py --key K (--serve | --stop | -- SCRIPT [ARGS...])")


if __name__ == "__main__":
    sys.exit(main())
