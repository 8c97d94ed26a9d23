"""A stand-in for cupy in the peer benchmark's self-test (no GPU here).

Only what bench/peers uses: empty/zeros of uint8, uint64 views, slicing,
reshape, sum, concatenate, asnumpy, from_dlpack and a device synchronise.
Arrays are numpy arrays that also expose __cuda_array_interface__. Where
libcuda.so.1 is the project's fake driver (tests/fakecuda, on
LD_LIBRARY_PATH) their memory comes from its cuMemAlloc, so a real KvikIO
sees device memory and takes its device path (bounce buffer, then a copy);
elsewhere it is plain host memory.
"""
import ctypes

import numpy as _np
from numpy import concatenate, uint8, uint64  # noqa: F401

__version__ = "0-fake"
FAKE = True


class ndarray(_np.ndarray):
    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ctypes.data, False),
            "strides": None if self.flags.c_contiguous else self.strides,
            "version": 3,
        }


_lib = None


def _driver():
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            ctx = ctypes.c_void_p()
            if lib.cuInit(0) != 0 or lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) != 0:
                raise OSError("cuInit or cuDevicePrimaryCtxRetain failed")
            if lib.cuCtxSetCurrent(ctx) != 0:
                raise OSError("cuCtxSetCurrent failed")
            lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
            _lib = lib
        except OSError:
            _lib = False
    return _lib


_keep = []  # fake device allocations live as long as the process


def empty(n, dtype=uint8):
    n = int(n)
    lib = _driver()
    if lib and n:
        ptr = ctypes.c_uint64()
        if lib.cuMemAlloc_v2(ctypes.byref(ptr), n) != 0:
            raise MemoryError("fake cuMemAlloc of %d bytes failed" % n)
        raw = (ctypes.c_uint8 * n).from_address(ptr.value)
        _keep.append(raw)
        a = _np.frombuffer(raw, dtype=_np.uint8)
    else:
        a = _np.empty(n, dtype=_np.uint8)
    return a.view(ndarray).view(dtype)


def zeros(n, dtype=uint8):
    a = empty(n * _np.dtype(dtype).itemsize, uint8).view(dtype)
    a[...] = 0
    return a


def asnumpy(a):
    return _np.array(a, copy=True).view(_np.ndarray)


def from_dlpack(t):
    # the fake torch's tensors hold a numpy array
    return _np.asarray(t._a).view(ndarray)


class cuda:
    class runtime:
        @staticmethod
        def deviceSynchronize():
            return None

        @staticmethod
        def getDeviceProperties(i):
            return {"name": b"fake GPU (numpy)"}
