"""TensorFlow's checkpoint files (its "tensor bundle" format), read and written with NumPy alone,
so that a checkpoint moves between the TensorFlow and JAX backends and OpenNMT-tf's checkpoints
load where TensorFlow is not installed. Imports no TensorFlow and no protobuf.

A checkpoint `<prefix>` is two kinds of files:
- `<prefix>.data-<shard>-of-<count>`: the tensors' bytes, one after the other (little-endian,
  row-major; a string tensor as varint64 lengths, a masked CRC-32C of them, then the bytes);
- `<prefix>.index`: a LevelDB table (sorted keys, prefix-compressed, in checksummed blocks,
  an index block and a fixed-size footer) mapping "" to a BundleHeaderProto (shard count,
  endianness, format version) and each tensor's name to a BundleEntryProto (dtype, shape, shard,
  offset, size, CRC-32C of its bytes). The few protobuf fields are coded by hand here.

read_bundle / bundle_names / write_bundle are the interface; BundleError (a ValueError) is
what a damaged or foreign file raises, its message naming the file.
"""

import os

import ml_dtypes
import numpy as np

from opennmt_lite.checkpointing import crc32c
from opennmt_lite.files import Staging

# TensorFlow's DataType enum values (tensorflow/core/framework/types.proto)
STRING = 7
_DTYPES = {
    1: np.dtype(np.float32), 2: np.dtype(np.float64), 3: np.dtype(np.int32),
    4: np.dtype(np.uint8), 5: np.dtype(np.int16), 6: np.dtype(np.int8), 9: np.dtype(np.int64),
    10: np.dtype(np.bool_), 14: np.dtype(ml_dtypes.bfloat16), 17: np.dtype(np.uint16),
    19: np.dtype(np.float16), 22: np.dtype(np.uint32), 23: np.dtype(np.uint64),
}
_ENUMS = {dtype: number for number, dtype in _DTYPES.items()}
STRING_DTYPE = np.dtype(object)  # what bundle_names gives for a string tensor (bytes items)

TABLE_MAGIC = 0xDB4775248B80FB57  # LevelDB's table magic number, the footer's last 8 bytes
FOOTER_SIZE = 48  # two block handles padded to 20 bytes each, then the magic number
BLOCK_TRAILER = 5  # after each block: its compression type (1 byte), masked CRC-32C (4 bytes)
BLOCK_SIZE = 262144  # TensorFlow's table options: data block size, keys between restarts
RESTART_INTERVAL = 16
BUNDLE_VERSION = 1  # the format version TensorFlow writes (producer) and reads


class BundleError(ValueError):
    """A checkpoint file that is damaged or not a tensor bundle; the message names the file."""


def index_path(prefix):
    return f"{prefix}.index"


def data_path(prefix, shard=0, count=1):
    return f"{prefix}.data-{shard:05d}-of-{count:05d}"


# -- protobuf's wire format: varints, tags, length-delimited fields ----------------------------

def _varint(buffer, position):
    """(value, next position) of the unsigned varint at `position`; IndexError if cut short."""
    result = shift = 0
    while True:
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _put_varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(buffer):
    """[(field number, value)] of a serialized message: ints for varint and fixed fields,
    bytes for length-delimited ones."""
    fields, position = [], 0
    while position < len(buffer):
        tag, position = _varint(buffer, position)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, position = _varint(buffer, position)
        elif wire == 1:
            value, position = int.from_bytes(buffer[position: position + 8], "little"), position + 8
        elif wire == 5:
            value, position = int.from_bytes(buffer[position: position + 4], "little"), position + 4
        elif wire == 2:
            length, position = _varint(buffer, position)
            value, position = bytes(buffer[position: position + length]), position + length
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if position > len(buffer):
            raise ValueError("message cut short")
        fields.append((number, value))
    return fields


def _varint_field(number, value):
    # (proto3 leaves out a field holding its default value)
    return _put_varint(number << 3) + _put_varint(value) if value else b""


