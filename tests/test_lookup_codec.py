"""RocketMQ remoting codec and fastjson-style bodies (pure Python, fast)."""

from __future__ import annotations

import json
import random
import struct

import pytest

from routing_lib.lookup import jsonbody
from routing_lib.remoting.frames import (
    RPC_ONEWAY,
    RPC_RESPONSE,
    FrameDecoder,
    FrameTooLargeError,
    MalformedFrameError,
    RemotingCodecError,
    RemotingCommand,
    SerializeType,
    decode,
    encode,
    encode_head,
)

BOTH = [SerializeType.JSON, SerializeType.ROCKETMQ]


def sample(kind: SerializeType, **over) -> RemotingCommand:
    fields = dict(
        code=105,
        language="JAVA",
        version=479,
        opaque=42,
        flag=0,
        remark="héllo ✓",
        ext_fields={"topic": "Orders", "acceptStandardJsonOnly": "true"},
        body=b"\x00\x01body\xff",
        serialize_type=kind,
    )
    fields.update(over)
    return RemotingCommand(**fields)


@pytest.mark.parametrize("kind", BOTH)
def test_round_trip(kind):
    for cmd in (
        sample(kind),
        sample(kind, remark=None, ext_fields={}, body=b""),
        sample(
            kind,
            code=-1000,
            opaque=-(2**31),
            flag=RPC_RESPONSE | RPC_ONEWAY,
            version=-1,
            language="GO",
        ),
    ):
        assert decode(encode(cmd)) == cmd


@pytest.mark.parametrize("kind", BOTH)
def test_frame_layout(kind):
    cmd = sample(kind)
    frame = encode(cmd)
    length, mark = struct.unpack(">ii", frame[:8])
    assert length == len(frame) - 4
    assert mark >> 24 == kind
    header_len = mark & 0xFFFFFF
    assert frame[8 + header_len :] == cmd.body


def test_rocketmq_binary_header_bytes():
    cmd = RemotingCommand(
        code=105,
        language="PYTHON",
        version=401,
        opaque=7,
        flag=2,
        remark="r",
        ext_fields={"topic": "T1"},
        serialize_type=SerializeType.ROCKETMQ,
    )
    ext = struct.pack(">h", 5) + b"topic" + struct.pack(">i", 2) + b"T1"
    header = (
        struct.pack(">hbhii", 105, 3, 401, 7, 2)
        + struct.pack(">i", 1)
        + b"r"
        + struct.pack(">i", len(ext))
        + ext
    )
    assert encode(cmd) == struct.pack(">ii", 4 + len(header), (1 << 24) | len(header)) + header


def test_json_header_is_fastjson_like():
    frame = encode(sample(SerializeType.JSON, body=b""))
    header = json.loads(frame[8:])
    assert list(header) == [
        "code",
        "extFields",
        "flag",
        "language",
        "opaque",
        "remark",
        "serializeTypeCurrentRPC",
        "version",
    ]
    assert header["language"] == "JAVA" and header["serializeTypeCurrentRPC"] == "JSON"


def test_json_header_from_other_clients():
    """Missing fields default, language by number, extFields scalars become strings."""
    header = b'{"code":106,"language":9,"extFields":{"n":1,"b":true,"x":null}}'
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    cmd = decode(frame)
    assert (cmd.code, cmd.language, cmd.opaque, cmd.flag) == (106, "GO", 0, 0)
    assert cmd.ext_fields == {"n": "1", "b": "true"}


def test_response_echoes_opaque_and_serialization():
    for kind in BOTH:
        request = sample(kind, opaque=99)
        response = request.response(17, "nope", version=479)
        assert response.is_response and not request.is_response
        assert response.opaque == 99 and response.serialize_type == kind
        assert decode(encode(response)) == response


def test_incremental_byte_by_byte():
    commands = [sample(SerializeType.JSON, opaque=i) for i in range(3)]
    commands += [sample(SerializeType.ROCKETMQ, opaque=i, body=b"x" * i) for i in range(3)]
    stream = b"".join(encode(c) for c in commands)
    decoder = FrameDecoder()
    out = []
    for i in range(len(stream)):
        out += decoder.feed(stream[i : i + 1])
    assert out == commands and decoder.buffered == 0


def test_oversize_refused_on_length_prefix():
    decoder = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(FrameTooLargeError):
        decoder.feed(struct.pack(">i", 1021))  # 1021 + 4 > 1024: refused before the body
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"more")  # stays failed
    ok = FrameDecoder(max_frame_bytes=1024)
    frame = encode(sample(SerializeType.JSON, body=b"b" * (1024 - 200)))
    assert len(frame) <= 1024 and ok.feed(frame)


