#!/usr/bin/env bash
# Installs the build into a fresh prefix and checks what landed there and that it runs;
# then builds the .deb (cpack), checks its files and dependencies, unpacks it and runs the
# binary from it. Writes only under its own temporary directory.
#   usage: check_install.sh BUILD_DIR
set -euo pipefail
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_install: $*" >&2; exit 1; }

prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/troupe include/troupe/kvstore.hpp share/troupe/grafana/troupe-dashboard.json \
         share/troupe/prometheus/alerts.yml share/troupe/prometheus/prometheus.yml share/doc/troupe/README.md \
         share/doc/troupe/docs/DESIGN.md share/doc/troupe/docs/troubleshooting.md share/doc/troupe/examples/job.toml lib/python3/dist-packages/troupe/__init__.py \
         lib/python3/dist-packages/troupe/torch.py share/man/man1/troupe.1 share/man/man1/troupe-train.1 \
         share/man/man1/troupe-launch.1 share/bash-completion/completions/troupe; do
  [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
done
ls "$prefix"/lib*/libtroupe.so* >/dev/null 2>&1 || ls "$prefix"/lib/*/libtroupe.so* >/dev/null 2>&1 ||
  fail "cmake --install did not install libtroupe.so"
if [ -e "$build/lib/libtroupe_cuda.so" ]; then
  [ -e "$prefix/lib/libtroupe_cuda.so" ] || fail "the CUDA module is not in lib/ beside bin/"
fi
# The man pages are the binary's own --help: every flag of train is on its page.
man_text=$(MANWIDTH=200 man -l "$prefix/share/man/man1/troupe-train.1" 2>/dev/null) || fail "man cannot read troupe-train.1"
for flag in $("$prefix/bin/troupe" train --help | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u); do
  grep -qF -- "$flag" <<<"$man_text" || fail "troupe-train(1) does not document $flag"
done
version=$("$prefix/bin/troupe" --version)
case "$version" in "troupe "*" (commit "*")") ;; *) fail "troupe --version printed '$version'";; esac
out=$("$prefix/bin/troupe" train --dataset synthetic --train-samples 2000 --epochs 1 --metrics off 2>"$work/train.err") ||
  { cat "$work/train.err" >&2; fail "the installed troupe train failed"; }
case "$out" in *'"test_accuracy"'*) ;; *) fail "the installed troupe train printed no JSON line: $out";; esac
echo "check_install: installed tree runs: $version"

(cd "$build" && cpack -G DEB -B "$work/pkg" >/dev/null) || fail "cpack -G DEB failed"
deb=$(ls "$work"/pkg/troupe_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || fail "cpack made no .deb"
contents=$(dpkg-deb --contents "$deb")
for f in ./usr/bin/troupe ./usr/include/troupe/kvstore.hpp ./usr/share/troupe/prometheus/alerts.yml \
         ./usr/lib/python3/dist-packages/troupe/kv.py ./usr/share/man/man1/troupe-node.1 \
         ./usr/share/bash-completion/completions/troupe; do
  grep -q " $f\$" <<<"$contents" || fail "the .deb does not hold $f"
done
depends=$(dpkg-deb -f "$deb" Depends)
# Every Debian package that holds a library the binary links must be a dependency.
for lib in $(ldd "$build/bin/troupe" | awk '$3 ~ /^\// {print $3}'); do
  pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -1 | cut -d: -f1) || true
  [ -z "$pkg" ] && pkg=$(dpkg -S "$lib" 2>/dev/null | head -1 | cut -d: -f1) || true
  case "$pkg" in ""|libc6|libgcc-s1|libstdc++6|libgfortran5|libquadmath0) continue;; esac
  grep -q "$pkg" <<<"$depends" || fail "the .deb does not depend on $pkg (for $lib): $depends"
done
dpkg-deb -x "$deb" "$work/root"
"$work/root/usr/bin/troupe" train --dataset synthetic --train-samples 2000 --epochs 1 --metrics off \
  >"$work/deb.out" 2>"$work/deb.err" || { cat "$work/deb.err" >&2; fail "troupe train from the unpacked .deb failed"; }
grep -q '"test_accuracy"' "$work/deb.out" || fail "troupe train from the unpacked .deb printed no JSON line"
echo "check_install: $(basename "$deb"): $(grep -c . <<<"$contents") entries; Depends: $depends"