def _bytes_field(number, value):
    return _put_varint(number << 3 | 2) + _put_varint(len(value)) + value


class Entry:
    """A tensor's BundleEntryProto: dtype (enum), shape, shard, offset, size, crc (masked)."""

    def __init__(self, dtype, shape, shard=0, offset=0, size=0, crc=0, sliced=False):
        self.dtype, self.shape, self.shard = dtype, tuple(shape), shard
        self.offset, self.size, self.crc, self.sliced = offset, size, crc, sliced

    @classmethod
    def parse(cls, value):
        entry = cls(0, ())
        for number, field in _fields(value):
            if number == 1:
                entry.dtype = field
            elif number == 2:  # TensorShapeProto: repeated Dim dim = 2 {int64 size = 1}
                entry.shape += tuple(dict(_fields(dim)).get(1, 0)
                                     for n, dim in _fields(field) if n == 2)
            elif number in (3, 4, 5):
                setattr(entry, {3: "shard", 4: "offset", 5: "size"}[number], field)
            elif number == 6:
                entry.crc = field
            elif number == 7:
                entry.sliced = True
        return entry

    def serialize(self):
        shape = b"".join(_bytes_field(2, _varint_field(1, size)) for size in self.shape)
        return (_varint_field(1, self.dtype) + _bytes_field(2, shape) + _varint_field(3, self.shard)
                + _varint_field(4, self.offset) + _varint_field(5, self.size)
                + (b"\x35" + self.crc.to_bytes(4, "little") if self.crc else b""))


def _header():
    """The BundleHeaderProto TensorFlow writes: 1 shard, little-endian, version {producer: 1}."""
    return _varint_field(1, 1) + _bytes_field(3, _varint_field(1, BUNDLE_VERSION))


# -- the index: a LevelDB table ------------------------------------------------------------------

def _block(data, offset, size, path):
    """The contents of the block at [offset, offset + size), its checksum verified."""
    end = offset + size + BLOCK_TRAILER
    if end > len(data) - FOOTER_SIZE:
        raise BundleError(f"{path} is truncated (a block ends at byte {end}, past the file's "
                          f"{len(data)} bytes)")
    contents = data[offset: offset + size + 1]  # (the checksum covers the type byte too)
    stored = crc32c.unmask(int.from_bytes(data[offset + size + 1: end], "little"))
    if crc32c.value(contents) != stored:
        raise BundleError(f"{path} is damaged (block checksum mismatch at byte {offset})")
    if contents[-1] != 0:
        raise BundleError(f"{path}: compressed table blocks are not supported (type "
                          f"{contents[-1]}; TensorFlow writes them uncompressed)")
    return contents[:-1]


def _block_entries(block):
    """[(key, value)] of a block: entries of shared key length, own key bytes, value length,
    then the key's own bytes and the value; the restart offsets and their count at the end."""
    restarts = int.from_bytes(block[-4:], "little")
    end = len(block) - 4 * (restarts + 1)
    entries, key, position = [], b"", 0
    while position < end:
        shared, position = _varint(block, position)
        own, position = _varint(block, position)
        length, position = _varint(block, position)
        key = key[:shared] + bytes(block[position: position + own])
        position += own
        entries.append((key, bytes(block[position: position + length])))
        position += length
    if position != end:
        raise ValueError("a block's entries overrun its restart array")
    return entries


def _read_table(path):
    """[(key, value)] of the table file `path`, in key order."""
    with open(path, "rb") as stream:
        data = memoryview(stream.read())
    if len(data) < FOOTER_SIZE:
        raise BundleError(f"{path} is truncated ({len(data)} bytes, shorter than a table footer)")
    footer = data[-FOOTER_SIZE:]
    if int.from_bytes(footer[-8:], "little") != TABLE_MAGIC:
        raise BundleError(f"{path} is not a checkpoint index or is truncated (bad magic number)")
    try:
        _, position = _varint(footer, 0)  # (the metaindex block, empty: not needed)
        _, position = _varint(footer, position)
        index_offset, position = _varint(footer, position)
        index_size, _ = _varint(footer, position)
        entries = []
        for _, handle in _block_entries(_block(data, index_offset, index_size, path)):
            offset, position = _varint(handle, 0)
            size, _ = _varint(handle, position)
            entries += _block_entries(_block(data, offset, size, path))
    except (IndexError, ValueError) as error:
        if isinstance(error, BundleError):
            raise
        raise BundleError(f"{path} is damaged (its table does not parse: {error})") from None
    return entries


