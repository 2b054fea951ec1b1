"""deploy/: the compose deployment, checked without Docker.

The compose file cannot be run here (no image registry, no Docker daemon), so these tests
check what can be checked from the files themselves: the services and their images, the
worker's configuration against what streamdet really reads and parses, every mounted
path, and that Prometheus and Grafana point at what the compose file mounts and exposes.
Compose `${VAR...}` interpolation is done here the way Compose does it.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from streamdet.engine.params import FOREIGN_MODES
from streamdet.engine.records import DEFAULT_MAX_BODY

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
ENV_EXAMPLE = DEPLOY / ".env.example"
README = DEPLOY / "README.md"
SERVICES = {"kafka", "worker", "prometheus", "grafana"}

# --- Compose interpolation ----------------------------------------------------------------

_REF = re.compile(r"\$(?:(?P<dollar>\$)|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                  r"(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


def _interpolate(text: str, env: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        if m["dollar"]:
            return "$"
        name = m["name"] or m["bare"]
        op, arg = m["op"], m["arg"] or ""
        value = env.get(name)
        empty = value is None or (value == "" and op is not None and op.startswith(":"))
        if op in (":-", "-"):
            return arg if empty else value
        if op in (":?", "?"):
            if empty:
                raise ValueError(f"{name} is required: {arg}")
            return value
        if op in (":+", "+"):
            return "" if empty else arg
        return value or ""

    return _REF.sub(one, text)


def _walk(node, fn):
    """Apply fn to every string value (not keys) of a YAML tree, as Compose does."""
    if isinstance(node, dict):
        return {k: _walk(v, fn) for k, v in node.items()}
    if isinstance(node, list):
        return [_walk(v, fn) for v in node]
    if isinstance(node, str):
        return fn(node)
    return node


def _raw() -> dict:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def _references() -> list[re.Match]:
    refs: list[re.Match] = []
    _walk(_raw(), lambda s: refs.extend(m for m in _REF.finditer(s) if not m["dollar"]))
    return refs


def _env_example() -> dict[str, str]:
    env = {}
    for n, line in enumerate(ENV_EXAMPLE.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert "=" in line, f".env.example line {n} is not NAME=VALUE: {line!r}"
        name, value = line.split("=", 1)
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name), f"bad name on line {n}: {name!r}"
        assert name not in env, f".env.example sets {name} twice"
        env[name] = value
    return env


SECRETS = {"GRAFANA_ADMIN_PASSWORD": "a-password"}  # required: no default on purpose


def _compose(env: dict[str, str] | None = None) -> dict:
    """The compose file with every ${VAR} resolved: defaults, the required secrets, and
    env when given."""
    return _walk(_raw(), lambda s: _interpolate(s, {**SECRETS, **(env or {})}))


def _environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _mounts(service: dict) -> list[tuple[str, str | None, str]]:
    """(kind, source, target) per volume: kind bind, volume (named) or anonymous."""
    out = []
    for v in service.get("volumes") or []:
        if isinstance(v, dict):
            kind, source, target = v.get("type", "volume"), v.get("source"), v["target"]
            if kind == "volume" and not source:
                kind = "anonymous"
        else:
            parts = v.split(":")
            if len(parts) == 1:
                kind, source, target = "anonymous", None, parts[0]
            else:
                source, target = parts[0], parts[1]
                kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        out.append((kind, source, target))
    return out


def _bind_source(service: dict, target: str) -> Path:
    for kind, source, tgt in _mounts(service):
        if kind == "bind" and tgt == target:
            return (DEPLOY / source).resolve()
    raise AssertionError(f"nothing is mounted at {target}")


def _pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    name, _, tag = image.rpartition(":")
    return bool(name) and "/" not in tag and tag not in ("", "latest")


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """KAFKA_LISTENERS-style 'NAME://host:port,...' as {NAME: (host, port)}."""
    out = {}
    for item in value.split(","):
        name, _, hostport = item.strip().partition("://")
        host, _, port = hostport.rpartition(":")
        out[name] = (host, int(port))
    return out


# --- Dockerfile -----------------------------------------------------------------------------


def _dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        instr, _, rest = full.partition(" ")
        out.append((instr.upper(), rest.strip()))
    assert not pending, f"{path} ends in a continuation line"
    return out


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"not exec form: {args}"
    return value


# --- what streamdet reads -------------------------------------------------------------------


def _variables_read() -> set[str]:
    """Every STREAMDET_* name the code reads: literal names (os.environ.get("STREAMDET_X"))
    and the calls of streamdet/console.py's env("X"), int_env("X") and env_as("X", ...),
    which add the prefix."""
    names = set()
    for path in (ROOT / "streamdet").rglob("*.py"):
        src = path.read_text(encoding="utf-8")
        names |= {f"STREAMDET_{n}" for n in re.findall(r"[\"']STREAMDET_([A-Z0-9_]+)[\"']", src)}
        helper_call = r"\b(?:int_env|env_as|env)\(\s*[\"'](?!STREAMDET_)([A-Z0-9_]+)[\"']"
        names |= {f"STREAMDET_{n}" for n in re.findall(helper_call, src)}
    return names


_PROBE = """
import json, sys
from dataclasses import asdict
from streamdet.cli import build_parser
from streamdet.adapters.kafka import Timing
args = build_parser().parse_args(["worker"])
print(json.dumps({"args": vars(args), "timing": asdict(Timing())}, default=repr))
"""


def _worker_settings(env: dict[str, str]) -> dict:
    """What `streamdet worker` ends up with, in a fresh interpreter whose only STREAMDET_*
    variables are `env` (the Timing defaults are read when streamdet.adapters.kafka is
    imported, so this cannot run in the test process)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("STREAMDET_")}
    proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# --- tests ----------------------------------------------------------------------------------


