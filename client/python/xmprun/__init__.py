"""xmprun's Python client: a drop-in for torch_xla's xla_multiprocessing (``import xmprun as xmp``).

In a ``start: fork`` job the command runs once, as the zygote: it builds what the workers share
(a model, a tokenizer) and calls :func:`spawn`, which forks one worker per planned device, each
into its own cgroups. The preloaded pages stay charged to the zygote; a worker's memory limit
covers only what it allocates or writes. See SPEC.md section 6 and FORK.md.
"""

import contextlib
import ctypes
import fcntl
import gc
import json
import os
import pickle
import shutil
import sys
import tempfile
import threading
import time
import traceback

__all__ = ["spawn", "MpModelWrapper", "MpSerialExecutor", "serial"]

_lib = None
_local_lock = threading.Lock()
_lock_state = threading.local()


def _load():
    """libxmprun, loaded as a PyDLL: its calls keep the GIL, which the fork needs."""
    global _lib
    if _lib is not None:
        return _lib
    path = os.environ.get("XMPRUN_CLIENT_LIB")
    if not path:
        here = os.path.dirname(os.path.abspath(__file__))
        for cand in (os.path.join(here, "..", "..", "libxmprun.so"), "libxmprun.so"):
            if os.path.exists(cand):
                path = cand
                break
        else:
            path = "libxmprun.so"
    lib = ctypes.PyDLL(path)
    lib.xmprun_last_error.restype = ctypes.c_char_p
    lib.xmprun_zygote_open.restype = ctypes.c_int
    lib.xmprun_zygote_fork.restype = ctypes.c_int
    lib.xmprun_worker_environ.restype = ctypes.c_void_p
    lib.xmprun_worker_environ.argtypes = [ctypes.POINTER(ctypes.c_size_t)]
    lib.xmprun_zygote_abort.argtypes = [ctypes.c_char_p]
    _lib = lib
    return lib


def _error(lib):
    return lib.xmprun_last_error().decode("utf-8", "replace")


def _check_no_device_runtime():
    """A runtime the zygote initialised cannot be used by forked workers: refuse now, saying why,
    rather than let every worker fail later."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is not None and getattr(cuda, "is_initialized", None) and cuda.is_initialized():
        raise RuntimeError(
            "xmprun.spawn: CUDA is already initialised in the zygote, and a forked worker cannot "
            "use it (torch: \"Cannot re-initialize CUDA in forked subprocess\"). Build the model "
            "on the CPU before spawn() and move it to the device in the worker "
            "(MpModelWrapper(model).to(device)); do not call torch.cuda.* before spawn()."
        )
    xla = sys.modules.get("torch_xla._XLAC")
    probe = getattr(xla, "_xla_runtime_is_initialized", None) if xla is not None else None
    if probe is not None and probe():
        raise RuntimeError(
            "xmprun.spawn: the XLA/PJRT runtime is already initialised in the zygote "
            "(torch_xla: \"Runtime is already initialized\"). Do not touch an XLA device "
            "(xm.xla_device(), xr.*) before spawn(); move the model in the worker."
        )


def _set_environ(lib):
    """os.environ from the worker's environment (libxmprun already set the C one)."""
    size = ctypes.c_size_t(0)
    ptr = lib.xmprun_worker_environ(ctypes.byref(size))
    blob = ctypes.string_at(ptr, size.value) if ptr else b""
    env = {}
    for entry in blob.split(b"\0"):
        if b"=" in entry:
            k, v = entry.split(b"=", 1)
            env[os.fsdecode(k)] = os.fsdecode(v)
    os.environ.clear()
    os.environ.update(env)