def _shortest_separator(start, limit):
    """A short key >= start and < limit (LevelDB's choice for an index entry)."""
    common = 0
    while common < min(len(start), len(limit)) and start[common] == limit[common]:
        common += 1
    if common < min(len(start), len(limit)):
        byte = start[common]
        if byte < 0xFF and byte + 1 < limit[common]:
            return start[:common] + bytes([byte + 1])
    return start


def _short_successor(key):
    for i, byte in enumerate(key):
        if byte != 0xFF:
            return key[:i] + bytes([byte + 1])
    return key


class _BlockBuilder:
    def __init__(self, restart_interval):
        self.restart_interval = restart_interval
        self.buffer, self.restarts, self.count, self.last = bytearray(), [0], 0, b""

    def add(self, key, value):
        shared = 0
        if self.count < self.restart_interval:
            while shared < min(len(key), len(self.last)) and key[shared] == self.last[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buffer))
            self.count = 0
        self.buffer += (_put_varint(shared) + _put_varint(len(key) - shared)
                        + _put_varint(len(value)) + key[shared:] + value)
        self.last, self.count = key, self.count + 1

    def size_estimate(self):
        return len(self.buffer) + 4 * len(self.restarts) + 4

    def finish(self):
        out = self.buffer + b"".join(r.to_bytes(4, "little") for r in self.restarts)
        return bytes(out + len(self.restarts).to_bytes(4, "little"))

    def empty(self):
        return not self.buffer


def _table(items):
    """The bytes of a table holding `items` ([(key, value)], keys sorted), as TensorFlow's
    TableBuilder lays them out uncompressed (the same bytes for the same items)."""
    out = bytearray()

    def write_block(contents):
        handle = _put_varint(len(out)) + _put_varint(len(contents))
        crc = crc32c.value(contents + b"\x00")
        out.extend(contents + b"\x00" + crc32c.mask(crc).to_bytes(4, "little"))
        return handle

    data, index = _BlockBuilder(RESTART_INTERVAL), _BlockBuilder(1)
    pending, last = None, b""
    for key, value in items:
        if pending is not None:
            index.add(_shortest_separator(last, key), pending)
            pending = None
        data.add(key, value)
        last = key
        if data.size_estimate() >= BLOCK_SIZE:
            pending, data = write_block(data.finish()), _BlockBuilder(RESTART_INTERVAL)
    if not data.empty():
        pending = write_block(data.finish())
    metaindex = write_block(_BlockBuilder(RESTART_INTERVAL).finish())
    if pending is not None:
        index.add(_short_successor(last), pending)
    footer = metaindex + write_block(index.finish())
    out.extend(footer.ljust(FOOTER_SIZE - 8, b"\x00") + TABLE_MAGIC.to_bytes(8, "little"))
    return bytes(out)


# -- reading -----------------------------------------------------------------------------------

