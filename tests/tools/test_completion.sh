#!/usr/bin/env bash
# Tests tools/completion.bash against the built binary: subcommands, a subcommand's
# flags, a flag's choices, the subcommands of `tls`, and file names after --config.
#   usage: test_completion.sh TROUPE_BIN
set -euo pipefail
bin=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$here/../../tools/completion.bash"
failures=0
complete_words() {
  COMP_WORDS=("$bin" "$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _troupe
  echo "${COMPREPLY[*]}"
}
expect() {  # expect "WANTED" WORDS...: the completion of WORDS is exactly WANTED
  local want=$1 got
  shift
  got=$(complete_words "$@")
  if [[ $got != "$want" ]]; then
    echo "FAIL: troupe $* -> '$got', want '$want'" >&2
    failures=$((failures + 1))
  fi
}
expect "train train-local evaluate export node launch tls" ""
expect "train train-local" tr
expect "--epochs" train --ep
expect "sync async ssp allreduce" train --mode ""
expect "async allreduce" launch --local --mode a
expect "init secret" tls ""
expect "--help --hours" tls init --h
expect "gpipe 1f1b" train --epochs 3 --schedule ""
expect "--worker-index --workers" node --worker
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
touch "$dir/job.toml"
expect "$dir/job.toml" train --config "$dir/jo"
# every flag of every subcommand's --help is offered
for sub in train train-local evaluate export node launch; do
  for flag in $("$bin" "$sub" --help | grep -oE -- '--[a-z0-9][a-z0-9-]*' | sort -u); do
    [[ " $(complete_words "$sub" --) " == *" $flag "* ]] || { echo "FAIL: troupe $sub -- does not offer $flag" >&2; failures=$((failures + 1)); }
  done
done
[ "$failures" -eq 0 ] && echo "completion: all cases pass"
exit "$failures"