def test_services_have_a_pinned_image_or_a_build():
    services = _compose()["services"]
    assert set(services) == SERVICES
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, f"{name}: neither image nor build"
        if "image" in svc:
            assert _pinned(svc["image"]), f"{name}: image {svc['image']} is not pinned"
        if "build" in svc:
            build = svc["build"] if isinstance(svc["build"], dict) else {"context": svc["build"]}
            context = (DEPLOY / build["context"]).resolve()
            assert context.is_dir(), f"{name}: build context {context} missing"
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
    for name in ("kafka", "prometheus", "grafana"):
        assert "image" in services[name]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")


def test_env_example_covers_every_compose_variable():
    refs = _references()
    used = {m["name"] or m["bare"] for m in refs}
    example = _env_example()
    assert used, "the compose file has no tunables"
    assert not used - set(example), f"missing from .env.example: {sorted(used - set(example))}"
    assert not set(example) - used, f"not used by the compose file: {sorted(set(example) - used)}"
    no_default = sorted({m["name"] or m["bare"] for m in refs if m["op"] != ":-"})
    assert no_default == sorted(SECRETS), f"tunables without a ${{VAR:-default}}: {no_default}"
    # Copying .env.example to .env changes nothing but the secrets it leaves to fill in.
    assert all(example[name] == "" for name in SECRETS)
    assert _compose({**example, **SECRETS}) == _compose()


def test_published_ports_are_local_and_grafana_needs_a_login():
    """Nothing listens beyond the host's loopback unless BIND_ADDRESS says so; Grafana
    has no anonymous access and no default password."""
    services = _compose()["services"]
    for name in ("kafka", "prometheus", "grafana"):
        for port in services[name]["ports"]:
            assert port.startswith("127.0.0.1:"), (name, port)
    for port in _compose({"BIND_ADDRESS": "0.0.0.0"})["services"]["grafana"]["ports"]:
        assert port.startswith("0.0.0.0:")
    assert "ports" not in services["worker"]
    grafana = _environment(services["grafana"])
    assert grafana["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    with pytest.raises(ValueError, match="GRAFANA_ADMIN_PASSWORD is required"):
        _walk(_raw(), lambda s: _interpolate(s, {}))


def test_dockerfile_builds_the_worker_image():
    build = _compose()["services"]["worker"]["build"]
    context = (DEPLOY / build["context"]).resolve()
    assert context == ROOT
    dockerfile = context / build["dockerfile"]
    assert dockerfile == DEPLOY / "Dockerfile"
    steps = _dockerfile(dockerfile)
    args: dict[str, str] = {}
    stages: set[str] = set()
    froms = []
    for instr, rest in steps:
        if instr == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            args[name] = value
        elif instr == "FROM":
            words = rest.split()
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m[1], ""), words[0])
            assert image in stages or _pinned(image), f"FROM {rest}: not pinned"
            froms.append(image)
            if len(words) == 3 and words[1].upper() == "AS":
                stages.add(words[2])
    assert froms[-1].startswith("python:3.11-slim"), froms
    # Everything COPY takes from the build context exists in it.
    for instr, rest in steps:
        if instr == "COPY" and "--from=" not in rest:
            for src in rest.split()[:-1]:
                assert (context / src).exists(), f"COPY {src}: not in the build context"
    final = steps[max(i for i, (instr, _) in enumerate(steps) if instr == "FROM"):]
    last = {instr: rest for instr, rest in final}
    assert any(instr == "RUN" and "pip install" in rest for instr, rest in final)
    assert last.get("USER") not in (None, "root", "0"), "the image must not run as root"
    assert _exec_form(last["ENTRYPOINT"]) == ["streamdet"]
    assert _exec_form(last["CMD"]) == ["worker"]
    volumes = last["VOLUME"]
    volumes = _exec_form(volumes) if volumes.startswith("[") else volumes.split()
    assert volumes == ["/var/lib/streamdet"]
    exposed = {p.split("/")[0] for p in last["EXPOSE"].split()}
    worker_env = _environment(_compose()["services"]["worker"])
    assert worker_env["STREAMDET_PORT"] in exposed


