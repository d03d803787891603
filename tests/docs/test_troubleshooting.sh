#!/usr/bin/env bash
# The troubleshooting page has an entry ("### `code`") for every error code in
# base/errc.hpp, and for every code the Python modules raise as troupe.Error (a code
# added without a word there fails here, naming it).
#   usage: test_troubleshooting.sh SOURCE_DIR
set -euo pipefail
src=$1
page=$src/docs/troubleshooting.md
codes=$(sed -n '/^enum class errc/,/^};/p' "$src/base/errc.hpp" | grep -oE '^  [a-z_]+' | tr -d ' ')
codes+=" $(grep -rhoE 'Error\("[a-z_]+"' "$src"/client/python/troupe/*.py | sed -E 's/Error\("([a-z_]+)"/\1/' | sort -u)"
[ -n "$codes" ] || { echo "found no codes in $src/base/errc.hpp" >&2; exit 1; }
missing=0
count=0
for code in $(echo "$codes" | tr ' ' '\n' | sort -u); do
  count=$((count + 1))
  if ! grep -qxF "### \`$code\`" "$page"; then
    echo "$page has no entry for error code $code" >&2
    missing=$((missing + 1))
  fi
done
[ "$missing" -eq 0 ] && echo "$page explains all $count error codes"
exit "$missing"