class _Reader:
    """The entries of the checkpoint `prefix` ({name: Entry}) and its tensors, one at a time."""

    def __init__(self, prefix):
        self.prefix = os.fspath(prefix)
        path = index_path(self.prefix)
        if not os.path.exists(path):
            raise FileNotFoundError(f"checkpoint {self.prefix} not found (no {path})")
        items = _read_table(path)
        if not items or items[0][0] != b"":
            raise BundleError(f"{path} is damaged (no header entry)")
        try:
            header = dict(_fields(items[0][1]))
            version = dict(_fields(header.get(3, b"")))
            self.entries = {key.decode("utf-8"): Entry.parse(value) for key, value in items[1:]}
        except (IndexError, ValueError, UnicodeDecodeError) as error:
            raise BundleError(f"{path} is damaged (an entry does not parse: {error})") from None
        if header.get(2, 0) != 0:
            raise BundleError(f"{path} was written on a big-endian machine (not supported)")
        if version.get(2, 0) > BUNDLE_VERSION:
            raise BundleError(f"{path} needs a reader of checkpoint format version "
                              f"{version.get(2)} or newer (this one reads {BUNDLE_VERSION})")
        self.shards = header.get(1, 1)
        for name, entry in self.entries.items():
            if entry.sliced:
                raise BundleError(f"{path}: {name} is saved in slices (a partitioned variable; "
                                  "not supported)")
            if entry.dtype != STRING and entry.dtype not in _DTYPES:
                raise BundleError(f"{path}: {name} has the TensorFlow dtype number {entry.dtype} "
                                  "(not supported)")
            if entry.shard >= self.shards:
                raise BundleError(f"{path} is damaged ({name} is in shard {entry.shard} of "
                                  f"{self.shards})")

    def dtype(self, name):
        entry = self.entries[name]
        return STRING_DTYPE if entry.dtype == STRING else _DTYPES[entry.dtype]

    def _bytes(self, name, entry):
        path = data_path(self.prefix, entry.shard, self.shards)
        buffer = bytearray(entry.size)
        try:
            with open(path, "rb") as stream:
                stream.seek(entry.offset)
                got = stream.readinto(buffer)
        except FileNotFoundError:
            raise BundleError(f"checkpoint {self.prefix}: its data file {path} is missing") from None
        if got != entry.size:
            raise BundleError(f"{path} is truncated: {name} needs bytes [{entry.offset}, "
                              f"{entry.offset + entry.size}), the file ends at "
                              f"{os.path.getsize(path)}")
        return path, buffer

    def tensor(self, name, verify=True):
        entry = self.entries[name]
        path, buffer = self._bytes(name, entry)
        count = int(np.prod(entry.shape, dtype=np.int64))
        if entry.dtype == STRING:
            value, actual = _strings(buffer, count, path, name)
        else:
            dtype = _DTYPES[entry.dtype]
            if entry.size != count * dtype.itemsize:
                raise BundleError(f"{index_path(self.prefix)} is damaged: {name} of shape "
                                  f"{entry.shape} ({dtype.name}) is stored in {entry.size} bytes, "
                                  f"not {count * dtype.itemsize}")
            value = np.frombuffer(buffer, dtype=dtype.newbyteorder("<")).astype(dtype, copy=False)
            actual = crc32c.value(buffer) if verify else None
        if verify and actual != crc32c.unmask(entry.crc):
            raise BundleError(f"{path} is damaged: {name} (bytes [{entry.offset}, "
                              f"{entry.offset + entry.size})) fails its checksum")
        return value.reshape(entry.shape)


def _strings(buffer, count, path, name):
    """(object array of bytes, CRC-32C as TensorFlow computes it) of a string tensor's bytes."""
    try:
        lengths, position, crc = [], 0, 0
        for _ in range(count):
            length, position = _varint(buffer, position)
            lengths.append(length)
            # (the checksum covers each length as a 4-byte integer, 8 if it needs more)
            crc = crc32c.value(length.to_bytes(4 if length <= 0xFFFFFFFF else 8, "little"), crc)
        checksum = bytes(buffer[position: position + 4])
        position += 4
        if len(checksum) != 4 or crc32c.unmask(int.from_bytes(checksum, "little")) != crc:
            raise ValueError("the lengths' checksum does not match")
        crc = crc32c.value(checksum, crc)
        items = np.empty(count, dtype=object)
        for i, length in enumerate(lengths):
            items[i] = bytes(buffer[position: position + length])
            position += length
        if position != len(buffer):
            raise ValueError(f"{len(buffer)} bytes stored, {position} described")
    except (IndexError, ValueError) as error:
        raise BundleError(f"{path} is damaged: the string tensor {name} does not parse "
                          f"({error})") from None
    return items, crc32c.value(bytes(buffer[position - sum(lengths): position]), crc)


