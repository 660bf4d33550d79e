#!/usr/bin/env python3
"""Tell eshard-mpi what kind of operator each Data-Juicer op name is.

eshard-mpi's prepare runs this helper once, with the configured Python, to
check a recipe the way the reference does (docs/design.md#recipe-checks): the
operator kind comes from class inheritance in Data-Juicer's registry, after
the recipe's custom operator paths have been loaded through Data-Juicer's own
loader.

Usage:
    dj_op_kinds.py [--custom-path PATH]... [--] OPNAME...
    dj_op_kinds.py --version

Output (stdout, one line of JSON, nothing else):
    {"data_juicer_version": "1.6.1",
     "ops": {"<name>": {"known": true, "mapper": true, "filter": false,
                        "global": false}, ...}}
  known   the name is in data_juicer.ops.base_op.OPERATORS
  mapper  the class is a subclass of data_juicer.ops.base_op.Mapper
  filter  the class is a subclass of data_juicer.ops.base_op.Filter
  global  the class has a truthy attribute is_global_operation
An unknown name has all four fields false. Names appear in argument order;
a repeated name appears once. When at least one name is unknown, the object
also has "registered": every name in the registry, sorted (eshard-mpi
suggests the closest one: "did you mean ...?").

--version prints {"data_juicer_version": "...", "commit": "<sha>" | null},
where commit is `git rev-parse HEAD` of the checkout that holds the imported
data_juicer package, or null when it is not a git checkout (e.g. PyPI).

Exit codes:
  0  success
  1  unexpected internal error (one line on stderr)
  2  usage error
  3  data_juicer cannot be imported (one line on stderr); the caller falls
     back to the naming convention
  4  a custom operator path failed to load (one line on stderr)

Whatever Data-Juicer or a custom operator prints while being imported is
kept off stdout (file descriptor 1 points at stderr meanwhile), so stdout
carries only the JSON. Set ESHARD_DJ_OP_KINDS_QUIET=0 to see Data-Juicer's
import-time log lines on stderr; by default they are dropped.
"""

import os
import subprocess
import sys

EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_NO_DJ = 3
EXIT_CUSTOM = 4

USAGE = ("usage: dj_op_kinds.py [--custom-path PATH]... [--] OPNAME...\n"
         "       dj_op_kinds.py --version\n")


def one_line(text):
    """Collapse a message to a single line (the C side reads one line)."""
    return " ".join(str(text).split())


def fail(code, message):
    sys.stderr.write("ERROR: " + one_line(message) + "\n")
    sys.stderr.flush()
    sys.exit(code)


def parse_args(argv):
    """Return (version_mode, custom_paths, op_names) or exit with 2."""
    version = False
    paths = []
    names = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            names.extend(argv[i + 1:])
            break
        if arg == "--version":
            version = True
        elif arg == "--custom-path":
            if i + 1 >= len(argv):
                sys.stderr.write("ERROR: --custom-path needs a value\n" + USAGE)
                sys.exit(EXIT_USAGE)
            paths.append(argv[i + 1])
            i += 1
        elif arg.startswith("--custom-path="):
            paths.append(arg[len("--custom-path="):])
        elif arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            sys.exit(0)
        elif arg.startswith("-") and arg != "-":
            sys.stderr.write("ERROR: unknown option '%s'\n%s" % (arg, USAGE))
            sys.exit(EXIT_USAGE)
        else:
            names.append(arg)
        i += 1
    if version and (paths or names):
        sys.stderr.write("ERROR: --version takes no other arguments\n" + USAGE)
        sys.exit(EXIT_USAGE)
    if not version and not names:
        sys.stderr.write("ERROR: no operator names given\n" + USAGE)
        sys.exit(EXIT_USAGE)
    for p in paths:
        if p == "":
            sys.stderr.write("ERROR: --custom-path must not be empty\n")
            sys.exit(EXIT_USAGE)
    return version, paths, names


