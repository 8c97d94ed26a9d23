"""A stand-in for KvikIO in the peer benchmark's self-test, where the real
wheels are not installed: CuFile.pread splits a read into task_size pieces
run by a pool of num_threads threads (os.preadv into the buffer the object's
__cuda_array_interface__ points at), as KvikIO's compat mode does."""
import ctypes
import os
from concurrent.futures import ThreadPoolExecutor

from . import defaults  # noqa: F401

__version__ = "0-fake"
FAKE = True
_pool = None
_pool_threads = 0


def _executor():
    global _pool, _pool_threads
    n = defaults.get("num_threads")
    if _pool is None or _pool_threads != n:
        _pool = ThreadPoolExecutor(max_workers=n)
        _pool_threads = n
    return _pool


class IOFuture:
    def __init__(self, futs):
        self._futs = futs

    def get(self):
        return sum(f.result() for f in self._futs)

    def done(self):
        return all(f.done() for f in self._futs)


class CuFile:
    def __init__(self, path, flags="r"):
        if flags != "r":
            raise ValueError("the fake opens files for reading only")
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def closed(self):
        return self._fd < 0

    def pread(self, buf, size=None, file_offset=0, task_size=None):
        iface = buf.__cuda_array_interface__
        addr = iface["data"][0]
        cap = buf.nbytes
        size = cap if size is None else size
        if size > cap:
            raise ValueError("size %d exceeds the buffer's %d bytes" % (size, cap))
        ts = task_size or defaults.get("task_size")
        fd = self._fd

        def task(off, n):
            view = (ctypes.c_uint8 * n).from_address(addr + off)
            done = 0
            while done < n:
                got = os.preadv(fd, [memoryview(view)[done:]], file_offset + off + done)
                if got <= 0:
                    raise IOError("short read")
                done += got
            return n

        ex = _executor()
        return IOFuture([ex.submit(task, off, min(ts, size - off)) for off in range(0, size, ts)])
