"""Reading tokenflow's model.bin with numpy alone (format: include/tokenflow/model_file.hpp).

    config_toml, tensors = read_model(path)   # tensors: {name: ndarray} in the file's order
"""
import struct

import numpy as np

MAGIC = b"TFMODEL1"


def _fnv1a(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def read_model(path, check_hash=True):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 16 or data[:8] != MAGIC:
        raise ValueError(f"{path}: not a tokenflow model file")
    if check_hash and struct.unpack_from("<Q", data, len(data) - 8)[0] != _fnv1a(data[:-8]):
        raise ValueError(f"{path}: corrupt or truncated (checksum mismatch)")
    pos = 8

    def u64():
        nonlocal pos
        (v,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        return v

    def text():
        nonlocal pos
        size = u64()
        s = data[pos:pos + size].decode()
        pos += size
        return s

    config = text()
    layout = []
    for _ in range(u64()):
        name = text()
        shape = tuple(u64() for _ in range(u64()))
        layout.append((name, shape, u64()))
    count = u64()
    values = np.frombuffer(data, dtype="<f8", count=count, offset=pos)
    tensors = {name: values[off:off + int(np.prod(shape))].reshape(shape).copy() for name, shape, off in layout}
    return config, tensors
