"""JSON bodies the way the NameServer's fastjson writes them.

Two forms exist on the wire (ClientRequestProcessor.getRouteInfoByTopic):
- legacy (`RemotingSerializable.encode()`, fastjson defaults): a map with non-string keys keeps
  them bare, e.g. `"brokerAddrs":{0:"10.0.0.1:10911"}` (not standard JSON, fastjson reads it);
- standard (BrowserCompatible + MapSortField, sent to clients >= V4_9_4 or asking for
  `acceptStandardJsonOnly`): keys quoted, non-ASCII escaped as \\uXXXX.
Callers build dicts in fastjson's order (bean fields alphabetical, maps sorted, None values
left out) and integer keys where Java has Long keys; this module only renders.
"""

from __future__ import annotations

import json
from typing import Any

_COMPACT = (",", ":")


def standard(obj: Any) -> bytes:
    # json.dumps quotes int keys itself and keeps the dicts' insertion order.
    return json.dumps(obj, separators=_COMPACT, ensure_ascii=True).encode()


def legacy(obj: Any) -> bytes:
    return _legacy(obj).encode()


def _legacy(obj: Any) -> str:
    if isinstance(obj, dict):
        return "{" + ",".join(f"{_legacy_key(k)}:{_legacy(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list | tuple):
        return "[" + ",".join(_legacy(v) for v in obj) + "]"
    return json.dumps(obj, ensure_ascii=False)


def _legacy_key(key: Any) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    return json.dumps(str(key), ensure_ascii=False)


def parse_legacy(data: bytes) -> Any:
    """Read a legacy body back (tests, clients): bare integer keys become strings."""
    return json.loads(_quote_bare_keys(data.decode()))


def _quote_bare_keys(text: str) -> str:
    out, i, in_str = [], 0, False
    while i < len(text):
        ch = text[i]
        if in_str:
            out.append(ch)
            if ch == "\\":
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            out.append(ch)
        elif ch in "{," and i + 1 < len(text) and (text[i + 1].isdigit() or text[i + 1] == "-"):
            j = i + 1
            while j < len(text) and (text[j].isdigit() or text[j] == "-"):
                j += 1
            if j < len(text) and text[j] == ":":
                out.append(f'{ch}"{text[i + 1 : j]}"')
                i = j
                continue
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)
