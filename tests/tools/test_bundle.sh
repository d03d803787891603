#!/usr/bin/env bash
# Tests tools/bundle (Note [Bundles]): a bundle of troupe and one more binary holds them
# and the libraries they load, but not the C library's or CUDA's; with its env.sh sourced
# (and no LD_LIBRARY_PATH before), every library it carries is loaded from it, troupe
# trains a small job, and the CUDA module, when the build has one, loads from it (here
# without a GPU it then says why); a call without a FILE gets the usage line, and a binary
# that is not built is refused, naming it.
#   usage: test_bundle.sh ROOT BUILD_DIR
set -euo pipefail
root=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
"$root/tools/bundle" "$build" "$tmp/b.tar.gz" test_cuda_module 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
mkdir "$tmp/x"
tar xzf "$tmp/b.tar.gz" -C "$tmp/x"
b=$tmp/x/troupe
[ -x "$b/bin/troupe" ] || fail "the bundle has no bin/troupe"
[ -x "$b/bin/test_cuda_module" ] || fail "the bundle has no bin/test_cuda_module"
ls "$b/lib" | grep -q '^libcaf_core\.so' || fail "lib/ lacks CAF"
ls "$b/lib" | grep -q '^libopenblas\.so' || fail "lib/ lacks OpenBLAS"
if ls "$b/lib" | grep -qE '^(libc|libm|libpthread|ld-linux)[.-]'; then fail "lib/ carries the C library"; fi
if ls "$b/lib" | grep -qE '^lib(cudart|cublas|cudnn|nccl)'; then fail "lib/ carries CUDA's libraries"; fi

# Every library the bundle carries is loaded from the bundle.
check_from_bundle() {
  (
    unset LD_LIBRARY_PATH
    # shellcheck source=/dev/null
    . "$b/env.sh"
    ldd "$1" | awk '$3 ~ /^\// {print $1, $3}'
  ) | while read -r name path; do
    if [ -e "$b/lib/$name" ] && [ "$path" != "$b/lib/$name" ]; then echo "$1 loads $name from $path"; fi
  done
}
for f in "$b/bin/troupe" "$b/bin/test_cuda_module" "$b"/lib/libtroupe_cuda.so; do
  [ -e "$f" ] || continue
  wrong=$(check_from_bundle "$f")
  [ -z "$wrong" ] || fail "not from the bundle: $wrong"
done

run_bundled() {
  (
    unset LD_LIBRARY_PATH
    # shellcheck source=/dev/null
    . "$b/env.sh"
    cd "$tmp"
    troupe "$@"
  )
}
if run_bundled train-local --dataset synthetic --train-samples 512 --epochs 1 >"$tmp/job.out" 2>"$tmp/job.err"; then
  grep -q '"test_accuracy"' "$tmp/job.out" || fail "the bundled troupe printed no job line: $(cat "$tmp/job.out")"
else
  fail "the bundled troupe failed: $(tail -3 "$tmp/job.err")"
fi
if [ -e "$b/lib/libtroupe_cuda.so" ]; then
  # On a GPU this trains; without one the module, loaded from the bundle, says why.
  if ! run_bundled train-local --device cuda --dataset synthetic --train-samples 512 --epochs 1 >/dev/null 2>"$tmp/cuda.err"; then
    if grep -q "could not load the CUDA backend" "$tmp/cuda.err"; then
      fail "the bundled CUDA module did not load: $(tail -1 "$tmp/cuda.err")"
    fi
  fi
fi

if "$root/tools/bundle" "$build" 2>"$tmp/usage"; then
  fail "tools/bundle without a FILE ran"
else
  grep -q "usage: tools/bundle BUILD_DIR FILE.tar.gz" "$tmp/usage" || fail "no usage line: $(cat "$tmp/usage")"
fi
if "$root/tools/bundle" "$build" "$tmp/c.tar.gz" no_such_binary 2>"$tmp/refused"; then
  fail "a binary that is not built was bundled"
else
  grep -q "no_such_binary is not built" "$tmp/refused" || fail "the refusal does not name the binary: $(cat "$tmp/refused")"
  [ ! -e "$tmp/c.tar.gz" ] || fail "a refused bundle was written"
fi
[ "$failures" -eq 0 ] && echo "the bundle carries troupe, runs it from its own libraries, and refuses what is not built"
exit "$failures"
