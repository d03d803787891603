"""examples/kubernetes/troupe-job.yaml checked against what `troupe node` reads: the
manifest parses; every role runs as an Indexed Job (a finished job is not restarted);
every flag and TROUPE_* variable it sets is one `troupe node --help` documents; the
metrics port that the nodes serve is the one the pods, the Service and the PodMonitor
name; the counts the coordinator expects are the Jobs' completions; nodes advertise the
DNS names the headless Service gives them; the data and the keys are mounted where the
flags point."""
import os
import re
import subprocess

import yaml

ROOT = os.environ.get("TROUPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TROUPE = os.environ.get("TROUPE_BIN", "troupe")
MANIFEST = os.path.join(ROOT, "examples", "kubernetes", "troupe-job.yaml")
INDEX_ANNOTATION = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def documents():
    with open(MANIFEST) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def by_kind(kind):
    return [d for d in documents() if d["kind"] == kind]


def jobs():
    return {j["metadata"]["name"]: j for j in by_kind("Job")}


def container(job):
    (c,) = job["spec"]["template"]["spec"]["containers"]
    return c


def env_of(c):
    return {e["name"]: e for e in c.get("env", [])}


def arg(c, name):
    args = c["args"]
    return args[args.index(name) + 1] if name in args else None


def node_help():
    return subprocess.run([TROUPE, "node", "--help"], capture_output=True, text=True, check=True).stdout


def role_jobs():
    out = {}
    for name, j in jobs().items():
        out[env_of(container(j))["TROUPE_ROLE"]["value"]] = j
    return out


def test_every_role_is_an_indexed_job_that_is_not_restarted_once_done():
    assert not by_kind("StatefulSet") and not by_kind("Deployment")
    roles = role_jobs()
    assert set(roles) == {"coordinator", "server", "worker"}
    for role, j in roles.items():
        spec = j["spec"]
        assert spec["completionMode"] == "Indexed", role
        assert spec["completions"] == spec["parallelism"], role
        assert spec["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure"), role
    assert roles["coordinator"]["spec"]["backoffLimit"] == 0
    assert roles["server"]["spec"]["backoffLimit"] == 0  # a shard server cannot come back


def test_flags_and_variables_are_the_ones_troupe_node_reads():
    text = node_help()
    documented = set(re.findall(r"TROUPE_[A-Z_]+", text))
    for name, j in jobs().items():
        c = container(j)
        assert c["args"][0] == "node", name
        for a in c["args"][1:]:
            if a.startswith("--"):
                assert re.search(r"(^|[ ,])" + re.escape(a) + r"\b", text, re.M), (name, a)
        for var in env_of(c):
            if var.startswith("TROUPE_"):
                assert var in documented, (name, var)


def test_the_metrics_port_is_the_one_served_exposed_and_scraped():
    (service,) = by_kind("Service")
    service_ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    (monitor,) = by_kind("PodMonitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    for name, j in jobs().items():
        c = container(j)
        served = arg(c, "--metrics")
        assert served is not None, f"{name} serves metrics on a port that changes (set --metrics)"
        port = int(served.rsplit(":", 1)[1])
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports[endpoint["port"]] == port, name
        assert service_ports["metrics"] == port
        labels = j["spec"]["template"]["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items()), name
    interval = int(endpoint["interval"].rstrip("s"))
    assert interval < 15  # under the default --metrics-linger: a finished node's last state is read


def test_the_coordinator_expects_the_nodes_that_start():
    roles = role_jobs()
    c = container(roles["coordinator"])
    assert int(arg(c, "--workers")) == roles["worker"]["spec"]["completions"]
    assert int(arg(c, "--servers")) == roles["server"]["spec"]["completions"]


def test_nodes_advertise_the_names_the_headless_service_gives_them():
    (service,) = by_kind("Service")
    assert service["spec"]["clusterIP"] == "None"
    service_name = service["metadata"]["name"]
    coordinator = None
    for role, j in role_jobs().items():
        pod = j["spec"]["template"]["spec"]
        assert pod["subdomain"] == service_name, role
        c = container(j)
        env = env_of(c)
        advertised = env["TROUPE_ADVERTISE"]["value"]
        # Indexed Job pods are named JOB-INDEX; the index comes from the annotation.
        m = re.fullmatch(re.escape(j["metadata"]["name"]) + r"-(0|\$\((\w+)\))\." + re.escape(service_name), advertised)
        assert m, (role, advertised)
        if m.group(2):
            names = [e["name"] for e in c["env"]]
            var = env[m.group(2)]
            assert var["valueFrom"]["fieldRef"]["fieldPath"] == INDEX_ANNOTATION
            assert names.index(m.group(2)) < names.index("TROUPE_ADVERTISE")  # $(VAR) needs it defined first
        listen_port = int(env["TROUPE_LISTEN"]["value"].rsplit(":", 1)[1])
        assert listen_port in [p["containerPort"] for p in c["ports"]], role
        if role == "coordinator":
            coordinator = f"{advertised}:{listen_port}"
        if role == "server":
            assert int(env["TROUPE_LANE_PORT"]["value"]) in [p["containerPort"] for p in c["ports"]]
    for role in ("server", "worker"):
        assert env_of(container(role_jobs()[role]))["TROUPE_COORDINATOR"]["value"] == coordinator


def test_a_worker_asks_for_its_index_as_its_rank():
    env = env_of(container(role_jobs()["worker"]))
    assert env["TROUPE_WORKER_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == INDEX_ANNOTATION


def test_the_data_and_the_keys_are_mounted_where_the_flags_point():
    for role, j in role_jobs().items():
        pod = j["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        c = container(j)
        mounts = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
        tls = mounts[env_of(c)["TROUPE_TLS_DIR"]["value"]]
        assert tls["secret"]["defaultMode"] == 0o400, role
        data = arg(c, "--data")
        if role != "server":
            assert data is not None, role
        if data is not None:
            assert "persistentVolumeClaim" in mounts[data], role


def test_the_image_is_this_version():
    version = re.search(r"project\(troupe VERSION ([0-9.]+)", open(os.path.join(ROOT, "CMakeLists.txt")).read())
    assert version, "no project version in CMakeLists.txt"
    for name, j in jobs().items():
        assert container(j)["image"] == "troupe:" + version.group(1), name
