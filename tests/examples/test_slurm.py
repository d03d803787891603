"""examples/slurm.sbatch under a fake Slurm: `srun` and `scontrol` are stand-ins that
record what would start, and `troupe tls init` is the real one. The script must size the
job from the allocation (the coordinator expects exactly the workers that start), pass
only flags that `troupe node` takes, and remove the job's keys however it ends."""
import os
import re
import stat
import subprocess

ROOT = os.environ.get("TROUPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TROUPE = os.environ.get("TROUPE_BIN", "troupe")
SCRIPT = os.path.join(ROOT, "examples", "slurm.sbatch")

FAKE_SRUN = r"""#!/bin/bash
# Records its command line, the environment it was given and the job directory it saw.
{
  echo "ARGS $*"
  for a in "$@"; do echo "ARG $a"; done
  dir=""; prev=""
  for a in "$@"; do [ "$prev" = "--tls-dir" ] && dir=$a; prev=$a; done
  echo "TLS_DIR $dir"
  ls "$dir" 2>/dev/null | sed 's/^/TLS_FILE /'
  [ -n "$dir" ] && stat -c 'TLS_MODE %a' "$dir"
  [ -n "$dir" ] && openssl x509 -in "$dir/worker.pem" -noout -ext subjectAltName 2>/dev/null | tr -d '\n' |
    sed 's/^/TLS_SAN /'
  echo
} > "$RECORD"
exit "${SRUN_EXIT:-0}"
"""

FAKE_SCONTROL = r"""#!/bin/bash
# scontrol show hostnames LIST: one host per line (the list is n[1-3] in these tests).
[ "$1 $2" = "show hostnames" ] || exit 1
printf 'n1\nn2\nn3\n'
"""


def fake_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        p = bin_dir / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    troupe = bin_dir / "troupe"
    troupe.symlink_to(os.path.abspath(TROUPE))
    return str(bin_dir) + os.pathsep + os.environ["PATH"]


def run_script(tmp_path, ntasks, nodes, **extra):
    env = dict(os.environ)
    env.update({"PATH": fake_path(tmp_path), "HOME": str(tmp_path / "home"), "RECORD": str(tmp_path / "record"),
                "SLURM_JOB_ID": "4242", "SLURM_NTASKS": str(ntasks), "SLURM_JOB_NUM_NODES": str(nodes),
                "SLURM_NODELIST": "n[1-3]"})
    env.update({k: str(v) for k, v in extra.items()})
    p = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    record = (tmp_path / "record").read_text() if (tmp_path / "record").exists() else ""
    return p, record


def flag(record, name):
    args = [line[4:] for line in record.splitlines() if line.startswith("ARG ")]
    return args[args.index(name) + 1]


def test_counts_come_from_the_allocation(tmp_path):
    p, record = run_script(tmp_path, ntasks=6, nodes=3)
    assert p.returncode == 0, p.stderr
    # one shard server per node, every other task but the coordinator a worker
    assert flag(record, "--servers") == "3"
    assert flag(record, "--workers") == "2"
    assert "--slurm" in record
    assert "a coordinator, 3 shard servers, 2 workers" in p.stderr


def test_servers_can_be_chosen_and_are_capped(tmp_path):
    (tmp_path / "a").mkdir()
    p, record = run_script(tmp_path / "a", ntasks=8, nodes=2, SERVERS=1)
    assert p.returncode == 0, p.stderr
    assert (flag(record, "--servers"), flag(record, "--workers")) == ("1", "6")
    (tmp_path / "b").mkdir()
    p, record = run_script(tmp_path / "b", ntasks=3, nodes=3)  # 3 nodes, but 3 tasks leave room for 1 server
    assert p.returncode == 0, p.stderr
    assert (flag(record, "--servers"), flag(record, "--workers")) == ("1", "1")


def test_too_few_tasks_is_refused_before_anything_starts(tmp_path):
    p, record = run_script(tmp_path, ntasks=2, nodes=1)
    assert p.returncode == 2
    assert "at least 3" in p.stderr
    assert record == ""  # srun never ran


def test_the_keys_exist_while_the_job_runs_and_are_removed_after(tmp_path):
    p, record = run_script(tmp_path, ntasks=6, nodes=3)
    assert p.returncode == 0, p.stderr
    tls_dir = flag(record, "--tls-dir")
    assert tls_dir == str(tmp_path / "home" / ".troupe" / "tls-4242")
    files = {line[9:] for line in record.splitlines() if line.startswith("TLS_FILE ")}
    assert {"ca.pem", "coordinator.pem", "server.pem", "worker.pem", "job.secret"} <= files
    assert "TLS_MODE 700" in record
    assert not os.path.exists(tls_dir)


def test_a_failed_job_still_removes_its_keys_and_fails(tmp_path):
    p, record = run_script(tmp_path, ntasks=6, nodes=3, SRUN_EXIT=1)
    assert p.returncode == 1
    assert not os.path.exists(flag(record, "--tls-dir"))


def test_the_certificates_name_every_host_of_the_allocation(tmp_path):
    p, record = run_script(tmp_path, ntasks=6, nodes=3)
    assert p.returncode == 0, p.stderr
    sans = [line for line in record.splitlines() if line.startswith("TLS_SAN ")]
    assert sans and all(f"DNS:{h}" in sans[0] for h in ("n1", "n2", "n3")), record


def test_every_flag_it_passes_is_one_troupe_node_takes(tmp_path):
    p, record = run_script(tmp_path, ntasks=6, nodes=3)
    assert p.returncode == 0, p.stderr
    args = [line[4:] for line in record.splitlines() if line.startswith("ARG ")]
    assert args[:2] == ["troupe", "node"]
    help_text = subprocess.run([TROUPE, "node", "--help"], capture_output=True, text=True).stdout
    for a in args[2:]:
        if a.startswith("--"):
            assert re.search(r"(^|[ ,])" + re.escape(a) + r"\b", help_text, re.M), a
