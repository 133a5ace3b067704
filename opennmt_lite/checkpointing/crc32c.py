"""CRC-32C (Castagnoli), the checksum of TensorFlow's checkpoint files, in NumPy.

A CRC is a sequential recurrence over the bytes, which NumPy cannot run fast one byte at a
time. But it is linear over GF(2): the register after a run of bytes is (the register before,
carried through as many zero bytes) XOR (the run's CRC from a zero register). So a long buffer
is cut into many equal lanes, all lanes are run side by side (one NumPy step per 4 bytes of
each lane, slicing-by-4 tables), and the lanes' registers are folded pairwise, a lane's
register carried across its right neighbour's length by a "zero bytes" operator. An operator
is kept as 4 tables of 256 entries (its value on each byte of each byte position), so applying
it to many registers at once is 4 lookups. No new dependency; about 0.2-0.3 GB/s on this
project's shared 2-core machine (TensorFlow's C++ one, used on that backend, is far faster).
"""

import numpy as np

POLYNOMIAL = 0x82F63B78  # CRC-32C, bit-reflected
_MASK_DELTA = 0xA282EAD8


def _byte_table():
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(POLYNOMIAL), table >> 1)
    return table.astype(np.uint32)


_T0 = _byte_table()
# _SLICES[k][b]: the register that byte b leaves when k more zero bytes follow it
_SLICES = [_T0]
for _ in range(3):
    _SLICES.append(_T0[_SLICES[-1] & 0xFF] ^ (_SLICES[-1] >> 8))
_SLICES = np.stack(_SLICES).astype(np.uint32)  # [4, 256]


_LISTS = [table.tolist() for table in _SLICES]  # (pure Python lookups for short runs)
_LANE_BYTES = 1024  # the shortest lane (shorter: the per-step NumPy overhead dominates)
_MAX_LANES = 1 << 16
_ROWS_PER_COPY = 64  # lanes are transposed this many words at a time (a cache-sized copy)


def _advance_lanes(registers, rows):
    """Each lane's register ([lanes] uint32) after its words, rows: [words, lanes] uint32."""
    lanes = registers.size
    result, scratch = np.empty(lanes, np.uint32), np.empty(lanes, np.uint32)
    for row in rows:
        np.bitwise_xor(registers, row, out=registers)
        octets = registers.view(np.uint8).reshape(lanes, 4)  # (little-endian bytes)
        np.take(_SLICES[3], octets[:, 0], out=result)
        for position in (1, 2, 3):
            np.take(_SLICES[3 - position], octets[:, position], out=scratch)
            result ^= scratch
        registers, result = result, registers
    return registers


def _advance_short(register, data):
    """The register after `data` (a short uint8 array), in plain Python."""
    t0, t1, t2, t3 = _LISTS
    words = data.size // 4
    for word in data[: words * 4].view("<u4").tolist():
        x = register ^ word
        register = t3[x & 0xFF] ^ t2[(x >> 8) & 0xFF] ^ t1[(x >> 16) & 0xFF] ^ t0[x >> 24]
    for byte in data[words * 4:].tolist():
        register = t0[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


# -- zero-byte operators: [4, 256] tables, op(x) = T[0][x&255] ^ T[1][x>>8&255] ^ ... ----------

def _apply(operator, registers):
    registers = np.asarray(registers, dtype=np.uint32)
    return (operator[0][registers & 0xFF] ^ operator[1][(registers >> 8) & 0xFF]
            ^ operator[2][(registers >> 16) & 0xFF] ^ operator[3][registers >> 24])


def _compose(outer, inner):
    """The operator `outer(inner(x))`."""
    return np.stack([_apply(outer, inner[k]) for k in range(4)])


_SHIFTS = np.arange(4, dtype=np.uint32)[:, None] * 8
_UNIT = (np.arange(256, dtype=np.uint32)[None, :] << _SHIFTS).astype(np.uint32)
_ONE_ZERO = np.stack([_T0[_UNIT[k] & 0xFF] ^ (_UNIT[k] >> 8) for k in range(4)])
_POWERS = [_ONE_ZERO]  # _POWERS[i]: 2**i zero bytes
for _ in range(63):
    _POWERS.append(_compose(_POWERS[-1], _POWERS[-1]))


def _zeros_operator(count):
    operator = None
    for i in range(count.bit_length()):
        if count >> i & 1:
            operator = _POWERS[i] if operator is None else _compose(_POWERS[i], operator)
    return operator


def _raw(register, data):
    """The register after `data` (a uint8 array) from `register`, without the final inversion."""
    size = data.size
    lanes = min(_MAX_LANES, 1 << max(0, (size // _LANE_BYTES).bit_length() - 1))
    if lanes < 32:
        return _advance_short(int(register), data)
    lane_words = size // lanes // 4
    head = lanes * lane_words * 4
    words = data[:head].view("<u4").reshape(lanes, lane_words)
    registers = np.zeros(lanes, dtype=np.uint32)
    registers[0] = register  # (the starting register is the first lane's)
    for start in range(0, lane_words, _ROWS_PER_COPY):
        rows = np.ascontiguousarray(words[:, start: start + _ROWS_PER_COPY].T)
        registers = _advance_lanes(registers, rows)
    carry = _zeros_operator(lane_words * 4)
    while registers.size > 1:  # fold neighbours: the left one carried across the right's span
        registers = _apply(carry, registers[0::2]) ^ registers[1::2]
        carry = _compose(carry, carry)
    combined = int(registers[0])
    return _raw(combined, data[head:]) if head < size else combined


def value(data, crc=0):
    """CRC-32C of `data` (bytes, a buffer or a NumPy array's bytes); `crc` continues one."""
    if isinstance(data, np.ndarray):
        array = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    else:
        array = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    return _raw(int(crc) ^ 0xFFFFFFFF, array) ^ 0xFFFFFFFF


def mask(crc):
    """TensorFlow's (LevelDB's) stored form of a checksum, rotated and offset so that the
    checksum of data containing checksums is not degenerate."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked):
    rotated = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF
