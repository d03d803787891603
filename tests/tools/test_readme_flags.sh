#!/usr/bin/env bash
# The manual's command-line page documents every flag that a subcommand's --help lists (a
# flag added without a word there fails here, naming it).
#   usage: test_readme_flags.sh TROUPE_BIN docs/cli.md
set -euo pipefail
bin=$1
readme=$2
missing=0
for sub in train train-local evaluate node launch "tls init" "tls secret"; do
  # shellcheck disable=SC2086  # "tls init" is two words
  for flag in $("$bin" $sub --help | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u); do
    if ! grep -qE -- "${flag}([^a-z0-9-]|$)" "$readme"; then
      echo "$readme does not mention $flag (troupe $sub --help lists it)" >&2
      missing=$((missing + 1))
    fi
  done
done
[ "$missing" -eq 0 ] && echo "$readme documents every flag of every subcommand"
exit "$missing"