def test_kafka_is_a_kraft_node_the_workers_can_reach():
    services = _compose()["services"]
    kafka = services["kafka"]
    env = _environment(kafka)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    listeners = _listeners(env["KAFKA_LISTENERS"])
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) <= set(protocols)
    assert set(advertised) <= set(listeners)
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert controller in listeners and controller not in advertised
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised
    node, _, voter = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].partition("@")
    assert node == env["KAFKA_NODE_ID"]
    assert voter == f"kafka:{listeners[controller][1]}"
    # The workers' STREAMDET_BROKER is an advertised listener on the compose network.
    broker = _environment(services["worker"])["STREAMDET_BROKER"]
    host, _, port = broker.rpartition(":")
    assert host == "kafka"
    assert (host, int(port)) in advertised.values()
    # The host's listener is published on the port it advertises.
    published = {}
    for p in kafka.get("ports", []):
        hostport, _, container = str(p).rpartition(":")
        published[int(container)] = int(hostport.rpartition(":")[2])
    external = [n for n, (h, _) in advertised.items() if h != "kafka"]
    assert external, "no listener for clients outside the compose network"
    for name in external:
        assert published.get(listeners[name][1]) == advertised[name][1], name
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    # The topics are the changelog that rebuilds a lost worker volume: nothing expires.
    assert env["KAFKA_LOG_RETENTION_MS"] == "-1"
    assert env.get("KAFKA_LOG_RETENTION_BYTES", "-1") == "-1"
    assert int(env["KAFKA_MESSAGE_MAX_BYTES"]) > DEFAULT_MAX_BODY
    assert "test" in kafka["healthcheck"]


