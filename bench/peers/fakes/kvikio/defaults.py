"""The fake KvikIO's settings: the 26.x get/set spelling, seeded from the
same environment variables."""
import os

_values = {
    "compat_mode": os.environ.get("KVIKIO_COMPAT_MODE", "ON").upper() in ("ON", "TRUE", "YES", "1"),
    "num_threads": int(os.environ.get("KVIKIO_NTHREADS", "1")),
    "task_size": int(os.environ.get("KVIKIO_TASK_SIZE", str(4 << 20))),
}


def get(key):
    return _values[key]


def set(config, value=None):
    if isinstance(config, dict):
        _values.update(config)
    else:
        _values[config] = value
