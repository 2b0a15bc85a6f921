"""The one typed loader for the defaults (routing_lib/defaults/routelake.toml, package data;
conf/routelake.toml links to it) + ROUTELAKE_* environment overrides."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = Path(__file__).resolve().parent / "defaults" / "routelake.toml"


@dataclass(frozen=True)
class RoutesConfig:
    watermark_delay_ms: int
    max_future_skew_ms: int
    backfill_allow_future_events: bool
    delete_topic_with_broker_registration: bool
    support_acting_master: bool
    history: bool
    order_message_enable: bool


@dataclass(frozen=True)
class SparkConfig:
    master: str
    shuffle_partitions: int
    jars_dir: str
    content_min_chars: int
    content_io_attempts: int
    content_io_backoff_s: float
    content_gc_every_batches: int
    content_gc_grace_s: float


@dataclass(frozen=True)
class PathsConfig:
    warehouse: str
    checkpoint: str


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str
    topic: str
    starting_offsets: str
    max_offsets_per_trigger: int
    min_partitions: int
    trigger_interval: str
    data_dir: str
    outage_timeout_s: float


@dataclass(frozen=True)
class ServeConfig:
    host: str
    port: int
    http_port: int
    poll_interval_s: float
    max_frame_bytes: int
    collector_max_frame_bytes: int
    max_connections: int
    request_timeout_s: float
    idle_timeout_s: float
    http_keepalive_timeout_s: float
    http_max_request_line_bytes: int
    http_max_header_bytes: int
    http_max_headers: int
    http_max_body_bytes: int
    max_watermark_age_s: float


@dataclass(frozen=True)
class CollectorConfig:
    port: int
    http_port: int
    collector_id: str
    tick_interval_ms: int
    publish_timeout_ms: int
    warehouse: str
    admin_allow: list[str]


@dataclass(frozen=True)
class TlsConfig:
    mode: str
    http_mode: str
    cert_path: str
    key_path: str
    key_password: str
    client_auth: str
    trust_cert_path: str


@dataclass(frozen=True)
class Config:
    routes: RoutesConfig
    spark: SparkConfig
    paths: PathsConfig
    kafka: KafkaConfig
    serve: ServeConfig
    collector: CollectorConfig
    tls: TlsConfig

    def with_overrides(self, section: str, **values: Any) -> Config:
        """A copy with some keys of one section replaced (None values are ignored)."""
        values = {k: v for k, v in values.items() if v is not None}
        return replace(self, **{section: replace(getattr(self, section), **values)})


def _coerce(raw: str, like: Any) -> Any:
    if isinstance(like, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(like, list):  # comma-separated
        return [part.strip() for part in raw.split(",") if part.strip()]
    return type(like)(raw)


def _section(cls: type, values: dict[str, Any], section: str) -> Any:
    out = {}
    for f in fields(cls):
        if f.name not in values:
            raise ValueError(f"config: [{section}] {f.name} is missing")
        value = values[f.name]
        env = os.environ.get(f"ROUTELAKE_{section}_{f.name}".upper())
        out[f.name] = _coerce(env, value) if env is not None else value
    return cls(**out)


def load_config(path: str | Path | None = None) -> Config:
    """Defaults from conf/routelake.toml; a `--config FILE` overrides any of its keys."""
    data = tomllib.loads(DEFAULT_CONFIG.read_text())
    if path is not None:
        try:
            override = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(f"cannot read config {path}: {exc}") from None
        for section, values in override.items():
            if section not in data:
                raise ValueError(f"config {path}: unknown section [{section}]")
            data[section].update(values)
    sections = {f.name: f.type for f in fields(Config)}
    classes = {
        "routes": RoutesConfig,
        "spark": SparkConfig,
        "paths": PathsConfig,
        "kafka": KafkaConfig,
        "serve": ServeConfig,
        "collector": CollectorConfig,
        "tls": TlsConfig,
    }
    assert set(sections) == set(classes)
    return Config(
        **{name: _section(cls, data.get(name, {}), name) for name, cls in classes.items()}
    )


def is_source_checkout() -> bool:
    """Running from the project's source tree (an editable install or jobs/*.py), not from an
    installed wheel (whose parent folder is site-packages)."""
    return (PROJECT_ROOT / "pyproject.toml").is_file() and (PROJECT_ROOT / "conf").is_dir()


def base_dir() -> Path:
    """What relative config paths are relative to: the project root in a source checkout (so
    `.work/...` and `.jars/...` mean the same from any cwd), else the current directory."""
    return PROJECT_ROOT if is_source_checkout() else Path.cwd()


def project_path(path: str) -> Path:
    """A config path: absolute as given, relative from base_dir()."""
    p = Path(path)
    return p if p.is_absolute() else base_dir() / p
