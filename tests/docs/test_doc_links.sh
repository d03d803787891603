#!/usr/bin/env bash
# The manual holds together: every relative link in README.md and docs/*.md names a file
# or folder that exists, and every page in docs/ is linked from README.md or from another
# page (a moved or renamed page fails here, naming the link).
#   usage: test_doc_links.sh SOURCE_DIR
set -euo pipefail
src=$1
broken=0
links=0
pages=("$src/README.md" "$src"/docs/*.md)
for page in "${pages[@]}"; do
  dir=$(dirname "$page")
  # [text](target) and [text](target#anchor); web, mail and in-page links are not files.
  while IFS= read -r target; do
    case "$target" in http://* | https://* | mailto:* | '#'*) continue ;; esac
    links=$((links + 1))
    path=${target%%#*}
    if [ ! -e "$dir/$path" ]; then
      echo "${page#"$src"/}: the link to $target names nothing" >&2
      broken=$((broken + 1))
    fi
  done < <(grep -oE '\]\([^) ]+\)' "$page" | sed -E 's/^\]\(([^) ]+)\)$/\1/')
done
for doc in "$src"/docs/*.md; do
  name=$(basename "$doc")
  if ! grep -lqE "\]\((docs/)?$name(#[^)]*)?\)" "${pages[@]}" 2>/dev/null ||
     [ "$(grep -lE "\]\((docs/)?$name(#[^)]*)?\)" "${pages[@]}" | grep -vcxF "$doc")" -eq 0 ]; then
    echo "docs/$name is linked from no other page" >&2
    broken=$((broken + 1))
  fi
done
[ "$broken" -eq 0 ] && echo "all $links relative links resolve, and every page in docs/ is linked"
exit "$broken"
