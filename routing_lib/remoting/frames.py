"""RocketMQ remoting protocol codec (RemotingCommand, RocketMQSerializable, NettyDecoder).

Frame: int32 total length (of what follows), int32 "serialize type << 24 | header length",
header, body. The header is JSON (fastjson bean of RemotingCommand) or ROCKETMQ binary:
code short, language byte, version short, opaque int, flag int, remark (int len + UTF-8),
extFields (int len + repeated [short keyLen, key, int valLen, val]); all big-endian.
Anything the decoder cannot take is a RemotingCodecError, never another exception.

JSON headers: the decoder takes a subset of what RocketMQ 5.3.3's fastjson decoder takes, and
whatever it takes means the same to both (checked against RemotingCommand.decode): fastjson's
extras (single quotes, bare keys, trailing commas, "105" or 105.0 for an int, nested values in
extFields) are refused; what both take is read the Java way (`"code": null` is 0, extFields
numbers keep BigDecimal's toString form: 1e400 -> "1E+400", 1.50 -> "1.50").
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from enum import IntEnum
from types import MappingProxyType
from typing import Any, TypedDict

# NettyDecoder's FRAME_MAX_LENGTH: the decoder's default, for answers (a client reading a big
# topic list) and for the collector's REGISTER_BROKER bodies. The lookup's own listener takes
# far less (LOOKUP_MAX_FRAME_BYTES, `[serve] max_frame_bytes`).
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
# A read-only request is a header of a few hundred bytes (a few KB with ACL signatures).
LOOKUP_MAX_FRAME_BYTES = 64 * 1024
RPC_RESPONSE = 1 << 0  # flag bit 0: RESPONSE_COMMAND
RPC_ONEWAY = 1 << 1  # flag bit 1: oneway request (no response expected)

LANGUAGE_CODES: Mapping[str, int] = MappingProxyType(
    {
        "JAVA": 0,
        "CPP": 1,
        "DOTNET": 2,
        "PYTHON": 3,
        "DELPHI": 4,
        "ERLANG": 5,
        "RUBY": 6,
        "OTHER": 7,
        "HTTP": 8,
        "GO": 9,
        "PHP": 10,
        "OMS": 11,
        "RUST": 12,
        "NODE_JS": 13,
    }
)
_LANGUAGE_NAMES = {code: name for name, code in LANGUAGE_CODES.items()}

_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_HEAD = struct.Struct(">ii")  # frame length, serialize type << 24 | header length
_INT32 = (-(2**31), 2**31 - 1)
_INT16 = (-(2**15), 2**15 - 1)


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


class RemotingCodecError(Exception):
    """A frame or header this codec refuses; the connection that sent it should be closed."""


class FrameTooLargeError(RemotingCodecError):
    pass


class MalformedFrameError(RemotingCodecError):
    pass


@dataclass(frozen=True)
class RemotingCommand:
    code: int
    language: str = "JAVA"
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON
    # Size on the wire (length prefix included) of a decoded frame; 0 for built commands.
    frame_bytes: int = field(default=0, compare=False, repr=False)

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    def response(
        self, code: int, remark: str | None = None, body: bytes = b"", version: int = 0
    ) -> RemotingCommand:
        """The answer to this request: opaque echoed, response flag, same serialization."""
        return _built(
            {
                "code": code,
                "language": "JAVA",
                "version": version,
                "opaque": self.opaque,
                "flag": RPC_RESPONSE,
                "remark": remark,
                "ext_fields": {},
                "body": body,
                "serialize_type": self.serialize_type,
                "frame_bytes": 0,
            }
        )


def _built(values: dict[str, Any]) -> RemotingCommand:
    """A RemotingCommand of every field's value, without the frozen dataclass's __init__ (a
    setattr through object per field: ~1.7 us, a third of decoding a request). Only for
    values of the right types, as the decoder and `response` make them."""
    command = object.__new__(RemotingCommand)
    command.__dict__.update(values)
    return command


# -- encoding --


def _utf8(text: str) -> bytes:
    # A lone surrogate (JSON "\\ud800" decodes to one) becomes '?', as Java's getBytes does.
    return text.encode("utf-8", "replace")


def _check(value: int, bounds: tuple[int, int], what: str) -> None:
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{what} {value} out of range {bounds}")


def _json_header(cmd: RemotingCommand) -> bytes:
    # fastjson writes RemotingCommand's getters alphabetically and leaves nulls out.
    header: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        header["extFields"] = dict(cmd.ext_fields)
    header.update(flag=cmd.flag, language=cmd.language, opaque=cmd.opaque)
    if cmd.remark:
        header["remark"] = cmd.remark
    header.update(serializeTypeCurrentRPC="JSON", version=cmd.version)
    return _utf8(json.dumps(header, separators=(",", ":"), ensure_ascii=False))


def _binary_header(cmd: RemotingCommand) -> bytes:
    _check(cmd.code, _INT16, "code")
    _check(cmd.version, _INT16, "version")
    language = LANGUAGE_CODES.get(cmd.language, LANGUAGE_CODES["OTHER"])
    parts = [_FIXED.pack(cmd.code, language, cmd.version, cmd.opaque, cmd.flag)]
    remark = _utf8(cmd.remark) if cmd.remark else b""
    parts += [_INT.pack(len(remark)), remark]
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        k, v = _utf8(key), _utf8(value)
        if len(k) > _INT16[1]:
            raise ValueError(f"extFields key longer than {_INT16[1]} bytes")
        ext += _SHORT.pack(len(k)) + k + _INT.pack(len(v)) + v
    parts += [_INT.pack(len(ext)), bytes(ext)]
    return b"".join(parts)


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included."""
    return encode_head(cmd) + cmd.body