def test_worker_is_scalable_and_waits_for_kafka():
    services = _compose()["services"]
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker  # both break --scale
    assert int(worker["deploy"]["replicas"]) >= 1
    assert worker["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "healthcheck" in services["kafka"]
    env = _environment(worker)
    assert env["STREAMDET_HOST"] == "0.0.0.0"  # reachable by Prometheus
    assert f":{env['STREAMDET_PORT']}/metrics" in " ".join(worker["healthcheck"]["test"])
    # The state directory is the container's own (anonymous) volume, as --scale needs.
    assert ("anonymous", None, env["STREAMDET_STATE"]) in _mounts(worker)
    for svc in services.values():
        for dep in svc.get("depends_on") or []:
            assert dep in services


def test_worker_variables_are_the_ones_streamdet_reads():
    read = _variables_read()
    assert {"STREAMDET_BROKER", "STREAMDET_PORT", "STREAMDET_K",
            "STREAMDET_SESSION_MS"} <= read, read  # the scan itself works
    env = {k: v for k, v in _environment(_compose()["services"]["worker"]).items()
           if k.startswith("STREAMDET_")}
    assert not set(env) - read, f"streamdet does not read {sorted(set(env) - read)}"
    assert {"STREAMDET_BROKER", "STREAMDET_STATE", "STREAMDET_PORT", "STREAMDET_HOST",
            "STREAMDET_SHARDS"} <= set(env)
    # Each value reaches `streamdet worker` and parses to itself.
    got = _worker_settings(env)
    for name, value in env.items():
        field = name.removeprefix("STREAMDET_").lower()
        where = "args" if field in got["args"] else "timing"
        assert field in got[where], f"{name}: no worker setting {field}"
        parsed = got[where][field]
        if isinstance(parsed, (int, float)) and not isinstance(parsed, bool):
            assert float(value) == parsed, (name, value, parsed)
        else:
            assert parsed == value, (name, value, parsed)
    assert got["args"]["foreign"] in FOREIGN_MODES


def test_every_mounted_path_exists():
    compose = _compose()
    named = set(compose.get("volumes") or {})
    for name, svc in compose["services"].items():
        for kind, source, target in _mounts(svc):
            assert target.startswith("/"), f"{name}: {target}"
            if kind == "bind":
                path = (DEPLOY / source).resolve()
                assert path.exists(), f"{name}: {source} does not exist"
                assert ROOT in path.parents, f"{name}: {source} is outside the repository"
                # A directory holds a file (.gitkeep at least), so a git clone has it too.
                assert path.is_file() or any(p.is_file() for p in path.rglob("*")), source
            elif kind == "volume":
                assert source in named, f"{name}: volume {source} is not declared"


def test_prometheus_scrapes_every_worker_and_loads_the_rules():
    services = _compose()["services"]
    prom = services["prometheus"]
    flags = dict((f.removeprefix("--").split("=", 1) + [""])[:2] for f in prom["command"])
    assert "web.listen-address" not in flags  # Grafana expects the default, 9090
    config_path = _bind_source(prom, flags["config.file"])
    assert config_path == DEPLOY / "prometheus" / "prometheus.yml"
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    worker_port = int(_environment(services["worker"])["STREAMDET_PORT"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert len(jobs) == len(config["scrape_configs"]), "duplicate job names"
    scraped = [sd for job in jobs.values() for sd in job.get("dns_sd_configs", [])
               if "worker" in sd["names"]]
    assert scraped, "no DNS service discovery of the worker replicas"
    for sd in scraped:
        assert sd.get("type", "SRV") == "A" and sd["port"] == worker_port, sd
    for job in jobs.values():
        for sd in job.get("dns_sd_configs", []):
            assert set(sd["names"]) <= set(services), sd["names"]
    # rule_files: each glob lies in a directory mounted from deploy/prometheus/rules/.
    assert config["rule_files"]
    for pattern in config["rule_files"]:
        directory, glob = posixpath.split(pattern)
        source = _bind_source(prom, directory)
        assert source == DEPLOY / "prometheus" / "rules" and source.is_dir()
        assert fnmatch.fnmatch("streamdet.yml", glob), pattern


def test_grafana_provisioning_points_at_the_mounts():
    services = _compose()["services"]
    grafana = services["grafana"]
    env = _environment(grafana)
    target = env.get("GF_PATHS_PROVISIONING", "/etc/grafana/provisioning")
    provisioning = _bind_source(grafana, target)
    assert provisioning == DEPLOY / "grafana" / "provisioning"
    datasources = sorted((provisioning / "datasources").glob("*.yml"))
    providers = sorted((provisioning / "dashboards").glob("*.yml"))
    assert datasources and providers
    prom_ports = {int(str(p).rpartition(":")[2]) for p in services["prometheus"]["ports"]}
    found = []
    for path in datasources:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert doc["apiVersion"] == 1
        for ds in doc["datasources"]:
            url = urlsplit(ds["url"])
            assert url.hostname in services, ds["url"]
            if ds["type"] == "prometheus":
                assert url.hostname == "prometheus" and url.port in prom_ports, ds["url"]
                found.append(ds)
    assert found, "no Prometheus datasource"
    assert any(ds.get("uid") for ds in found)  # dashboards refer to it by uid
    paths = []
    for path in providers:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert doc["apiVersion"] == 1
        for provider in doc["providers"]:
            assert provider["type"] == "file"
            paths.append(provider["options"]["path"])
    assert paths
    for path in paths:
        source = _bind_source(grafana, path)
        assert source == DEPLOY / "grafana" / "dashboards" and source.is_dir()


def test_readme_documents_every_variable_and_its_default():
    text = README.read_text(encoding="utf-8")
    assert "docker compose -f deploy/docker-compose.yml up --build --scale worker=" in text
    assert "--broker localhost:9094" in text
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*`(STREAMDET_[A-Z0-9_]+)`\s*\|", line)
        if m:
            rows[m[1]] = [c.strip() for c in line.strip().strip("|").split("|")]
    read = _variables_read()
    assert not read - set(rows), f"not in deploy/README.md: {sorted(read - set(rows))}"
    assert not set(rows) - read, f"documented but not read: {sorted(set(rows) - read)}"
    defaults = _worker_settings({})
    header = next(line for line in text.splitlines() if line.startswith("| variable"))
    column = [c.strip() for c in header.strip().strip("|").split("|")].index("default")
    for name, cells in rows.items():
        field = name.removeprefix("STREAMDET_").lower()
        value = defaults["args"].get(field, defaults["timing"].get(field))
        if value is not None:
            assert f"`{value}`" in cells[column], (name, value, cells[column])
