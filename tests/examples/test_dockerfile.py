"""The Dockerfile, checked without a container build (no registry is reachable here for
the Debian base images): a build stage that makes the .deb with tools/dev, and a runtime
stage that installs only that .deb (so apt brings exactly its Debian dependencies), no
build packages, and runs unprivileged. Every package the runtime stage or the .deb's
dependencies name must exist in this machine's Debian 12 package index, so the image
would build from it."""
import os
import re
import subprocess

import pytest

ROOT = os.environ.get("TROUPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def stages():
    text = open(os.path.join(ROOT, "Dockerfile")).read().replace("\\\n", " ")
    out, name = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            name = m.group(2) or str(len(out))
            out[name] = {"base": m.group(1), "lines": []}
        else:
            out[name]["lines"].append(line)
    return out


def deb_depends():
    text = open(os.path.join(ROOT, "cmake", "TroupePackaging.cmake")).read()
    m = re.search(r'CPACK_DEBIAN_PACKAGE_DEPENDS\s+"(.*?)"\)', text, re.S)
    assert m, "no CPACK_DEBIAN_PACKAGE_DEPENDS"
    return [[alt.strip().split()[0] for alt in group.split("|")]
            for group in m.group(1).replace("\\\n", "").replace("\\", "").split(",")]


def known_to_apt(package):
    return subprocess.run(["apt-cache", "show", package], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def package_index():
    if not known_to_apt("dpkg"):
        pytest.skip("apt has no package index here (run apt-get update); the package names cannot be checked")


def test_two_stages_on_debian_12():
    s = stages()
    assert list(s) == ["build", "runtime"]
    assert s["build"]["base"] == "debian:12"
    assert s["runtime"]["base"] in ("debian:12", "debian:12-slim")


def test_the_build_stage_makes_the_deb_with_tools_dev():
    build = " ".join(stages()["build"]["lines"])
    assert "tools/dev package" in build
    assert "TROUPE_COMMIT" in build  # troupe --version names the commit without .git in the context


def test_the_runtime_stage_installs_only_the_deb_and_runs_unprivileged(package_index):
    lines = stages()["runtime"]["lines"]
    text = " ".join(lines)
    install = re.search(r"apt-get install (.*?)(&&|$)", text)
    assert install, text
    words = install.group(1).split()
    assert "--no-install-recommends" in words
    packages = [w for w in words if not w.startswith("-")]
    assert any(p.endswith(".deb") for p in packages), "the runtime stage must install the .deb with apt"
    for p in packages:
        assert not p.endswith("-dev") and p not in ("build-essential", "cmake"), p
        if not p.endswith(".deb"):
            assert known_to_apt(p), p
    assert any(l.startswith("COPY --from=build") for l in lines)
    users = [l.split()[1] for l in lines if l.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert any(l.startswith("ENTRYPOINT") and "troupe" in l for l in lines)
    assert "rm -rf /var/lib/apt/lists" in text


def test_every_dependency_of_the_deb_is_a_debian_package(package_index):
    groups = deb_depends()
    assert len(groups) > 5
    for group in groups:
        assert any(known_to_apt(p) for p in group), group


def test_the_build_context_leaves_build_trees_out():
    ignored = open(os.path.join(ROOT, ".dockerignore")).read().split()
    for entry in ("build/", "build-*/", "tools/bench/.venv/", ".git/"):
        assert entry in ignored, entry