class StdoutToStderr:
    """Point fd 1 (and sys.stdout) at stderr, or at /dev/null when quiet.

    Data-Juicer logs through loguru to sys.stderr at import time, and custom
    operator modules may print anything; neither may reach our stdout.
    """

    def __init__(self, quiet):
        self.quiet = quiet

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved_out = os.dup(1)
        self.saved_err = os.dup(2)
        if self.quiet:
            self.sink = os.open(os.devnull, os.O_WRONLY)
            os.dup2(self.sink, 1)
            os.dup2(self.sink, 2)
        else:
            self.sink = None
            os.dup2(2, 1)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved_out, 1)
        os.dup2(self.saved_err, 2)
        os.close(self.saved_out)
        os.close(self.saved_err)
        if self.sink is not None:
            os.close(self.sink)
        return False


def import_data_juicer():
    """Import data_juicer; exit 3 with one line if that fails."""
    try:
        import data_juicer  # noqa: F401
    except BaseException as e:  # SystemExit from a broken install counts too
        return None, "cannot import data_juicer: %s: %s" % (type(e).__name__, e)
    return data_juicer, None


def git_commit(package_dir):
    """HEAD of the git checkout holding the data_juicer package, or None."""
    root = os.path.dirname(os.path.abspath(package_dir))
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    try:
        out = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.decode("ascii", "replace").strip()
    return sha or None


def find_custom_loader():
    """Data-Juicer's loader for custom_operator_paths (registers the ops)."""
    candidates = ("data_juicer.config.config", "data_juicer.config")
    last = None
    for modname in candidates:
        try:
            module = __import__(modname, fromlist=["load_custom_operators"])
        except Exception as e:  # noqa: BLE001
            last = e
            continue
        loader = getattr(module, "load_custom_operators", None)
        if callable(loader):
            return loader, None
    return None, "Data-Juicer has no load_custom_operators (%s)" % (last,)


def classify(names, registry, mapper_cls, filter_cls):
    import inspect

    ops = {}
    for name in names:
        if name in ops:
            continue
        cls = registry.get(name)
        known = cls is not None
        is_class = known and inspect.isclass(cls)
        ops[name] = {
            "known": known,
            "mapper": bool(is_class and issubclass(cls, mapper_cls)),
            "filter": bool(is_class and issubclass(cls, filter_cls)),
            "global": bool(known and getattr(cls, "is_global_operation", False)),
        }
    return ops


def main(argv):
    version_mode, paths, names = parse_args(argv)
    quiet = os.environ.get("ESHARD_DJ_OP_KINDS_QUIET", "1") != "0"
    import json

    error = None
    code = 0
    with StdoutToStderr(quiet):
        dj, error = import_data_juicer()
        if dj is None:
            code = EXIT_NO_DJ
        elif version_mode:
            result = {
                "data_juicer_version": str(getattr(dj, "__version__", "unknown")),
                "commit": git_commit(os.path.dirname(dj.__file__)),
            }
        else:
            try:
                from data_juicer.ops.base_op import OPERATORS, Filter, Mapper
            except BaseException as e:  # noqa: BLE001
                code, error = EXIT_NO_DJ, ("cannot import data_juicer.ops.base_op: %s: %s"
                                           % (type(e).__name__, e))
            if code == 0 and paths:
                loader, error = find_custom_loader()
                if loader is None:
                    code = EXIT_CUSTOM
                else:
                    try:
                        loader(list(paths))
                    except BaseException as e:  # noqa: BLE001
                        code = EXIT_CUSTOM
                        error = "cannot load custom operator paths %s: %s: %s" % (
                            paths, type(e).__name__, e)
            if code == 0:
                result = {
                    "data_juicer_version": str(getattr(dj, "__version__", "unknown")),
                    # The same identity as --version, so that prepare and the worker's
                    # version check compare like with like.
                    "commit": git_commit(os.path.dirname(dj.__file__)),
                    "ops": classify(names, OPERATORS.modules, Mapper, Filter),
                }
                if not all(o["known"] for o in result["ops"].values()):
                    result["registered"] = sorted(str(n) for n in OPERATORS.modules)
    if code != 0:
        fail(code, error)
    sys.stdout.write(json.dumps(result, separators=(", ", ": ")) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001
        fail(EXIT_INTERNAL, "dj_op_kinds.py: %s: %s" % (type(e).__name__, e))