# JSON headers of answers without remark or extFields differ only in their opaque: their text
# around it, per (code, flag, language, version), rendered once (at most this many kept).
_JSON_HEAD_TEMPLATES: dict[tuple[int, int, str, int], tuple[bytes, bytes]] = {}
_MAX_TEMPLATES = 1024


def _templated_json_header(cmd: RemotingCommand) -> bytes:
    key = (cmd.code, cmd.flag, cmd.language, cmd.version)
    template = _JSON_HEAD_TEMPLATES.get(key)
    if template is None:
        _check(cmd.code, _INT32, "code")
        _check(cmd.version, _INT32, "version")
        text = _json_header(replace(cmd, opaque=0, body=b""))
        before, mark, after = text.partition(b'"opaque":0,')
        if not mark:  # not the expected shape: no template
            return _json_header(cmd)
        template = (before + b'"opaque":', b"," + after)
        if len(_JSON_HEAD_TEMPLATES) < _MAX_TEMPLATES:
            _JSON_HEAD_TEMPLATES[key] = template
    return template[0] + str(cmd.opaque).encode() + template[1]


def encode_head(cmd: RemotingCommand) -> bytes:
    """The frame without its body: a server writes the (shared, pre-encoded) body separately."""
    if not (_INT32[0] <= cmd.opaque <= _INT32[1] and _INT32[0] <= cmd.flag <= _INT32[1]):
        _check(cmd.opaque, _INT32, "opaque")  # raises for the one out of range
        _check(cmd.flag, _INT32, "flag")
    if cmd.serialize_type == SerializeType.JSON and not cmd.remark and not cmd.ext_fields:
        header = _templated_json_header(cmd)
        length = 4 + len(header) + len(cmd.body)
        return _HEAD.pack(length, len(header)) + header  # JSON: serialize type 0
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _binary_header(cmd)
    else:
        _check(cmd.code, _INT32, "code")
        _check(cmd.version, _INT32, "version")
        header = _json_header(cmd)
    if len(header) > 0xFFFFFF:
        raise ValueError("header longer than 16 MiB")
    length = 4 + len(header) + len(cmd.body)
    mark = (int(cmd.serialize_type) << 24) | len(header)
    return struct.pack(">ii", length, mark) + header