def _write_error_file(exc, callstack=None):
    """torchelastic's error file format, so the xmprun report shows the traceback."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {
        "message": {
            "message": "%s: %s" % (type(exc).__name__, exc),
            "extraInfo": {
                "py_callstack": callstack if callstack is not None else traceback.format_exc(),
                "timestamp": str(int(time.time())),
            },
        }
    }
    try:
        with open(path, "w") as f:
            json.dump(data, f)
    except OSError:
        pass


# The zygote (start: fork) is the process that imported this module under xmprun; a forked
# worker is another process and has its own error file.
_zygote_pid = os.getpid() if "XMPRUN_ZYGOTE_FD" in os.environ else None


def _zygote_excepthook(kind, exc, tb, _previous=sys.excepthook):
    """An exception that ends the zygote goes to its error file too, so that xmprun's root cause
    quotes it ("the zygote exited with status 1 before it forked the workers: OSError: ...")."""
    if os.getpid() == _zygote_pid:
        _write_error_file(exc, "".join(traceback.format_exception(kind, exc, tb)))
    _previous(kind, exc, tb)


if _zygote_pid is not None:
    sys.excepthook = _zygote_excepthook


def _worker_main(fn, args, rank, result_dir):
    code = 0
    try:
        result = fn(rank, *args)
        if result_dir is not None:
            local = int(os.environ.get("LOCAL_RANK", rank))
            tmp = os.path.join(result_dir, "result-%d.tmp" % local)
            with open(tmp, "wb") as f:
                pickle.dump(result, f)
            os.rename(tmp, os.path.join(result_dir, "result-%d.pkl" % local))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:  # noqa: B902: a worker reports whatever ended it
        _write_error_file(e)
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


_spawned = False


def spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method="fork", *, gather=False):
    """Forks one worker per planned worker from this process (the zygote) and runs
    ``fn(index, *args)`` in each, ``index`` being the worker's RANK, as torch_xla's xmp.spawn.

    Returns once the job is over: None, or with ``gather=True`` the list of fn's return values
    indexed by local rank. Raises RuntimeError if the job failed (xmprun's report says why).
    """
    try:
        return _spawn(fn, args, nprocs, join, start_method, gather)
    except (ValueError, RuntimeError) as e:
        # Before any fork, xmprun's report says why this zygote did not fork.
        if not _forked and "XMPRUN_ZYGOTE_FD" in os.environ:
            try:
                _load().xmprun_zygote_abort(str(e).encode("utf-8", "replace"))
            except OSError:
                pass
        raise


_forked = False


def _spawn(fn, args, nprocs, join, start_method, gather):
    global _spawned, _forked
    if start_method != "fork":
        raise ValueError("xmprun.spawn: start_method must be 'fork' (got %r)" % (start_method,))
    if not join:
        raise ValueError(
            "xmprun.spawn: join=False is not supported: spawn() returns when the job is over, "
            "and xmprun supervises the workers (restarts, OOM, the report)"
        )
    if _spawned:
        raise RuntimeError(
            "xmprun.spawn: called twice; spawn() may be called once per zygote (restarts "
            "re-fork from the same zygote without calling it again)"
        )
    if "XMPRUN_ZYGOTE_FD" not in os.environ:
        raise RuntimeError(
            "xmprun.spawn: not running under xmprun with start: fork. Run this script as the "
            "`command` of a job spec with `start: fork`: `xmprun job.yaml`"
        )
    planned = int(os.environ.get("XMPRUN_ZYGOTE_WORKERS", "0"))
    if nprocs is not None and nprocs != planned:
        raise ValueError(
            "xmprun.spawn: nprocs=%d, but xmprun planned %d workers on this node; pass "
            "nprocs=None, or set `workers: %d` in the job spec" % (nprocs, planned, nprocs)
        )
    _check_no_device_runtime()
    lib = _load()
    _spawned = True
    if lib.xmprun_zygote_open() < 0:
        _forked = True  # libxmprun told xmprun why
        raise RuntimeError("xmprun.spawn: " + _error(lib))

    result_dir = tempfile.mkdtemp(prefix="xmprun-gather-") if gather else None
    # Objects alive now are never collected in a worker, so gc does not write to (and so copy)
    # the pages that hold them.
    gc.collect()
    gc.freeze()
    rank = ctypes.c_int(-1)
    try:
        while True:
            r = lib.xmprun_zygote_next(ctypes.byref(rank))
            if r == 1:
                # PyOS_BeforeFork/AfterFork_* are what os.fork() runs: os.register_at_fork
                # handlers, the import lock, the interpreter's thread state.
                ctypes.pythonapi.PyOS_BeforeFork()
                pid = lib.xmprun_zygote_fork()
                if pid == 0:
                    ctypes.pythonapi.PyOS_AfterFork_Child()
                    _set_environ(lib)
                    _worker_main(fn, args, rank.value, result_dir)
                ctypes.pythonapi.PyOS_AfterFork_Parent()
                _forked = True
                if pid < 0:
                    print("xmprun: " + _error(lib), file=sys.stderr)
            elif r == 0:
                break
            elif r == 3:
                continue  # a signal: its Python handler runs here (^C: KeyboardInterrupt)
            elif r == 2:
                raise RuntimeError("xmprun.spawn: the job failed; xmprun's report says why")
            else:
                raise RuntimeError("xmprun.spawn: " + _error(lib))
        if result_dir is None:
            return None
        results = []
        for local in range(planned):
            with open(os.path.join(result_dir, "result-%d.pkl" % local), "rb") as f:
                results.append(pickle.load(f))
        return results
    finally:
        gc.unfreeze()
        if result_dir is not None:
            shutil.rmtree(result_dir, ignore_errors=True)


@contextlib.contextmanager
def serial():
    """The job-wide serial lock (one per job and node): one holder at a time, released when its
    holder dies. Outside xmprun, a lock within this process."""
    path = os.environ.get("XMPRUN_SERIAL_LOCK")
    if not path:
        with _local_lock:
            yield
        return
    depth = getattr(_lock_state, "depth", 0)
    if depth > 0:  # re-entrant within one worker
        _lock_state.depth = depth + 1
        try:
            yield
        finally:
            _lock_state.depth -= 1
        return
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _lock_state.depth = 1
        try:
            yield
        finally:
            _lock_state.depth = 0
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class MpSerialExecutor:
    """Runs functions one at a time across the job's workers (torch_xla's MpSerialExecutor)."""

    def run(self, fn):
        with serial():
            return fn()


class MpModelWrapper:
    """Holds a model built once in the zygote, shared copy-on-write by the forked workers
    (torch_xla's MpModelWrapper). ``.to(device)`` moves it under the serial lock."""

    def __init__(self, model):
        self._model = model

    def to(self, device):
        with serial():
            return self._model.to(device)