@pytest.mark.parametrize(
    "frame, message",
    [
        (struct.pack(">i", -1), "negative"),
        (struct.pack(">i", 2) + b"ab", "no header length"),
        (struct.pack(">ii", 4, 10), "bad header length"),
        (struct.pack(">ii", 6, (7 << 24) | 2) + b"{}", "serialize type"),
        (struct.pack(">ii", 7, 3) + b"{x}", "not valid JSON"),
        (struct.pack(">ii", 6, 2) + b"[]", "not an object"),
        (struct.pack(">ii", 8, 4) + b"\xff\xfe{}", "not UTF-8"),
        (struct.pack(">ii", 15, 11) + b'{"code":"x"}'[:11], "not valid JSON"),
        (struct.pack(">ii", 16, 12) + b'{"code":1.5}', "bad code"),
        (struct.pack(">ii", 8, (1 << 24) | 4) + b"\x00" * 4, "too short"),
    ],
)
def test_malformed(frame, message):
    with pytest.raises(MalformedFrameError, match=message):
        FrameDecoder().feed(frame)


def test_malformed_binary_lengths():
    good = encode(sample(SerializeType.ROCKETMQ, body=b""))
    header = bytearray(good[8:])
    for offset, value in ((13, 10_000), (13, -5)):  # remark length: overrun / negative
        bad = bytearray(header)
        bad[offset : offset + 4] = struct.pack(">i", value)
        with pytest.raises(MalformedFrameError):
            decode(good[:8] + bytes(bad))


def _mutations(rng: random.Random, frames: list[bytes]) -> bytes:
    frame = bytearray(rng.choice(frames))
    choice = rng.randrange(5)
    if choice == 0:  # random bytes
        return bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 64)))
    if choice == 1:  # truncated
        return bytes(frame[: rng.randrange(len(frame))])
    if choice == 2:  # bit flips
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(frame))
            frame[i] ^= 1 << rng.randrange(8)
        return bytes(frame)
    if choice == 3:  # a random int written over the length or header-length field
        offset = rng.choice((0, 4, 8, 12, 17, 21))
        frame[offset : offset + 4] = struct.pack(">i", rng.randint(-(2**31), 2**31 - 1))
        return bytes(frame)
    cut = rng.randrange(len(frame))  # garbage inserted
    return bytes(frame[:cut]) + bytes(rng.getrandbits(8) for _ in range(8)) + bytes(frame[cut:])


def test_fuzz_decoder_only_raises_codec_errors():
    rng = random.Random(20240611)
    frames = [
        encode(sample(kind, opaque=i, ext_fields={"k": "v" * i, "topic": "T"}))
        for i in range(4)
        for kind in BOTH
    ]
    outcomes = {"ok": 0, "error": 0, "partial": 0}
    for _ in range(3000):
        data = _mutations(rng, frames)
        decoder = FrameDecoder(max_frame_bytes=4096)
        try:
            pos = 0
            while pos < len(data):  # random chunking: decoding must not depend on it
                step = rng.randrange(1, 64)
                for cmd in decoder.feed(data[pos : pos + step]):
                    assert isinstance(cmd, RemotingCommand)
                pos += step
            outcomes["partial" if decoder.buffered else "ok"] += 1
        except RemotingCodecError:
            outcomes["error"] += 1
    assert all(outcomes.values()), outcomes  # every path was exercised


def test_truncated_valid_frames_wait_for_more():
    for kind in BOTH:
        frame = encode(sample(kind))
        for cut in range(len(frame)):
            decoder = FrameDecoder()
            assert decoder.feed(frame[:cut]) == []
            assert decoder.feed(frame[cut:]) == [sample(kind)]


def test_encode_refuses_out_of_range_values():
    with pytest.raises(ValueError):
        encode(sample(SerializeType.ROCKETMQ, code=40000))
    with pytest.raises(ValueError):
        encode(sample(SerializeType.JSON, opaque=2**31))


# -- bodies --


def test_legacy_body_keeps_numeric_keys_bare():
    obj = {"brokerAddrs": {0: "10.0.0.1:10911", 12: "b"}, "name": "ü", "list": [1, {"a": None}]}
    assert (
        jsonbody.legacy(obj)
        == ('{"brokerAddrs":{0:"10.0.0.1:10911",12:"b"},"name":"ü","list":[1,{"a":null}]}').encode()
    )
    assert jsonbody.standard(obj) == (
        b'{"brokerAddrs":{"0":"10.0.0.1:10911","12":"b"},"name":"\\u00fc","list":[1,{"a":null}]}'
    )
    assert jsonbody.parse_legacy(jsonbody.legacy(obj)) == json.loads(jsonbody.standard(obj))


