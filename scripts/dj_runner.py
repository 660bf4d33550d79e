#!/usr/bin/env python3
"""Persistent per-rank Data-Juicer runner for eshard-mpi (docs/dj-notes.md, "Persistent runner").

    python dj_runner.py serve --socket PATH --ray-address ADDR
    python dj_runner.py run --socket PATH -- dj-process ARGS...

serve: imports Data-Juicer once, connects to the rank's Ray head once (ray.init), prints the
line "ready" on stdout once it listens on the Unix socket PATH, then runs one request at a
time: the dj-process argv of a shard attempt, in-process (data_juicer.tools.process_data.main),
with the client's stdout/stderr (passed as file descriptors), cwd and a few environment
variables. It exits by itself when its stdin reaches EOF (the worker holds the other end) or on
SIGTERM, and at once (os._exit) when a client goes away while its run is in progress.

Exit codes of serve: 0 stdin EOF, 1 startup failure ("error ..." on stdout instead of "ready"),
4 a client went away during its run, 128+signal on SIGTERM/SIGINT.

run: the client a shard attempt runs as its processor. It sends the request with its own fds 1
and 2 and exits with the run's return code; 2 when it cannot connect, 3 when the runner went
away before replying. A stop signal (SIGTERM, SIGINT, SIGHUP) kills it with that signal, so
that the worker sees the processor die of it (a scheduler's stop, not a broken shard).

Protocol (one request per connection): client -> runner: 4-byte big-endian length + UTF-8 JSON
{"v": 1, "argv": [...], "cwd": "...", "env": {NAME: value or null}}, with fds 1 and 2 attached
(SCM_RIGHTS) to the first bytes. runner -> client: one JSON line {"rc": N}. The client must not
shut down its writing side: end of file on the connection means "client gone".
"""

import array
import functools
import json
import os
import signal
import socket
import sys
import time  # builtin module, no import cost

CLIENT_ENV = ("DJ_PRODUCED_DATA_DIR", "XDG_CACHE_HOME", "HF_HOME", "PYTHONPATH", "DJ_ELASTIC_SHARD_CHILD")
MAX_REQUEST = 1 << 20

# serve exit codes
EXIT_STOP = 0  # stdin reached EOF
EXIT_STARTUP = 1  # could not start (message on stderr, "error ..." on stdout)
EXIT_CLIENT_GONE = 4  # a client closed its connection while its run was in progress
EXIT_SIGTERM = 143

# run exit codes besides the run's own
RC_CONNECT = 2
RC_LOST = 3


def _usage(msg):
    sys.stderr.write(f"dj_runner: {msg}\n"
                     "usage: dj_runner.py serve --socket PATH --ray-address ADDR\n"
                     "       dj_runner.py run --socket PATH -- dj-process ARGS...\n")
    return 2


def _rss():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return "rss " + " ".join(line.split()[1:])
    except OSError:
        pass
    return "rss ?"


# --------------------------------------------------------------------------- model reuse

# What turns the reuse off (docs/dj-notes.md, "Models across shards").
REUSE_ENV = "ESHARD_DJ_REUSE_MODELS"
# The Data-Juicer versions whose prepare_model/get_model and RayDataset the reuse was checked
# against: another version runs as if the reuse were off, with one warning.
REUSE_DJ_VERSIONS = ("1.6.1",)
# Operator arguments that are the shard's own (not what the operator is): OP._NON_FINGERPRINT_ATTRS.
SHARD_ATTRS = ("work_dir",)
# Rows per call from a forwarding task to an operator's actor (actor mode).
FORWARD_ROWS = 256


def _canon(v):
    """A canonical, exact form of a plain value (None for anything else): what a model key or
    an actor pool key may be built from. Objects of other types (a tokenizer, an open file)
    have no trustworthy value form, so their model is not shared."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return (type(v).__name__, v)
    if isinstance(v, (list, tuple)):
        items = [_canon(x) for x in v]
        return None if any(x is None for x in items) else (type(v).__name__, tuple(items))
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        items = [(k, _canon(v[k])) for k in sorted(v)]
        return None if any(x is None for _, x in items) else ("dict", tuple(items))
    return None


class ModelKey(functools.partial):
    """What Data-Juicer's prepare_model returns (a partial of the loader), equal to and hashed
    like every other key with the same loader and the same plain arguments, so that get_model's
    MODEL_ZOO in a Ray worker finds the model a previous shard loaded (a plain partial is equal
    only to itself, and every shard unpickles a new one). It travels to the workers by value
    (this file is __main__ in the runner), so they need nothing installed."""

    def __eq__(self, other):
        mine = self.__dict__.get("eshard_key")
        return mine is not None and mine == getattr(other, "__dict__", {}).get("eshard_key")

    def __hash__(self):
        return hash(self.__dict__.get("eshard_key"))

    def __call__(self, *args, **kwargs):
        # prepare_model calls the key once without arguments in the driver (to fetch the model
        # files before workers start); the runner does that once per key, not once per shard.
        seen = getattr(sys, "eshard_models_prepared", None)
        if seen is not None and not args and not kwargs and \
                sys._getframe(1).f_code.co_name == "prepare_model":
            if self.__dict__["eshard_key"] in seen:
                return None
            model = functools.partial.__call__(self)
            seen.add(self.__dict__["eshard_key"])
            return model
        return functools.partial.__call__(self, *args, **kwargs)


def model_key(func, *args, **kwargs):
    """Stands in for functools.partial inside data_juicer.utils.model_utils (prepare_model is
    its only user): a ModelKey when the loader and its arguments are plain, else a partial."""
    canon = _canon([list(args), kwargs])
    name = (getattr(func, "__module__", None), getattr(func, "__qualname__", None))
    if canon is None or None in name:
        return functools.partial(func, *args, **kwargs)
    key = ModelKey(func, *args, **kwargs)
    key.eshard_key = repr((name, canon))
    return key


class OpActor:
    """One long-lived actor of an operator that Data-Juicer runs in an actor pool: it builds the
    operator (and so loads its model) once and serves the batches of every shard of the rank."""

    def __init__(self, op_class, args, kwargs):
        self.op = op_class(*args, **kwargs)

    def call(self, batch, attrs, size):
        """The operator's outputs for `batch` cut into batches of `size` rows (a pyarrow Table;
        size None: the batch as it is)."""
        # The shard's own execution-only settings (its work_dir) before its batches.
        for k, v in attrs.items():
            setattr(self.op, k, v)
        if size is None or batch.num_rows <= size:
            return [self.op(batch)]
        return [self.op(batch.slice(i, size)) for i in range(0, batch.num_rows, size)]

    def pid(self):
        return os.getpid()


def forward_to(actors, attrs, size):
    """The task-pool function that replaces an actor pool in one shard's dataset: it sends a
    batch of several of the operator's batches to one of the rank's actors of that operator,
    which cuts it into the operator's batches (a call per batch of one row cost about 5 ms
    each), and yields the outputs one by one, as the pool's actor would."""
    def forward(batch):
        import random
        import ray
        yield from ray.get(actors[random.randrange(len(actors))].call.remote(batch, attrs, size))
    return forward