# -- decoding --


def _str(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedFrameError(f"{what} is not UTF-8") from None


def _int_field(header: dict[str, Any], name: str, bounds: tuple[int, int]) -> int:
    value = header.get(name, 0)
    if type(value) is int and bounds[0] <= value <= bounds[1]:
        return value  # the usual case, checked first
    if value is None:
        return 0  # fastjson leaves a primitive int at 0 for null
    if isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
        raise MalformedFrameError(f"JSON header: bad {name}")
    return int(value)


class _NegativeZero(int):
    """JSON `-0`: 0 as a number, "-0" as a fastjson extFields string."""


_NEGATIVE_ZERO = _NegativeZero(0)


def _json_int(text: str) -> int:
    return _NEGATIVE_ZERO if text == "-0" else int(text)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # NaN / Infinity: Python takes them, JSON does not


# Decimals keep their written form (fastjson reads them as BigDecimal); built once, not per call.
_JSON = json.JSONDecoder(parse_float=Decimal, parse_int=_json_int, parse_constant=_no_constant)
# The same without a Python call per integer, for headers with no "-0" in them (nearly all):
# the only integer _json_int reads differently from int() is -0.
_JSON_NO_NEGATIVE_ZERO = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constant)


def _ext_value(value: object) -> str:
    # fastjson fills the HashMap<String,String> with the values' Java toString forms.
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is _NEGATIVE_ZERO:
        return "-0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):  # BigDecimal.toString: same notation, but no -0
        return str(value.copy_abs() if value.is_zero() else value)
    raise MalformedFrameError("JSON header: extFields values must be scalars")


def _language(header: dict[str, Any]) -> str:
    language = header.get("language", "JAVA")
    if isinstance(language, str):
        return language
    if type(language) in (int, _NegativeZero) and language in _LANGUAGE_NAMES:
        return _LANGUAGE_NAMES[language]  # fastjson: the enum by ordinal, nothing else
    raise MalformedFrameError("JSON header: bad language")


class _HeaderFields(TypedDict):
    """A decoded header: RemotingCommand's fields, whichever serialize type they came in.
    Built as dict displays: calling a TypedDict class costs about three times as much."""

    code: int
    language: str
    version: int
    opaque: int
    flag: int
    remark: str | None
    ext_fields: dict[str, str]


def _decode_json_header(raw: bytes) -> _HeaderFields:
    decoder = _JSON if b"-0" in raw else _JSON_NO_NEGATIVE_ZERO
    try:
        header = decoder.decode(_str(raw, "JSON header"))
    except (ValueError, RecursionError):
        raise MalformedFrameError("JSON header is not valid JSON") from None
    if not isinstance(header, dict):
        raise MalformedFrameError("JSON header is not an object")
    language = _language(header)
    remark = header.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise MalformedFrameError("JSON header: bad remark")
    ext = header.get("extFields")
    ext = {} if ext is None else ext  # fastjson refuses [], "", 0, false here: so do we
    if not isinstance(ext, dict):
        raise MalformedFrameError("JSON header: extFields is not an object")
    return {
        "code": _int_field(header, "code", _INT32),
        "language": language,
        "version": _int_field(header, "version", _INT32),
        "opaque": _int_field(header, "opaque", _INT32),
        "flag": _int_field(header, "flag", _INT32),
        "remark": remark,
        "ext_fields": {k: _ext_value(v) for k, v in ext.items() if v is not None},
    }


# A client repeats the same header but for the opaque (a topic's route asked again and
# again): decoded headers are kept by their bytes without the opaque's digits. Only headers
# the key determines: a positive opaque written plainly, once (`"opaque"` occurs once), and
# no backslash anywhere (no escaped key can be another "opaque"). Then two headers with one
# key differ in the opaque's digits only, and decode alike but for it.
_OPAQUE = re.compile(rb'"opaque":([1-9][0-9]{0,9})(?=[,}])')
_HEADERS: dict[bytes, _HeaderFields] = {}
MAX_KEPT_HEADERS = 4096  # a bound, not a policy: emptied when full


def _decode_json_header_kept(raw: bytes) -> _HeaderFields:
    match = _OPAQUE.search(raw)
    if match is None:
        return _decode_json_header(raw)
    start, end = match.span(1)
    key = raw[:start] + raw[end:]
    kept = _HEADERS.get(key)
    if kept is None:
        # Checked before a header is kept, and true of any header with a kept one's key:
        # the key is the header but for digits, which hold no backslash and cannot make
        # or unmake an `"opaque"`.
        if b"\\" in raw or raw.count(b'"opaque"') != 1:
            return _decode_json_header(raw)
        kept = _decode_json_header(raw)  # a bad header raises: nothing kept
        if kept["opaque"] != int(match[1]):  # not the top-level field after all (or out of range)
            return kept
        if len(_HEADERS) >= MAX_KEPT_HEADERS:
            _HEADERS.clear()
        _HEADERS[key] = kept
    fields = kept.copy()
    fields["opaque"] = int(raw[start:end])
    fields["ext_fields"] = kept["ext_fields"].copy()
    return fields


def _decode_binary_header(raw: bytes) -> _HeaderFields:
    if len(raw) < _FIXED.size + 8:
        raise MalformedFrameError("ROCKETMQ header too short")
    code, language, version, opaque, flag = _FIXED.unpack_from(raw)
    pos = _FIXED.size

    def take(length: int, what: str) -> bytes:
        nonlocal pos
        if length < 0 or pos + length > len(raw):
            raise MalformedFrameError(f"ROCKETMQ header: bad {what} length {length}")
        pos += length
        return raw[pos - length : pos]

    def read_int(what: str) -> int:
        value: int = _INT.unpack(take(4, what))[0]
        return value

    remark_len = read_int("remark")
    remark = _str(take(remark_len, "remark"), "remark") if remark_len else None
    ext_len = read_int("extFields")
    ext_end = pos + ext_len
    if ext_len < 0 or ext_end > len(raw):
        raise MalformedFrameError(f"ROCKETMQ header: bad extFields length {ext_len}")
    ext: dict[str, str] = {}
    while pos < ext_end:
        key_len = _SHORT.unpack(take(2, "extFields key"))[0]
        key = take(key_len, "extFields key")
        val_len = read_int("extFields value")
        val = take(val_len, "extFields value")
        if pos > ext_end:
            raise MalformedFrameError("ROCKETMQ header: extFields overrun")
        if key and val:  # Java reads a zero length as null; a null key or value is dropped
            ext[_str(key, "extFields key")] = _str(val, "extFields value")
    return {
        "code": code,
        "language": _LANGUAGE_NAMES.get(language, "OTHER"),
        "version": version,
        "opaque": opaque,
        "flag": flag,
        "remark": remark,
        "ext_fields": ext,
    }


def decode_frame(frame: bytes) -> RemotingCommand:
    """One frame without its 4-byte length prefix."""
    if len(frame) < 4:
        raise MalformedFrameError(f"frame of {len(frame)} bytes has no header length")
    mark = _INT.unpack_from(frame)[0]
    header_len, kind = mark & 0xFFFFFF, (mark >> 24) & 0xFF
    if header_len > len(frame) - 4:
        raise MalformedFrameError(f"bad header length {header_len}")
    raw = frame[4 : 4 + header_len]
    fields: dict[str, Any]
    if kind == 0:  # SerializeType.JSON
        fields = _decode_json_header_kept(raw)  # type: ignore[assignment]
        fields["serialize_type"] = SerializeType.JSON
    elif kind == 1:  # SerializeType.ROCKETMQ
        fields = _decode_binary_header(raw)  # type: ignore[assignment]
        fields["serialize_type"] = SerializeType.ROCKETMQ
    else:
        raise MalformedFrameError(f"unknown serialize type {kind}")
    fields["body"] = frame[4 + header_len :]
    fields["frame_bytes"] = len(frame) + 4
    return _built(fields)


def decode(data: bytes) -> RemotingCommand:
    """Exactly one whole frame, length prefix included."""
    decoder = FrameDecoder(max_frame_bytes=max(len(data), 8))
    commands = decoder.feed(data)
    if len(commands) != 1 or decoder.buffered or decoder.error is not None:
        raise MalformedFrameError("not exactly one frame")
    return commands[0]


class FrameDecoder:
    """Incremental: feed() bytes as they arrive, get the complete commands back.

    The limit counts the whole frame with its length prefix (Netty's
    LengthFieldBasedFrameDecoder) and is checked as soon as the prefix is in, so an oversize
    frame is refused before its bytes are buffered. After an error the decoder stays failed.
    Frames decoded before a bad one in the same feed() are returned (a server answers them,
    as Netty passes them on before the exception); the error is then in `error` and raised by
    the next feed(). A feed() that decodes nothing before the bad frame raises at once.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 8:
            raise ValueError("max_frame_bytes must be at least 8")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0
        self.error: RemotingCodecError | None = None

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> list[RemotingCommand]:
        if self.error is not None:
            raise self.error
        commands: list[RemotingCommand] = []
        if not self._buf:
            if type(data) is not bytes:  # frames are sliced out as keys: bytes, not views
                data = bytes(data)
            # Nothing held (a reader's usual case: whole frames per read): slice the frames
            # out of `data` itself, and keep only an incomplete tail.
            try:
                pos = self._whole_frames(data, commands)
            except RemotingCodecError as exc:
                self.error = exc
                if not commands:
                    raise
                return commands
            if pos < len(data):
                self._buf += data[pos:] if pos else data
            return commands
        self._buf += data
        try:
            while self.buffered >= 4:
                frame = self._next_frame()
                if frame is None:
                    break
                commands.append(decode_frame(frame))
        except RemotingCodecError as exc:
            self.error = exc
            del self._buf[:]  # nothing after a bad frame is ever read: free it now
            self._pos = 0
            if not commands:
                raise
        finally:
            if self._pos:  # compact what was consumed; keeps feed() linear overall
                del self._buf[: self._pos]
                self._pos = 0
        return commands

    def _whole_frames(self, data: bytes, commands: list[RemotingCommand]) -> int:
        """Decode the whole frames at the start of `data` into `commands`: where the first
        incomplete one begins (the same checks as _next_frame)."""
        pos, end, limit = 0, len(data), self.max_frame_bytes
        unpack = _INT.unpack_from
        while end - pos >= 4:
            length = unpack(data, pos)[0]
            if length < 0:
                raise MalformedFrameError(f"negative frame length {length}")
            if length + 4 > limit:
                raise FrameTooLargeError(f"frame of {length + 4} bytes exceeds {limit}")
            start = pos + 4
            if end - start < length:
                break
            pos = start + length
            commands.append(decode_frame(data[start:pos]))
        return pos

    def _next_frame(self) -> bytes | None:
        """The next whole frame (prefix stripped), or None while it is incomplete."""
        length = _INT.unpack_from(self._buf, self._pos)[0]
        if length < 0:
            raise MalformedFrameError(f"negative frame length {length}")
        if length + 4 > self.max_frame_bytes:
            raise FrameTooLargeError(f"frame of {length + 4} bytes exceeds {self.max_frame_bytes}")
        if self.buffered < 4 + length:
            return None
        start = self._pos + 4
        self._pos = start + length
        with memoryview(self._buf) as view:  # released before the buffer is compacted
            return view[start : self._pos].tobytes()