def bundle_names(prefix):
    """{tensor name: (NumPy dtype, shape tuple)} of the checkpoint `prefix`, from its index only
    (string tensors: dtype object). FileNotFoundError if there is no index, BundleError if it is
    damaged."""
    reader = _Reader(prefix)
    return {name: (reader.dtype(name), entry.shape) for name, entry in reader.entries.items()}


def iter_bundle(prefix, names=None, verify=True):
    """(name, value) of each tensor of `prefix` (or of `names`), read one at a time."""
    reader = _Reader(prefix)
    names = list(reader.entries) if names is None else list(names)
    missing = [name for name in names if name not in reader.entries]
    if missing:
        raise KeyError(f"checkpoint {prefix} has no tensor named {', '.join(missing)}")
    for name in names:
        yield name, reader.tensor(name, verify)


def read_bundle(prefix, names=None, verify=True):
    """{name: NumPy array} of every tensor of the checkpoint `prefix`, or of `names` (KeyError
    naming those it lacks). Strings are object arrays of bytes. With `verify`, each tensor's
    size and CRC-32C are checked as TensorFlow does: BundleError naming the file on damage."""
    return dict(iter_bundle(prefix, names, verify))


def check_bundle(prefix):
    """Reads every tensor of `prefix` back, checking sizes and checksums (one in memory at a
    time); raises BundleError or FileNotFoundError on damage."""
    for _ in iter_bundle(prefix):
        pass


# -- writing -----------------------------------------------------------------------------------

def _encode(name, value):
    """(dtype enum, shape, the bytes to store, their CRC-32C) of a tensor."""
    array = np.asarray(value)
    if array.dtype.kind in "SUO":
        items = [item.encode("utf-8") if isinstance(item, str) else bytes(item)
                 for item in array.reshape(-1).tolist()]
        lengths = b"".join(_put_varint(len(item)) for item in items)
        crc = 0
        for item in items:
            crc = crc32c.value(len(item).to_bytes(4 if len(item) <= 0xFFFFFFFF else 8, "little"), crc)
        checksum = crc32c.mask(crc).to_bytes(4, "little")
        body = b"".join(items)
        crc = crc32c.value(body, crc32c.value(checksum, crc))
        return STRING, array.shape, lengths + checksum + body, crc
    dtype = array.dtype.newbyteorder("=")
    if dtype not in _ENUMS:
        raise TypeError(f"tensor {name}: dtype {array.dtype} cannot be stored in a TensorFlow "
                        "checkpoint")
    data = np.ascontiguousarray(array, dtype=dtype.newbyteorder("<")).reshape(-1).view(np.uint8)
    return _ENUMS[dtype], array.shape, data, crc32c.value(data)


def write_bundle(prefix, tensors):
    """Writes `tensors` ({name: array-like}: float32/16, bfloat16, float64, (u)int8-64, bool,
    strings) as the checkpoint `prefix` (`<prefix>.index` and `<prefix>.data-00000-of-00001`),
    readable by TensorFlow (tf.train.load_checkpoint). Atomic: both files are written under
    temporary names and renamed, the index last, so a reader finds the old checkpoint or the
    new one whole."""
    prefix = os.fspath(prefix)
    entries, offset = [], 0
    with Staging() as staging:
        with staging.open(data_path(prefix), "wb") as stream:
            for name in sorted(tensors, key=lambda n: n.encode("utf-8")):
                if not name:
                    raise ValueError("a tensor name cannot be empty (the header's key)")
                dtype, shape, data, crc = _encode(name, tensors[name])
                stream.write(data)
                size = len(data) if isinstance(data, bytes) else data.size
                entries.append((name.encode("utf-8"),
                                Entry(dtype, shape, 0, offset, size, crc32c.mask(crc)).serialize()))
                offset += size
        index = _table([(b"", _header())] + entries)
        with open(staging.path(index_path(prefix), last=True), "wb") as stream:
            stream.write(index)