def test_parse_legacy_leaves_strings_alone():
    obj = {"s": '{0:"x",1:2}', 3: ["a,4:b"]}
    assert jsonbody.parse_legacy(jsonbody.legacy(obj)) == {"s": '{0:"x",1:2}', "3": ["a,4:b"]}


def test_templated_json_heads_equal_rendered_ones():
    """Answers without remark or extFields reuse their header text around the opaque: the
    same bytes as rendering the header, for any code, flag, language, version and opaque."""
    from routing_lib.remoting import frames

    rng = random.Random(3)
    for _ in range(2000):
        cmd = RemotingCommand(
            code=rng.choice([0, 1, 17, 22, -5, 2**31 - 1]),
            version=rng.choice([0, 479, -1]),
            opaque=rng.randint(-(2**31), 2**31 - 1),
            flag=rng.choice([0, 1, 3]),
            language=rng.choice(["JAVA", "PYTHON", 'x"y', "\u00e9"]),
            body=b"x" * rng.randint(0, 30),
        )
        header = frames._json_header(cmd)
        rendered = struct.pack(">ii", 4 + len(header) + len(cmd.body), len(header)) + header
        assert encode_head(cmd) == rendered
        assert decode(encode(cmd)) == cmd


def _json_frame(header: str) -> bytes:
    raw = header.encode()
    return struct.pack(">ii", 4 + len(raw), len(raw)) + raw


@pytest.mark.parametrize(
    "headers",
    [
        # the usual: a client asking again; the second is decoded from the kept header
        [
            '{"code":105,"extFields":{"topic":"T"},"flag":0,"opaque":11,"version":479}',
            '{"code":105,"extFields":{"topic":"T"},"flag":0,"opaque":12,"version":479}',
        ],
        # "opaque" only in extFields: not the top-level field, never decoded from a kept one
        [
            '{"code":105,"extFields":{"opaque":5},"flag":0}',
            '{"code":105,"extFields":{"opaque":7},"flag":0}',
        ],
        # an escaped top-level key beside a plain nested one: decoded in full each time
        [
            '{"\\u006fpaque":5,"code":105,"extFields":{"opaque":5}}',
            '{"\\u006fpaque":5,"code":105,"extFields":{"opaque":9}}',
        ],
        # two opaques (the last wins in JSON), a zero: decoded in full
        [
            '{"code":105,"opaque":3,"opaque":4}',
            '{"code":105,"opaque":0,"extFields":{"topic":"T"}}',
            '{"code":105,"opaque":1,"extFields":{"topic":"T"}}',
        ],
    ],
)
def test_kept_json_headers_decode_as_in_full(headers):
    """Headers decoded from a kept one (the same bytes but the opaque's digits) equal a
    full decode, and look-alikes where the digits are not the top-level opaque do too."""
    for header in headers:
        got = decode(_json_frame(header))
        parsed = json.loads(header)
        assert got.opaque == (parsed.get("opaque") or 0), header
        assert dict(got.ext_fields) == {
            k: str(v) for k, v in (parsed.get("extFields") or {}).items()
        }, header
        assert got.code == 105


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_whole_frames_then_a_tail_decode_alike_from_any_bytes_like(kind):
    """A read of whole frames and the start of the next (the decoder's fast path slices them
    out of the read itself) gives the same commands as the frames one by one."""
    frames = [
        encode(RemotingCommand(code=105, opaque=i, ext_fields={"topic": f"T{i}"}, body=b"x" * i))
        for i in range(1, 5)
    ]
    data = b"".join(frames)
    cut = len(data) - 7  # the last frame incomplete
    decoder = FrameDecoder()
    got = decoder.feed(kind(data[:cut]))
    assert [c.opaque for c in got] == [1, 2, 3] and decoder.buffered == len(frames[3]) - 7
    got += decoder.feed(kind(data[cut:]))
    assert got == [decode(f) for f in frames] and not decoder.buffered
    # a bad frame after good ones in one read: the good ones answered, then the error
    bad = FrameDecoder(max_frame_bytes=512)
    assert [c.opaque for c in bad.feed(frames[0] + struct.pack(">i", 1000))] == [1]
    with pytest.raises(FrameTooLargeError):
        bad.feed(b"")