def forward_batch_size(batch_size, batch_format):
    """The forwarding map's batch size and the operator's own, which the actor cuts it into: a
    multiple of it of about FORWARD_ROWS rows, so that the operator's batches are the ones Ray
    Data would make (they start at multiples of it in a task's input either way). Only for
    pyarrow batches (what Data-Juicer uses); others go as they are."""
    if batch_format != "pyarrow" or not isinstance(batch_size, int) or batch_size < 1:
        return batch_size, None
    return batch_size * max(1, FORWARD_ROWS // batch_size), batch_size


class ModelReuse:
    """Keeps what model-bearing operators loaded alive across the shards of the rank.

    Task mode: model_utils.partial becomes model_key, so a model loads once per Ray worker
    process (and once per runner in the driver). Actor mode: Dataset.map_batches of an operator
    class with an ActorPoolStrategy becomes a task-pool map that forwards to actors the runner
    owns, made on first use and kept while later shards use the same operator with the same
    arguments and resources; actors no run used are killed after it, all of them after a failed
    run. Ray Data's own pools end with each dataset, hence the runner-owned ones."""

    def __init__(self, runner):
        self.runner = runner
        self.on = False
        self.pools = {}  # key -> [actor handles]
        self.used = set()
        self.started = self.reused = 0

    def install(self):
        flag = os.environ.get(REUSE_ENV, "1").strip().lower()
        if flag in ("0", "off", "no", "false"):
            return "off (" + REUSE_ENV + "=" + os.environ[REUSE_ENV] + ")"
        import data_juicer
        version = getattr(data_juicer, "__version__", "unknown")
        if version not in REUSE_DJ_VERSIONS:
            sys.stderr.write(f"dj_runner: warning: model reuse across shards is off: it was checked "
                             f"with Data-Juicer {', '.join(REUSE_DJ_VERSIONS)}, this is {version}\n")
            return f"off (Data-Juicer {version})"
        import ray.data
        from data_juicer.ops.base_op import OP
        from data_juicer.utils import model_utils
        self.OP = OP
        self.orig_map_batches = ray.data.Dataset.map_batches
        model_utils.partial = model_key
        sys.eshard_models_prepared = set()
        reuse = self

        def map_batches(ds, fn, *args, **kwargs):
            return reuse.map_batches(ds, fn, *args, **kwargs)
        functools.update_wrapper(map_batches, self.orig_map_batches)
        ray.data.Dataset.map_batches = map_batches
        self.on = True
        return f"on (Data-Juicer {version})"

    def map_batches(self, ds, fn, *args, **kwargs):
        from ray.data import ActorPoolStrategy, TaskPoolStrategy
        compute = kwargs.get("compute")
        if args or not (isinstance(fn, type) and issubclass(fn, self.OP)
                        and isinstance(compute, ActorPoolStrategy)):
            if self.on and kwargs.get("num_gpus") and getattr(fn, "__self__", None) is not None \
                    and isinstance(fn.__self__, self.OP) and "max_calls" not in kwargs:
                # Ray ends a worker after one GPU task by default (max_calls=1), and its models
                # with it: keep the worker, as its CPU twin is kept.
                kwargs["max_calls"] = 0
            return self.orig_map_batches(ds, fn, *args, **kwargs)
        ctor_args = tuple(kwargs.pop("fn_constructor_args", None) or ())
        ctor_kwargs = dict(kwargs.pop("fn_constructor_kwargs", None) or {})
        size = compute.max_size if compute.max_size != float("inf") else compute.min_size
        res = {"num_cpus": kwargs.pop("num_cpus", None), "num_gpus": kwargs.pop("num_gpus", None),
               "runtime_env": kwargs.pop("runtime_env", None)}
        # work_dir is per shard (per attempt) and, as Data-Juicer's own cache fingerprints say,
        # does not change what an operator does: it is left out of the key and set in the
        # actors for each shard (OpActor.call).
        shard_attrs = {k: ctor_kwargs[k] for k in SHARD_ATTRS if k in ctor_kwargs}
        canon = _canon([list(ctor_args), {k: v for k, v in ctor_kwargs.items() if k not in shard_attrs},
                        res, int(size)])
        if canon is None or kwargs.get("fn_args") or kwargs.get("fn_kwargs") or \
                set(kwargs) - {"fn_args", "fn_kwargs", "compute", "batch_size", "batch_format"}:
            kwargs.update(fn_constructor_args=ctor_args, fn_constructor_kwargs=ctor_kwargs, **res)
            return self.orig_map_batches(ds, fn, **kwargs)
        key = repr((fn.__module__, fn.__qualname__, canon))
        actors = self.pools.get(key)
        if actors is None:
            sys.stderr.write(f"dj_runner: starting {max(1, int(size))} long-lived actor(s) of "
                             f"{fn.__name__} (kept across shards)\n")
            actors = self.pools[key] = self.start_pool(fn, ctor_args, ctor_kwargs, res, int(size))
            self.started += 1
        elif key not in self.used:
            self.reused += 1
        self.used.add(key)
        # The forwarding tasks hold the operator's CPUs while its batches are in the actors
        # (what the pool's actors hold in Ray Data); the idle actors between shards hold none.
        fmt = kwargs.get("batch_format", "default")
        outer, inner = forward_batch_size(kwargs.get("batch_size"), fmt)
        return self.orig_map_batches(ds, forward_to(actors, shard_attrs, inner),
                                     compute=TaskPoolStrategy(size=len(actors)),
                                     batch_size=outer, batch_format=fmt,
                                     num_cpus=res["num_cpus"])

    def start_pool(self, op_class, args, kwargs, res, size):
        ray = self.runner.ray
        # No CPU for the actor itself (the forwarding tasks hold it): an actor that kept a CPU
        # between shards would starve the next shard's reads on a head of few CPUs. A GPU it
        # keeps: its model lives there.
        opts = {k: v for k, v in res.items() if v is not None and k != "num_cpus"}
        opts["num_cpus"] = 0
        # As Ray Data's actor pools: a crashed actor is restarted and its call retried.
        remote = ray.remote(OpActor).options(max_restarts=-1, max_task_retries=-1, **opts)
        return [remote.remote(op_class, args, kwargs) for _ in range(max(1, size))]

    def after_run(self, rc):
        """Kill the actors this run did not use (all of them after a failed run: a model an
        operator broke must not serve the next shard)."""
        for key in [k for k in self.pools if rc != 0 or k not in self.used]:
            for a in self.pools.pop(key):
                try:
                    self.runner.ray.kill(a)
                except Exception:
                    pass
        self.used.clear()

    def forget(self):
        """A new Ray connection: the old job's actors are gone with it."""
        self.pools.clear()
        self.used.clear()

    def summary(self):
        s = f"actor pools started {self.started}, reused {self.reused}"
        self.started = self.reused = 0
        return s


# --------------------------------------------------------------------------- client (run)

def client_main(args):
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    path = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--socket" and i + 1 < len(args):
            path = args[i + 1]
            i += 2
        elif a.startswith("--socket="):
            path = a[len("--socket="):]
            i += 1
        elif a == "--":
            i += 1
            break
        else:
            return _usage(f"run: unexpected argument {a!r}")
    argv = args[i:]
    if not path or not argv:
        return _usage("run: --socket PATH and -- dj-process ARGS... are required")

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError as e:
        sys.stderr.write(f"dj_runner: cannot connect to the Data-Juicer runner at {path}: "
                         f"{e.strerror or e}\n")
        return RC_CONNECT
    req = {"v": 1, "argv": argv, "cwd": os.getcwd(),
           "env": {k: os.environ.get(k) for k in CLIENT_ENV}}
    body = json.dumps(req).encode()
    msg = len(body).to_bytes(4, "big") + body
    try:
        n = s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [1, 2]))])
        if n < len(msg):
            s.sendall(msg[n:])
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    except OSError as e:
        sys.stderr.write(f"dj_runner: lost the connection to the Data-Juicer runner at {path}: "
                         f"{e.strerror or e}\n")
        return RC_LOST
    try:
        rc = int(json.loads(reply)["rc"])
    except (ValueError, KeyError, TypeError):
        sys.stderr.write(f"dj_runner: the Data-Juicer runner at {path} went away before "
                         "replying (it died, was stopped, or was restarted)\n")
        return RC_LOST
    return rc if 0 <= rc <= 255 else 1


