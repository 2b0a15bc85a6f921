"""deploy/ cannot run here (no Kubernetes, no Docker daemon): these tests check what
can be checked without them. Every manifest parses; every routectl command line in them parses
with routectl's own parser; every ROUTELAKE_* variable and ConfigMap key is a real setting;
ports, probes, scrape annotations and Services agree with what each process listens on under
that configuration; the Dockerfile copies files that exist and provides the job entry file the
SparkApplication runs."""

from __future__ import annotations

import argparse
import os
import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath

import pytest
import yaml

from routing_lib import jobs
from routing_lib.cli import build_parser
from routing_lib.config import DEFAULT_CONFIG, Config, load_config

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
MANIFESTS = sorted(K8S.glob("*.yaml"))
CONFIG_MAP = "routelake-config"
IMAGE = "routelake"


def load_all() -> dict[str, list[dict]]:
    return {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d] for p in MANIFESTS}


def resources(kind: str) -> list[dict]:
    return [d for docs in load_all().values() for d in docs if d.get("kind") == kind]


def config_map_files() -> dict[str, str]:
    (cm,) = [d for d in resources("ConfigMap") if d["metadata"]["name"] == CONFIG_MAP]
    return cm["data"]


def env_read_in_code() -> set[str]:
    """ROUTELAKE_* names the code reads literally (besides the config's SECTION_KEY ones)."""
    names: set[str] = set()
    for path in (REPO / "routing_lib").rglob("*.py"):
        names |= set(re.findall(r'"(ROUTELAKE_[A-Z0-9_]+)"', path.read_text()))
    return names


def config_env_names() -> dict[str, tuple[str, str]]:
    """ROUTELAKE_<SECTION>_<KEY> -> (section, key), for every setting of the config."""
    config = load_config()
    return {
        f"ROUTELAKE_{section.name}_{key.name}".upper(): (section.name, key.name)
        for section in fields(Config)
        for key in fields(getattr(config, section.name))
    }


@dataclass(frozen=True)
class Process:
    """One routectl process of the manifests: its command line, environment and mounts."""

    where: str
    argv: list[str]  # routectl's arguments (subcommand first)
    env: dict[str, str]
    config_dirs: dict[str, str]  # mount path -> ConfigMap name
    pod: dict  # the container (Deployments) or the driver spec (SparkApplication)


