"""A stand-in for PyTorch in the peer benchmark's self-test (no GPU, no
torch here): tensors are numpy arrays with a device name, copies are numpy
copies done at once, streams and events only keep the calls' shape. It lets
bench/peers/torch_bench.py run its loops, offsets and checks end to end."""
import contextlib

import numpy as _np

__version__ = "0-fake"
FAKE = True
uint8 = _np.uint8
int64 = _np.int64


class Tensor:
    def __init__(self, a, device="cpu", pinned=False):
        self._a, self.device, self._pinned = a, device, pinned

    def __getitem__(self, key):
        return Tensor(self._a[key], self.device, self._pinned)

    def numel(self):
        return self._a.size

    def copy_(self, src, non_blocking=False):
        if non_blocking and self.device == "cuda" and src.device == "cpu" and not src._pinned:
            raise RuntimeError("fake torch: a non_blocking H2D copy from pageable memory")
        self._a[...] = src._a
        return self

    def zero_(self):
        self._a[...] = 0
        return self

    def numpy(self):
        if self.device != "cpu":
            raise TypeError("can't convert cuda tensor to numpy")
        return self._a

    def is_pinned(self):
        return self._pinned

    def pin_memory(self):
        return Tensor(self._a.copy(), "cpu", True)

    def cuda(self, non_blocking=False):
        return Tensor(self._a.copy(), "cuda")

    def __dlpack__(self, stream=None):
        raise NotImplementedError("the fake cupy reads ._a")


def empty(n, dtype=uint8, device=None, pin_memory=False):
    dev = "cuda" if device is not None and str(device).startswith("cuda") else "cpu"
    return Tensor(_np.empty(int(n), dtype=dtype), dev, pin_memory and dev == "cpu")


def from_file(filename, shared=None, size=0, dtype=uint8):
    a = _np.fromfile(filename, dtype=dtype, count=size)
    if a.size != size:
        raise RuntimeError("fake torch.from_file: %s is shorter than %d" % (filename, size))
    return Tensor(a, "cpu")


class _Cuda:
    class Stream:
        def synchronize(self):
            return None

    class Event:
        def record(self, stream=None):
            return None

        def synchronize(self):
            return None

    @staticmethod
    @contextlib.contextmanager
    def stream(s):
        yield s

    @staticmethod
    def synchronize():
        return None

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def get_device_name(i=0):
        return "fake GPU (numpy)"


cuda = _Cuda()