# --------------------------------------------------------------------------- server (serve)

class Runner:
    def __init__(self, sock_path, ray_address):
        self.sock_path = sock_path
        self.ray_address = ray_address
        self.sock = None
        self.sock_ino = None
        self.running = False
        self.runs = 0
        import threading
        self.lock = threading.Lock()
        self.threading = threading

    # -- exits --------------------------------------------------------------

    def _unlink(self):
        """Remove the socket path if it is still ours (a new runner may have replaced it)."""
        try:
            if self.sock_ino is not None and os.stat(self.sock_path).st_ino == self.sock_ino:
                os.unlink(self.sock_path)
        except OSError:
            pass

    def die(self, code, why):
        try:
            os.write(self.err_fd, f"dj_runner[{os.getpid()}]: {why}; exiting ({code})\n".encode())
        except OSError:
            pass
        self._unlink()
        os._exit(code)

    def on_signal(self, signum, _frame):
        self.die(128 + signum, signal.Signals(signum).name)

    def install_sigterm(self):
        # ray.init() replaces the SIGTERM handler of the driver (sys.exit): put ours back.
        # SIGINT likewise ends the runner instead of interrupting a run half-way.
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)

    def watch_stdin(self):
        while True:
            try:
                b = os.read(0, 4096)
            except InterruptedError:
                continue
            except OSError:
                b = b""
            if not b:
                self.die(EXIT_STOP, "stdin closed" + (" during a run" if self.running else ""))

    # -- start ----------------------------------------------------------------

    def start(self):
        t0 = time.monotonic()
        # A copy of the runner's own stderr: die() writes there even while fd 2 is a client's.
        self.err_fd = os.dup(2)
        os.set_inheritable(self.err_fd, False)
        self.install_sigterm()
        self.threading.Thread(target=self.watch_stdin, name="dj_runner-stdin", daemon=True).start()

        os.environ.setdefault("RAY_JOB", "1")  # what init_configs sets for executor_type ray
        import loguru  # noqa: F401
        import data_juicer  # noqa: F401
        import data_juicer.config  # noqa: F401  (init_configs)
        import data_juicer.core.executor.ray_executor  # noqa: F401  (RayExecutor)
        import data_juicer.tools.process_data as process_data
        import data_juicer.utils.logger_utils as logger_utils
        import data_juicer.utils.ray_utils as ray_utils
        from data_juicer.ops.base_op import OPERATORS
        import ray
        # Modules the first run would otherwise import lazily (measured with sys.modules).
        for m in ("ray.data", "data_juicer.core.data.ray_dataset", "data_juicer.core.ray_exporter",
                  "data_juicer.core.data.dataset_builder", "data_juicer.core.preflight"):
            try:
                __import__(m)
            except Exception:
                pass
        self.process_data = process_data
        self.logger_utils = logger_utils
        self.OPERATORS = OPERATORS
        self.ray = ray
        from loguru import logger
        self.logger = logger
        t_import = time.monotonic() - t0

        self.reuse = ModelReuse(self)
        reuse = self.reuse.install()
        # Connect once; Data-Juicer's initialize_ray() is replaced by one that reuses this
        # connection (and reconnects only when a recipe needs another address/runtime_env).
        self.conn_key = None
        self.ray_checked = True
        # The runner owns SIGTERM/SIGINT: ray.init() would install sys.exit(signum) otherwise.
        import ray._private.utils as ray_utils_private
        ray_utils_private.set_sigterm_handler = lambda _handler: None
        self.check_head(self.ray_address)
        self.connect(self.ray_address, self.runtime_env(None))
        self.conn_time = time.time()
        ray_utils.initialize_ray = self.initialize_ray
        try:
            import copy
            from ray.data import DataContext
            self.data_ctx = copy.deepcopy(DataContext.get_current())
        except Exception:
            self.data_ctx = None

        self.listen()
        self.base_env = dict(os.environ)
        self.base_path = list(sys.path)
        self.base_stdout, self.base_stderr = sys.stdout, sys.stderr
        self.reset_logger()
        self.install_sigterm()
        sys.stderr.write(f"dj_runner[{os.getpid()}]: ready on {self.sock_path} (imports {t_import:.2f} s, "
                         f"Ray {self.ray_address}, started in {time.monotonic() - t0:.2f} s, "
                         f"model reuse {reuse})\n")
        sys.stderr.flush()
        # Readiness: exactly one line on stdout; afterwards fd 1 is the runner's stderr so that
        # nothing else ever reaches the pipe the worker read "ready" from.
        os.write(1, b"ready\n")
        sys.stdout.flush()
        os.dup2(2, 1)

    @staticmethod
    def check_head(address, timeout=5.0):
        """Fail fast when nothing listens on the head's GCS port: ray.init() would retry for
        minutes ("Failed to connect to GCS ... within 5 seconds", again and again)."""
        host, sep, port = address.rpartition(":")
        if address in ("auto", "local") or not sep or not port.isdigit() or "://" in address:
            return
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except OSError as e:
            raise RuntimeError(f"no Ray head at {address}: {e.strerror or e}") from None

    def runtime_env(self, cfg):
        """The runtime_env Data-Juicer's initialize_ray() would pass for this cfg."""
        from data_juicer.utils.constant import RAY_JOB_ENV_VAR
        from data_juicer.utils.mm_utils import SPECIAL_TOKEN_ENV_PREFIX
        env_vars = {RAY_JOB_ENV_VAR: os.environ.get(RAY_JOB_ENV_VAR, "0")}
        for k, v in os.environ.items():
            if k.startswith(SPECIAL_TOKEN_ENV_PREFIX):
                env_vars[k] = v
        paths = (cfg.get("custom_operator_paths") or None) if cfg is not None else None
        return dict(py_modules=list(paths) if paths else None, env_vars=env_vars)

    def connect(self, address, runtime_env):
        ray = self.ray
        key = (address, json.dumps(runtime_env["py_modules"]))  # ray.init() rewrites py_modules
        if ray.is_initialized():
            ray.shutdown()
        ray.init(address, ignore_reinit_error=True, runtime_env=runtime_env)
        self.reuse.forget()
        self.conn_key = key
        self.conn_time = time.time()
        self.install_sigterm()

    def initialize_ray(self, cfg=None, force=False):
        """Stands in for data_juicer.utils.ray_utils.initialize_ray in the runner.

        In a plain dj-process the first call connects and every later one is a no-op (even
        force=True: ray.init(ignore_reinit_error=True) returns at once). Here the first call of
        each run keeps the runner's connection when the address and the custom operator paths
        (runtime_env py_modules) are the same, and reconnects otherwise; later calls of the
        same run are no-ops, as in dj-process (a reconnect in the middle of a run would orphan
        the objects it already put into Ray)."""
        if self.ray_checked and self.ray.is_initialized():
            return
        self.ray_checked = True
        address = cfg.ray_address if cfg is not None else "auto"
        if address in (None, "", "auto"):
            address = self.conn_key[0] if self.conn_key else self.ray_address
        renv = self.runtime_env(cfg)
        key = (address, json.dumps(renv["py_modules"]))
        if self.ray.is_initialized() and key == self.conn_key:
            self.logger.info(f"dj_runner: reusing the Ray connection to {address} (driver job "
                             f"{self.ray.get_runtime_context().get_job_id()}, connected "
                             f"{time.time() - self.conn_time:.0f} s ago)")
            return
        self.logger.info(f"dj_runner: connecting to Ray at {address} with runtime_env {renv}")
        self.connect(address, renv)

    def listen(self):
        path = self.sock_path
        if os.path.lexists(path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # stale socket of a runner that died
            else:
                raise RuntimeError(f"another runner is listening on {path}")
            finally:
                probe.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            s.bind(path)
        finally:
            os.umask(old)
        s.listen(8)
        self.sock = s
        self.sock_ino = os.stat(path).st_ino

    # -- one request ------------------------------------------------------------

    def reset_logger(self, to_client=False):
        """No loguru handler survives a run; between runs (and until Data-Juicer's
        setup_logger() replaces it) there is one stderr handler like loguru's default."""
        self.logger.remove()
        self.logger.add(sys.stderr, level="DEBUG" if to_client else "INFO")
        self.logger_utils.LOGGER_SETUP = False

    def read_request(self, conn):
        conn.settimeout(30)
        buf, fds = b"", []
        fd_size = array.array("i").itemsize
        try:
            while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
                data, anc, _flags, _ = conn.recvmsg(65536, socket.CMSG_SPACE(8 * fd_size),
                                                    getattr(socket, "MSG_CMSG_CLOEXEC", 0))
                for level, typ, cdata in anc:
                    if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                        a = array.array("i")
                        a.frombytes(cdata[: len(cdata) - len(cdata) % fd_size])
                        fds.extend(a)
                if not data:
                    break
                buf += data
                if len(buf) >= 4 and int.from_bytes(buf[:4], "big") > MAX_REQUEST:
                    break
            conn.settimeout(None)
            if not buf and not fds:
                raise EOFError
            n = int.from_bytes(buf[:4], "big")
            if len(buf) < 4 or n > MAX_REQUEST or len(buf) < 4 + n:
                raise ValueError("short or oversized request")
            req = json.loads(buf[4: 4 + n])
            if len(fds) != 2:
                raise ValueError(f"expected 2 file descriptors, got {len(fds)}")
            if not isinstance(req.get("argv"), list) or not req["argv"] or \
                    not all(isinstance(a, str) for a in req["argv"]):
                raise ValueError("argv must be a non-empty list of strings")
            if not isinstance(req.get("cwd"), str):
                raise ValueError("cwd must be a string")
            env = req.get("env") or {}
            if not isinstance(env, dict) or not all(
                    isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in env.items()):
                raise ValueError("env must map names to strings or null")
            return req, fds
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    def watch_client(self, conn, wake_fd):
        """While a run is in progress: the client closing its end means it was killed."""
        import select
        p = select.poll()
        p.register(conn.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR |
                   getattr(select, "POLLRDHUP", 0))
        p.register(wake_fd, select.POLLIN)
        while True:
            events = p.poll()
            if any(fd == wake_fd for fd, _ in events):
                return  # the run is over
            try:
                gone = conn.recv(4096, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
                if not gone:
                    conn.recv(4096, socket.MSG_DONTWAIT)  # stray bytes: ignore
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                with self.lock:
                    if self.running:
                        self.die(EXIT_CLIENT_GONE, "the client closed its connection during a run "
                                                   "(killed?); a run cannot be aborted safely")
                return

    def run_one(self, req, fds):
        """Run one dj-process argv in-process with the client's fds 1/2; return the exit code."""
        import gc
        import traceback
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:
                pass
        saved_fds = (os.dup(1), os.dup(2))
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        os.close(fds[0])
        os.close(fds[1])
        saved_cwd = os.getcwd()
        saved_modules = set(sys.modules)
        saved_ops = set(self.OPERATORS.modules)
        import warnings
        saved_warnings = list(warnings.filters)
        saved_state = self.save_dj_state()
        rc = 1
        try:
            for k, v in (req.get("env") or {}).items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if os.environ.get("PYTHONPATH") != self.base_env.get("PYTHONPATH"):
                # sys.path was fixed when the runner started.
                sys.stderr.write("dj_runner: warning: PYTHONPATH of this attempt "
                                 f"({os.environ.get('PYTHONPATH')!r}) differs from the runner's "
                                 f"({self.base_env.get('PYTHONPATH')!r}); the runner's modules are used\n")
            os.chdir(req["cwd"])
            self.reset_logger(to_client=True)
            if self.data_ctx is not None:
                import copy
                from ray.data import DataContext
                DataContext._set_current(copy.deepcopy(self.data_ctx))
            sys.argv = ["dj-process"] + list(req["argv"][1:])
            self.ray_checked = False
            try:
                r = self.process_data.main()
                rc = 0 if r is None else (r if isinstance(r, int) else 1)
            except SystemExit as e:
                if e.code is None:
                    rc = 0
                elif isinstance(e.code, int):
                    rc = e.code
                else:
                    print(e.code, file=sys.stderr)
                    rc = 1
            except BaseException:
                traceback.print_exc()
                rc = 1
        except BaseException:
            try:
                traceback.print_exc()
            except Exception:
                pass
            rc = 1
        finally:
            # Drain and close every loguru sink of the run (closes and gzips its log files).
            try:
                self.logger.remove()
            except Exception:
                pass
            self.logger_utils.LOGGER_SETUP = False
            # Data-Juicer's default executor swaps sys.stdout/sys.stderr for loguru streams.
            sys.stdout, sys.stderr = self.base_stdout, self.base_stderr
            for s in (sys.stdout, sys.stderr):
                try:
                    s.flush()
                except Exception:
                    pass
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])
            try:
                os.chdir(saved_cwd)
            except OSError:
                os.chdir("/")
            self.restore_env()
            sys.path[:] = self.base_path
            warnings.filters[:] = saved_warnings
            getattr(warnings, "_filters_mutated", lambda: None)()
            sys.argv = ["dj_runner.py"]
            self.forget_custom_ops(saved_modules, saved_ops)
            self.restore_dj_state(saved_state, keep_model_keys=self.reuse.on)
            self.reset_logger()
            self.install_sigterm()
            gc.collect()
        return rc if 0 <= rc <= 255 else 1

    @staticmethod
    def save_dj_state():
        """Process-wide state a run may change and the next one would inherit: tempfile's
        folder (Data-Juicer sets it from temp_dir when use_cache is false), datasets' caching
        switch (disable_caching()), the driver's model cache (data_juicer.utils.model_utils.
        MODEL_ZOO; an operator that loads a model in the driver puts it there)."""
        import tempfile
        st = {"tempdir": tempfile.tempdir}
        try:
            import datasets.fingerprint as fp
            st["caching"] = fp._CACHING_ENABLED
        except Exception:
            pass
        try:
            from data_juicer.utils import model_utils
            st["zoo"] = set(model_utils.MODEL_ZOO)
        except Exception:
            pass
        return st

    @staticmethod
    def restore_dj_state(st, keep_model_keys=False):
        """Put back what save_dj_state() saw, and drop the run's configuration
        (data_juicer.config.config.global_cfg / global_parser hold its export_path and work_dir
        until the next run's init_configs)."""
        import tempfile
        tempfile.tempdir = st["tempdir"]
        if "caching" in st:
            import datasets.fingerprint as fp
            fp._CACHING_ENABLED = st["caching"]
        if "zoo" in st:
            from data_juicer.utils import model_utils
            # A model under a ModelKey stays: the next shard asks for it again by value.
            for k in [k for k in model_utils.MODEL_ZOO if k not in st["zoo"] and
                      not (keep_model_keys and isinstance(k, ModelKey))]:
                del model_utils.MODEL_ZOO[k]
        try:
            from data_juicer.config import config as djc
            djc.global_cfg = None
            djc.global_parser = None
        except Exception:
            pass

    def restore_env(self):
        cur = os.environ
        for k in [k for k in cur if k not in self.base_env]:
            del cur[k]
        for k, v in self.base_env.items():
            if cur.get(k) != v:
                cur[k] = v

    def forget_custom_ops(self, saved_modules, saved_ops):
        """Custom operator modules loaded by a run (custom_operator_paths) are dropped again:
        Data-Juicer refuses to load a module name twice, and the next recipe may differ."""
        custom = set()
        for name in set(self.OPERATORS.modules) - saved_ops:
            cls = self.OPERATORS.modules.get(name)
            mod = getattr(cls, "__module__", None)
            if mod and mod not in saved_modules:
                custom.add(mod.split(".")[0])
            del self.OPERATORS.modules[name]
        for name in list(sys.modules):
            if name not in saved_modules and name.split(".")[0] in custom:
                del sys.modules[name]

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except InterruptedError:
                continue
            with conn:
                try:
                    req, fds = self.read_request(conn)
                except EOFError:
                    continue  # connected and closed without a request (e.g. a liveness probe)
                except Exception as e:
                    sys.stderr.write(f"dj_runner: bad request: {e}\n")
                    try:
                        conn.sendall(json.dumps({"rc": 2, "error": str(e)}).encode() + b"\n")
                    except OSError:
                        pass
                    continue
                wake_r, wake_w = os.pipe()
                with self.lock:
                    self.running = True
                mon = self.threading.Thread(target=self.watch_client, args=(conn, wake_r),
                                            name="dj_runner-client", daemon=True)
                mon.start()
                t0 = time.monotonic()
                rc = self.run_one(req, fds)
                self.reuse.after_run(rc)
                with self.lock:
                    self.running = False
                os.write(wake_w, b"x")
                mon.join()
                os.close(wake_r)
                os.close(wake_w)
                self.runs += 1
                sys.stderr.write(f"dj_runner: run {self.runs} rc={rc} {time.monotonic() - t0:.2f} s "
                                 f"(threads {self.threading.active_count()}, {_rss()}, "
                                 f"{self.reuse.summary()})\n")
                sys.stderr.flush()
                try:
                    conn.sendall(json.dumps({"rc": rc}).encode() + b"\n")
                except OSError:
                    pass


def server_main(args):
    import argparse
    ap = argparse.ArgumentParser(prog="dj_runner.py serve")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--ray-address", required=True)
    a = ap.parse_args(args)
    r = Runner(os.path.abspath(a.socket), a.ray_address)
    try:
        r.start()
    except BaseException as e:
        import traceback
        traceback.print_exc()
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")
        try:
            os.write(1, f"error {msg}\n".encode())
        except OSError:
            pass
        r._unlink()
        os._exit(EXIT_STARTUP)
    r.serve()


def main():
    if len(sys.argv) < 2:
        return _usage("a command is required")
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "run":
        return client_main(args)
    if cmd == "serve":
        return server_main(args)
    return _usage(f"unknown command {cmd!r}")


if __name__ == "__main__":
    sys.exit(main())