def processes() -> list[Process]:
    found = []
    for deployment in resources("Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v.get("configMap", {}).get("name") for v in spec.get("volumes", [])}
        for container in spec["containers"]:
            argv = [*container.get("command", []), *container.get("args", [])]
            assert argv[0] == "routectl", f"{deployment['metadata']['name']}: {argv}"
            mounts = {
                m["mountPath"]: volumes[m["name"]]
                for m in container.get("volumeMounts", [])
                if volumes.get(m["name"])
            }
            env = {e["name"]: e["value"] for e in container.get("env", [])}
            found.append(Process(deployment["metadata"]["name"], argv[1:], env, mounts, container))
    for app in resources("SparkApplication"):
        spec = app["spec"]
        job = PurePosixPath(spec["mainApplicationFile"].removeprefix("local://")).stem
        assert job in jobs.JOBS
        command = {"route_state": "run", "backfill": "backfill"}[job]
        # The driver runs routectl; executors run its Python functions with the driver's
        # settings (shipped in the closures), so they load no config.
        pod = spec["driver"]
        env = {e["name"]: e["value"] for e in pod.get("env", [])}
        mounts = {c["path"]: c["name"] for c in pod.get("configMaps", [])}
        found.append(
            Process(
                f"{app['metadata']['name']}/driver",
                [command, *spec.get("arguments", [])],
                env,
                mounts,
                pod,
            )
        )
    return found


def executor_env() -> set[str]:
    return {
        e["name"]
        for app in resources("SparkApplication")
        for e in app["spec"]["executor"].get("env", [])
    }


def parse(process: Process) -> argparse.Namespace:
    try:
        return build_parser().parse_args(process.argv)
    except SystemExit as exc:  # argparse's answer to an unknown subcommand or flag
        raise AssertionError(f"{process.where}: routectl rejects {process.argv}") from exc


def effective_config(process: Process, monkeypatch, tmp_path: Path) -> Config:
    """The configuration this process would load: its --config file (from the ConfigMap it
    mounts) and its ROUTELAKE_* variables over the packaged defaults."""
    args = parse(process)
    path = None
    if args.config:
        mount, name = str(PurePosixPath(args.config).parent), PurePosixPath(args.config).name
        assert process.config_dirs.get(mount) == CONFIG_MAP, f"{process.where}: {args.config}"
        path = tmp_path / name
        path.write_text(config_map_files()[name])
    with monkeypatch.context() as patched:
        for name in [n for n in os.environ if n.startswith("ROUTELAKE_")]:
            patched.delenv(name)
        for name, value in process.env.items():
            patched.setenv(name, value)
        return load_config(path)


def test_every_manifest_parses_and_kustomization_lists_them():
    docs = load_all()
    assert len(MANIFESTS) >= 6
    for name, items in docs.items():
        assert items, name
        for doc in items:
            if name == "kustomizeconfig.yaml":
                continue
            assert doc.get("apiVersion") and doc.get("kind"), name
            if doc["kind"] != "Kustomization":
                assert doc["metadata"]["name"], name
    (kustomization,) = docs["kustomization.yaml"]
    listed = set(kustomization["resources"]) | set(kustomization.get("configurations", []))
    assert listed == {p.name for p in MANIFESTS} - {"kustomization.yaml"}
    kinds = {d["kind"] for items in docs.values() for d in items if "kind" in d}
    assert {"SparkApplication", "Deployment", "Service", "ConfigMap"} <= kinds
    (app,) = resources("SparkApplication")
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2" and app["spec"]["type"] == "Python"
    replicas = {d["metadata"]["name"]: d["spec"]["replicas"] for d in resources("Deployment")}
    assert replicas["routelake-lookup"] == 3


def test_every_image_is_the_one_kustomize_rewrites():
    images = [
        c["image"]
        for d in resources("Deployment")
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    images += [a["spec"]["image"] for a in resources("SparkApplication")]
    assert images and set(images) == {IMAGE}
    (kustomization,) = load_all()["kustomization.yaml"]
    assert [i["name"] for i in kustomization["images"]] == [IMAGE]
    (rewrite,) = load_all()["kustomizeconfig.yaml"]
    assert rewrite["images"] == [{"path": "spec/image", "kind": "SparkApplication"}]


def test_every_routectl_command_line_parses():
    seen = set()
    for process in processes():
        args = parse(process)
        seen.add(args.command)
    assert {"serve", "collect", "run"} <= seen


def test_config_map_keys_are_settings_and_load():
    defaults = tomllib.loads(DEFAULT_CONFIG.read_text())
    for name, text in config_map_files().items():
        overrides = tomllib.loads(text)
        for section, values in overrides.items():
            assert section in defaults, f"{name}: [{section}]"
            unknown = set(values) - set(defaults[section])
            assert not unknown, f"{name}: [{section}] has no {sorted(unknown)}"


def test_every_routelake_env_var_is_a_setting(monkeypatch, tmp_path):
    settings = config_env_names()
    known = set(settings) | env_read_in_code()
    names = {name for p in processes() for name in p.env} | executor_env()
    used = {name for name in names if name.startswith("ROUTELAKE_")}
    assert used, "the manifests set some ROUTELAKE_* variables"
    assert used <= known, sorted(used - known)
    for process in processes():
        config = effective_config(process, monkeypatch, tmp_path)  # coerces every value
        for name, value in process.env.items():
            if name in settings:
                section, key = settings[name]
                assert str(getattr(getattr(config, section), key)) == value, name


def _ports(spec: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in spec.get("ports", [])}


def test_ports_probes_and_scraping_match_what_each_process_listens_on(monkeypatch, tmp_path):
    deployments = {d["metadata"]["name"]: d for d in resources("Deployment")}
    checked = set()
    for process in processes():
        args = parse(process)
        config = effective_config(process, monkeypatch, tmp_path)
        if args.command == "run":
            if process.where.endswith("/driver"):
                annotations = process.pod["annotations"]
                assert annotations["prometheus.io/scrape"] == "true"
                assert int(annotations["prometheus.io/port"]) == args.metrics_port
                assert annotations["prometheus.io/path"] == "/metrics"
                assert config.serve.host == "0.0.0.0"  # Prometheus scrapes the pod IP
                assert config.spark.master == ""  # spark-submit's (the operator's) master
                checked.add("run")
            continue
        if args.command == "serve":
            remoting = args.port or config.serve.port
            http = args.http_port or config.serve.http_port
        else:
            assert args.command == "collect"
            remoting = config.collector.port if args.port is None else args.port
            http = config.collector.http_port
            assert http, "the collector needs [collector] http_port for its probes"
        assert config.serve.host == "0.0.0.0", f"{process.where} listens on loopback only"
        ports = _ports(process.pod)
        assert ports == {"remoting": remoting, "http": http}, process.where
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            get = process.pod[probe]["httpGet"]
            assert get["path"] == path and ports[get["port"]] == http, process.where
        template = deployments[process.where]["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert int(annotations["prometheus.io/port"]) == http
        assert annotations["prometheus.io/path"] == "/metrics"
        checked.add(args.command)
    assert checked == {"run", "serve", "collect"}


def test_services_select_pods_and_target_named_ports():
    deployments = resources("Deployment")
    for service in resources("Service"):
        selector = service["spec"]["selector"]
        (target,) = [
            d
            for d in deployments
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert target["spec"]["selector"]["matchLabels"].items() <= selector.items()
        (container,) = target["spec"]["template"]["spec"]["containers"]
        ports = _ports(container)
        for port in service["spec"]["ports"]:
            assert ports[port["targetPort"]] == port["port"], service["metadata"]["name"]


def test_dockerfile_copies_existing_files_and_provides_the_job_files():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for line in dockerfile.splitlines():
        words = line.split()
        if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
            continue
        for source in words[1:-1]:
            assert (REPO / source).exists(), f"Dockerfile copies missing {source}"
            assert source.rstrip("/") in allowed, f"{source} is excluded by the dockerignore"
    assert "FROM python:3.11" in dockerfile and "openjdk-17-jre" in dockerfile
    # The wheel stage gets every package the wheel is built from (pyproject's package list).
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in {pattern.rstrip("*").rstrip(".") for pattern in include}:
        assert f"COPY {package} {package}" in dockerfile, f"the image's wheel lacks {package}"
    (app,) = resources("SparkApplication")
    main = PurePosixPath(app["spec"]["mainApplicationFile"].removeprefix("local://"))
    # The Dockerfile links /opt/routelake/jobs/<job>.py to `routectl job-path <job>`.
    assert str(main.parent) == "/opt/routelake/jobs" and main.stem in jobs.JOBS
    match = re.search(r"for job in ([a-z_ ]+); do", dockerfile)
    assert match and main.stem in match.group(1).split()
    assert 'routectl job-path "$job"' in dockerfile
    assert set(match.group(1).split()) == set(jobs.JOBS)


def test_spark_class_paths_hold_the_image_jars():
    """spark-submit starts the driver JVM before the session builder adds spark.jars: the
    Delta / Kafka / S3A jars the image holds must be on both class paths from the start."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    jars_dir = re.search(r"ROUTELAKE_SPARK_JARS_DIR=(\S+)", dockerfile).group(1)
    s3_dir = re.search(r"COPY \.jars/s3/ (\S+)", dockerfile).group(1).rstrip("/")
    assert str(PurePosixPath(jars_dir).parent / "s3") == s3_dir  # where routelake looks for S3A
    (app,) = resources("SparkApplication")
    conf = app["spec"]["sparkConf"]
    for role in ("driver", "executor"):
        entries = conf[f"spark.{role}.extraClassPath"].split(":")
        assert f"{jars_dir}/*" in entries and f"{s3_dir}/*" in entries, role


@pytest.mark.parametrize("job", jobs.JOBS)
def test_job_path_names_the_entry_file(job, capsys):
    from routing_lib.cli import main

    assert main(["job-path", job]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path == REPO / "routing_lib" / "jobs" / "submit" / f"{job}.py" and path.is_file()
